#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (and llama-server) for the GPU machine on
# this machine, from .llama/llama-src.tar.xz (tools/make_llama_src.sh), and
# packs it into .llb/ to be carried to the device: no device time goes to
# building llama.cpp (~8 minutes of 12 cores there; ~45 minutes of 2 cores
# here, in the background).
#
# The CUDA backend is built for sm_90 as a loadable module (GGML_BACKEND_DL),
# and the CPU backend apart with the GPU host's instruction sets named
# (AVX2, AVX-VNNI, AVX-512 F/BW/VL/DQ/CD/VBMI/VNNI/BF16, AMX: what
# GGML_NATIVE gives on that Xeon; check `lscpu` there if the machine
# changes), so llama.cpp's --n-cpu-moe rows are not handicapped by a generic
# CPU build. .llb/ holds the files xz-compressed (~40 MB, most of it
# libggml-cuda.so) plus an empty libnccl.so.2 stand-in for hosts without
# NCCL (ggml-cuda links it for multi-GPU; one GPU never calls it).
#
#   tools/llama_bench_local.sh [WORK_DIR]      (default /work/llama_local)
#
# On the device (carry .llb): `eval "$(tools/llb_unpack.sh /tmp/lb)"`, then
# LLAMA_BUILD=/tmp/lb for tools/long_context_device.sh (llama-bench) and
# tools/serve_load_device.sh (llama-server: its build step is then skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
W=${1:-/work/llama_local}
[ -f .llama/llama-src.tar.xz ] || { echo "no .llama/llama-src.tar.xz: run tools/make_llama_src.sh first" >&2; exit 1; }
mkdir -p "$W/src"
[ -f "$W/src/CMakeLists.txt" ] || tar xJf .llama/llama-src.tar.xz -C "$W/src"
common=(-DCMAKE_BUILD_TYPE=Release -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
if command -v ccache > /dev/null; then
  common+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$W/src" -B "$W/build" "${common[@]}" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF > "$W/cfg.log"
cmake --build "$W/build" --target ggml-cuda llama-bench llama-server -j"$(nproc)" > "$W/build.log"
cmake -S "$W/src" -B "$W/build_cpu" "${common[@]}" -DGGML_CUDA=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON \
  -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON \
  -DGGML_AMX_BF16=ON > "$W/cfg_cpu.log"
cmake --build "$W/build_cpu" --target ggml-cpu -j"$(nproc)" > "$W/build_cpu.log"

out=$REPO/.llb
rm -rf "$out" && mkdir -p "$out"
pack() {  # source name-in-.llb
  strip -o "$out/$2" "$1" && xz -9 -T0 "$out/$2"
}
b=$W/build/bin
pack "$b/llama-bench" llama-bench
pack "$b/libllama-bench-impl.so" libllama-bench-impl.so
pack "$(readlink -f "$b/libllama.so")" libllama.so.0
pack "$(readlink -f "$b/libllama-common.so")" libllama-common.so.0
pack "$(readlink -f "$b/libggml.so")" libggml.so.0
pack "$(readlink -f "$b/libggml-base.so")" libggml-base.so.0
pack "$b/libggml-cuda.so" libggml-cuda.so
pack "$W/build_cpu/bin/libggml-cpu.so" libggml-cpu.so
if [ -x "$b/llama-server" ]; then
  pack "$b/llama-server" llama-server
  pack "$b/libllama-server-impl.so" libllama-server-impl.so
fi
echo "" > "$W/nccl_stub.c"
gcc -shared -fPIC -o "$out/libnccl_stub.so.2" -Wl,-soname,libnccl.so.2 "$W/nccl_stub.c"
echo "wrote $out ($(du -sh "$out" | cut -f1)): llama.cpp $(cat .llama/llama-src.version)"
