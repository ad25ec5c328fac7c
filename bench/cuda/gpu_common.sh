# Shared start of the bench/cuda/*_gpu.sh scripts (attention_gpu.sh,
# quant_types_gpu.sh), sourced from the source tree's root after set -uo
# pipefail: sets ROOT, OUT (default $ROOT/gpu_out, created), BUILD
# ($ROOT/build-gpu), START, NVCC and GEN (Ninja when there is one), defines
# say (a timestamped line, also appended to $OUT/summary.txt) and
# configure_gpu_build, and logs the device.
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
mkdir -p "$OUT"
BUILD=$ROOT/build-gpu
START=$(date +%s)
GPU_SCRIPT=$(basename "$0" .sh)
say() { echo "[$GPU_SCRIPT $(($(date +%s) - START))s] $*" | tee -a "$OUT/summary.txt"; }
[ -f tools/device_env.sh ] && source tools/device_env.sh
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader 2>&1 | sed 's/^/device: /' | tee -a "$OUT/summary.txt"

# Configures $BUILD: Release, sm_90, CUDA on, tests on, benches off (the
# scripts build their bench by hand). Log in $OUT/configure.log; returns
# non-zero (after saying so) when cmake fails.
configure_gpu_build() {
  say "configure"
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_CUDA_STANDARD=17 -DCMAKE_CUDA_COMPILER="$NVCC" -DMOESTREAM_CUDA=ON -DMOESTREAM_BENCH=OFF \
    -DMOESTREAM_TESTS=ON > "$OUT/configure.log" 2>&1 || { say "FAIL configure"; tail -20 "$OUT/configure.log"; return 1; }
}
