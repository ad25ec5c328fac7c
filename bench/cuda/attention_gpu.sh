#!/usr/bin/env bash
# Runs on the GPU machine, from a source tree's root: builds test_cuda
# (Release, sm_90, build-gpu/) unless a prebuilt one is given, runs the
# attention tests (or TEST_FILTER), then builds and runs
# bench/cuda/attention_bench.cu (prefill and decode attention at long
# contexts: old vs flash kernel, f16 vs q8_0). Logs under $OUT.
#
#   OUT=/some/dir bench/cuda/attention_gpu.sh
#   TEST_FILTER='*' bench/cuda/attention_gpu.sh      # the whole test_cuda suite
#   TEST_BIN=build-x/test_cuda bench/cuda/attention_gpu.sh   # a test_cuda built elsewhere
#   SKIP_BENCH=1 / SKIP_TESTS=1
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/cuda/gpu_common.sh
TEST_BIN=${TEST_BIN:-}
if [ -z "$TEST_BIN" ] || [ "${SKIP_BENCH:-0}" != 1 ]; then
  configure_gpu_build || exit 3
  TARGET=test_cuda
  [ -n "$TEST_BIN" ] && TARGET=moestream_cuda
  say "build $TARGET"
  if ! timeout "${BUILD_TIMEOUT:-420}" cmake --build "$BUILD" -j"${JOBS:-16}" --target $TARGET ms_quant ms_util \
      > "$OUT/build.log" 2>&1; then
    say "FAIL build"; grep -E "error" "$OUT/build.log" | head -30 | tee -a "$OUT/summary.txt"; exit 4
  fi
  say "build ok"
  [ -z "$TEST_BIN" ] && TEST_BIN=$BUILD/test_cuda
fi
TEST_RC=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  FILTER=${TEST_FILTER:-'CudaAttention*'}
  say "test_cuda --gtest_filter=$FILTER"
  timeout "${TEST_TIMEOUT:-300}" "$TEST_BIN" --gtest_filter="$FILTER" > "$OUT/test_cuda.log" 2>&1
  TEST_RC=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|^\[       OK \] CudaAttention|tests? ran" "$OUT/test_cuda.log" | sort -u | head -60 | tee -a "$OUT/summary.txt"
  [ $TEST_RC -ne 0 ] && grep -E "Failure|got .* want|error|Expected|Which is" "$OUT/test_cuda.log" | head -40 | tee -a "$OUT/summary.txt"
  say "tests rc=$TEST_RC"
fi
[ "${SKIP_BENCH:-0}" = 1 ] && exit $TEST_RC
# The kernels only (as tools/gpu_check.sh links kernel_bench): the backend's
# objects would pull in the engine's libraries.
KB_LIB=$BUILD/attention_bench_lib
rm -rf "$KB_LIB" && mkdir -p "$KB_LIB"
CUDA_LIB=$(find "$BUILD" -name libmoestream_cuda.a | head -1)
(cd "$KB_LIB" && ar x "$CUDA_LIB" && rm -f *backend*.o && ar rcs libkernels.a *.o)
LIBS=("$KB_LIB/libkernels.a" "$(find "$BUILD" -name libms_quant.a | head -1)" "$(find "$BUILD" -name libms_util.a | head -1)")
if timeout 240 "$NVCC" -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I"$ROOT/src" bench/cuda/attention_bench.cu \
    "${LIBS[@]}" -o "$BUILD/attention_bench" > "$OUT/bench_build.log" 2>&1; then
  timeout "${BENCH_TIMEOUT:-200}" "$BUILD/attention_bench" > "$OUT/attention_bench.md" 2> "$OUT/bench.err"
  say "bench rc=$?"
  cat "$OUT/attention_bench.md"
else
  say "FAIL bench build"; tail -20 "$OUT/bench_build.log" | tee -a "$OUT/summary.txt"
fi
exit $TEST_RC
