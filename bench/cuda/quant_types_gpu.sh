#!/usr/bin/env bash
# Runs on the GPU machine, from a source tree's root: builds test_cuda
# (Release, sm_90, build-gpu/), runs the tests of the quant types on the CUDA
# backend (and the backend tests they share kernels with), then builds and runs
# bench/cuda/quant_types_bench.cu. Logs under $OUT (default ./gpu_out).
#
#   OUT=/some/dir bench/cuda/quant_types_gpu.sh
#   TEST_FILTER='Formats/Sub32Format*' SKIP_BENCH=1 bench/cuda/quant_types_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/cuda/gpu_common.sh
configure_gpu_build || exit 3
say "build test_cuda"
if ! timeout "${BUILD_TIMEOUT:-420}" cmake --build "$BUILD" -j"${JOBS:-16}" --target test_cuda > "$OUT/build.log" 2>&1; then
  say "FAIL build"; grep -E "error" "$OUT/build.log" | head -30; exit 4
fi
say "build ok"
FILTER=${TEST_FILTER:-'Formats/Sub32Format*:CudaHostEmulation*:Formats/MatvecDense*:MatvecExperts*:CudaMatmulInt8*:CudaDecodeMoe*:Archs/CudaBackendVsCpu*:CudaBackend.*'}
say "test_cuda --gtest_filter=$FILTER"
timeout "${TEST_TIMEOUT:-240}" "$BUILD/test_cuda" --gtest_filter="$FILTER" > "$OUT/test_cuda.log" 2>&1
TEST_RC=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|tests? ran" "$OUT/test_cuda.log" | sort -u | head -60 | tee -a "$OUT/summary.txt"
[ $TEST_RC -ne 0 ] && grep -E "Failure|got .* want|error" "$OUT/test_cuda.log" | head -40 | tee -a "$OUT/summary.txt"
say "tests rc=$TEST_RC"
[ "${SKIP_BENCH:-0}" = 1 ] && exit $TEST_RC
# Linked against every library of the build (the archive of the CUDA code
# also holds the backend, whose objects need the engine's libraries).
mapfile -t LIBS < <(find "$BUILD" -maxdepth 1 -name "lib*.a" | sort)
if timeout 240 "$NVCC" -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I"$ROOT/src" bench/cuda/quant_types_bench.cu \
    -Xlinker --start-group "${LIBS[@]}" -Xlinker --end-group -lcublas -lpthread -o "$BUILD/quant_types_bench" \
    > "$OUT/bench_build.log" 2>&1; then
  timeout 200 "$BUILD/quant_types_bench" > "$OUT/quant_types_bench.md" 2> "$OUT/bench.err"
  say "bench rc=$?"
  cat "$OUT/quant_types_bench.md"
else
  say "FAIL bench build"; tail -20 "$OUT/bench_build.log"
fi
exit $TEST_RC
