#!/usr/bin/env bash
# On the GPU machine: unpacks .llb/ (tools/llama_bench_local.sh: llama-bench,
# llama-server and their libraries, xz'd) into DEST/bin and prints the export
# that makes them run, for tools/matrix.py's --llama-bin DEST/bin:
#
#   eval "$(tools/llb_unpack.sh /tmp/lb)" && python3 tools/matrix.py --llama-bin /tmp/lb/bin ...
#
# The CUDA toolkit's lib64 and lib give libcublas and libnccl; where the host
# has no libnccl.so.2, .llb's empty stand-in is used (ggml-cuda links NCCL
# for multi-GPU work, which one GPU never calls).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:?usage: tools/llb_unpack.sh DEST}
[ -d .llb ] || { echo "no .llb/ here (make it with tools/llama_bench_local.sh and carry it)" >&2; exit 1; }
mkdir -p "$DEST/bin"
for f in .llb/*.xz; do
  out="$DEST/bin/$(basename "$f" .xz)"
  [ -f "$out" ] || xz -dc "$f" > "$out"
done
chmod +x "$DEST/bin/llama-bench"
[ -f "$DEST/bin/llama-server" ] && chmod +x "$DEST/bin/llama-server"
(cd "$DEST/bin" && ln -sf libllama.so.0 libllama.so && ln -sf libggml.so.0 libggml.so &&
  ln -sf libggml-base.so.0 libggml-base.so && ln -sf libllama-common.so.0 libllama-common.so)
path="$DEST/bin:/usr/local/cuda/lib64:/usr/local/cuda/lib"
if LD_LIBRARY_PATH="$path" ldd "$DEST/bin/libggml-cuda.so" 2> /dev/null | grep -q "libnccl.so.2 => not found"; then
  mkdir -p "$DEST/nccl_stub" && cp .llb/libnccl_stub.so.2 "$DEST/nccl_stub/libnccl.so.2"
  path="$path:$DEST/nccl_stub"
fi
echo "export LD_LIBRARY_PATH=\"$path\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
