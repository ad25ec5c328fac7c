#!/usr/bin/env bash
# llama.cpp's llama-bench on the same file and machine as moestream's budget
# rows: all layers on the GPU, the experts of N layers on the CPU
# (--n-cpu-moe N), flash attention, the same -p/-n/-r as tools/hybrid_device.sh,
# so the comparison is one run on one machine. Builds llama-bench with CUDA
# from .llama/llama-src.tar.xz (tools/make_llama_src.sh) once per machine.
#
#   OUT=dir tools/llamacpp_sweep.sh MODEL.gguf [N,N,...]     default N: 20,28,48
#   LLAMA_LOAD_MODE=none,mmap (LLAMA_MMAP=0,1 for an older llama-bench; default: both),
#   LLAMA_BUILD_TIMEOUT=seconds (default 900), LLAMA_BUILD_ONLY=1 (build, run nothing),
#   LLAMA_ARGS="-t 16" (more llama-bench arguments), LLAMA_FORMAT=json (default md),
#   LLAMA_TAG=name (writes llama_bench_name.FORMAT: several runs in one $OUT)
#   (for the 16.1 GiB Qwen3-30B-A3B Q4_K: about 10.5, 8 and 1.5 GiB of VRAM)
#   carry: .llama (and .deps for moestream's own build)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
MODEL=${1:?usage: tools/llamacpp_sweep.sh MODEL.gguf [n_cpu_moe list]}
NCMOE=${2:-20,28,48}
SRC=${LLAMA_SRC:-$ROOT/.llama/llama-src.tar.xz}
BUILD=${LLAMA_BUILD:-/tmp/llama-build}
mkdir -p "$OUT"
BENCH=$BUILD/bin/llama-bench
if [ ! -x "$BENCH" ]; then
  [ -f "$SRC" ] || { echo "llamacpp_sweep: no $SRC (run tools/make_llama_src.sh where the network is)"; exit 1; }
  mkdir -p /tmp/llama-src && tar xJf "$SRC" -C /tmp/llama-src
  cmake -S /tmp/llama-src -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_CURL=OFF > "$OUT/llama_configure.log" 2>&1 || { echo "llamacpp_sweep: configure failed"; tail -20 "$OUT/llama_configure.log"; exit 1; }
  timeout "${LLAMA_BUILD_TIMEOUT:-900}" cmake --build "$BUILD" --target llama-bench -j"$(nproc)" > "$OUT/llama_build.log" 2>&1 ||
    { echo "llamacpp_sweep: build failed or timed out (run again on the same machine to resume)"; tail -5 "$OUT/llama_build.log"; exit 1; }
fi
[ -n "${LLAMA_BUILD_ONLY:-}" ] && exit 0
echo "llama.cpp $(cat "$ROOT/.llama/llama-src.version" 2>/dev/null || echo '(version unknown)')"
# How llama.cpp holds the weights it leaves on the CPU: read into its own
# (pinned, where CUDA offers it) host buffers, or mmap'ed pages (its default).
# Pinned buffers let it copy them to the GPU for prompt batches at the
# link's pinned rate. Both by default: each row of the comparison takes
# llama.cpp's better one. (Newer llama-bench: -lm none|mmap; older: -mmp 0|1.)
help=$("$BENCH" --help 2>&1)  # (not piped into grep -q: under pipefail its early exit fails the test)
if [[ "$help" == *--load-mode* ]]; then load=(-lm "${LLAMA_LOAD_MODE:-none,mmap}")
else load=(-mmp "${LLAMA_MMAP:-0,1}"); fi
fmt=${LLAMA_FORMAT:-md}
name=llama_bench${LLAMA_TAG:+_$LLAMA_TAG}
read -r -a extra <<< "${LLAMA_ARGS:-}"
timeout 900 "$BENCH" -m "$MODEL" -ngl 99 -fa 1 -ncmoe "$NCMOE" "${load[@]}" -p 512 -n 128 -r 2 "${extra[@]}" -o "$fmt" \
  2> "$OUT/$name.err" |
  tee "$OUT/$name.$fmt"
