#!/usr/bin/env bash
# Builds llama.cpp's llama-bench and llama-server for the GPU machine on this
# machine, from .llama/llama-src.tar.xz (tools/make_llama_src.sh), and packs
# them into .llb/ to be carried to the device: no device time goes to
# building llama.cpp (~8 minutes of 12 cores there; about an hour of 2 busy
# cores here, in the background). tools/matrix.py runs them there.
#
# The ggml backends are loadable modules (GGML_BACKEND_DL), so three parts
# build side by side:
#  - the host side (llama-bench, llama-server, libllama, libggml), configured
#    without CUDA (build_host/);
#  - the CUDA backend for sm_90, libggml-cuda.so (build/: the long part);
#  - the CPU backend, built apart with the GPU host's instruction sets named
#    (AVX2, AVX-VNNI, AVX-512 F/BW/VL/DQ/CD/VBMI/VNNI/BF16, AMX: what
#    GGML_NATIVE gives on that Xeon; check `lscpu` there if the machine
#    changes), so llama.cpp's --n-cpu-moe rows are not handicapped by a
#    generic CPU build. LLB_CPU=npm takes instead the CPU backends of the
#    same llama.cpp release as node-llama-cpp ships them prebuilt
#    (@node-llama-cpp/linux-x64-cuda: one per x86 generation, AVX-512 and
#    AMX included; ggml loads the best one for the CPU at run time), which
#    saves that build; it needs npm and the network here.
# .llb/ holds the files xz-compressed (~45 MB, most of it libggml-cuda.so),
# an empty libnccl.so.2 stand-in for hosts without NCCL (ggml-cuda links it
# for multi-GPU; one GPU never calls it) and llama-src.version (a build
# from the tarball reports its commit as "unknown"; tools/matrix.py reads it
# there).
#
#   [LLB_CPU=npm] tools/llama_bench_local.sh [WORK_DIR]      (default /work/llama_local)
#
# On the device (carry .llb): `eval "$(tools/llb_unpack.sh /tmp/lb)"`, then
# `python3 tools/matrix.py --llama-bin /tmp/lb/bin ...`.
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
j=$(nproc)
cmake -S "$W/src" -B "$W/build_host" "${common[@]}" -DGGML_CUDA=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF > "$W/cfg_host.log"
cmake -S "$W/src" -B "$W/build" "${common[@]}" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_SERVER=OFF \
  > "$W/cfg.log"
pids=()
cmake --build "$W/build_host" --target llama-bench llama-server -j"$j" > "$W/build_host.log" & pids+=($!)
cmake --build "$W/build" --target ggml-cuda -j"$j" > "$W/build.log" & pids+=($!)
if [ "${LLB_CPU:-build}" = npm ]; then
  cpu_dir=$W/npm_cpu
  if [ ! -f "$cpu_dir/package/bins/linux-x64-cuda/libggml-cpu-x64.so" ]; then
    ver=$(sed -n 's/.*(node-llama-cpp \(.*\))/\1/p' .llama/llama-src.version)
    [ "$ver" = latest ] && ver=$(npm view node-llama-cpp version)
    mkdir -p "$cpu_dir" && (cd "$cpu_dir" && npm pack --silent "@node-llama-cpp/linux-x64-cuda@$ver" > /dev/null &&
      tar xzf node-llama-cpp-linux-x64-cuda-*.tgz --wildcards 'package/bins/linux-x64-cuda/libggml-cpu-*.so' &&
      rm -f node-llama-cpp-linux-x64-cuda-*.tgz)
  fi
else
  cmake -S "$W/src" -B "$W/build_cpu" "${common[@]}" -DGGML_CUDA=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON \
    -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON \
    -DGGML_AMX_BF16=ON > "$W/cfg_cpu.log"
  cmake --build "$W/build_cpu" --target ggml-cpu -j"$j" > "$W/build_cpu.log" & pids+=($!)
fi
for p in "${pids[@]}"; do wait "$p"; done

# Packed into .llb.part, renamed to .llb when whole (the lead may carry it any time).
out=$REPO/.llb.part
rm -rf "$out" && mkdir -p "$out"
pack() {  # source name-in-.llb
  strip -o "$out/$2" "$1" && xz -9 -T0 "$out/$2"
}
h=$W/build_host/bin
pack "$h/llama-bench" llama-bench
pack "$h/llama-server" llama-server
# Every library of this build the two load (by the names they ask for: libllama.so.0, libmtmd.so.0, ...).
for l in $( (ldd "$h/llama-bench"; ldd "$h/llama-server") | awk -v d="$h/" 'index($3, d) == 1 {print $1}' | sort -u); do
  pack "$(readlink -f "$h/$l")" "$l"
done
pack "$W/build/bin/libggml-cuda.so" libggml-cuda.so
if [ "${LLB_CPU:-build}" = npm ]; then
  for f in "$cpu_dir"/package/bins/linux-x64-cuda/libggml-cpu-*.so; do pack "$f" "$(basename "$f")"; done
else
  pack "$W/build_cpu/bin/libggml-cpu.so" libggml-cpu.so
fi
echo "" > "$W/nccl_stub.c"
gcc -shared -fPIC -o "$out/libnccl_stub.so.2" -Wl,-soname,libnccl.so.2 "$W/nccl_stub.c"
cp .llama/llama-src.version "$out/llama-src.version"
rm -rf "$REPO/.llb" && mv "$out" "$REPO/.llb"
echo "wrote $REPO/.llb ($(du -sh "$REPO/.llb" | cut -f1)): llama.cpp $(cat .llama/llama-src.version)"
