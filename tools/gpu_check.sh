#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root: builds the CUDA backend
# and its tests (Release, build-gpu/), runs the GPU tests, builds and runs the
# kernel bench, and leaves logs and tables under $OUT (default ./gpu_out).
#
#   OUT=/some/dir tools/gpu_check.sh        # everything (well under 9 minutes)
#   SKIP_BENCH=1 tools/gpu_check.sh         # tests only
#   FULL_BUILD=1 tools/gpu_check.sh         # build every target, not just test_cuda
#   BENCH_ARGS=--quick tools/gpu_check.sh   # shorter bench (3 formats)
#   TEST_FILTER='CudaAttention*:CudaMatmul*' tools/gpu_check.sh   # only these gtests (no ctest)
#   SKIP_TESTS=1 tools/gpu_check.sh         # build test_cuda, run the bench only
#   CUDA_ARCH=90 (default: 90, H100)
#
# The machine has cmake, ninja and nvcc but may lack the Debian dev packages
# the build needs; tools/device_env.sh points CMake at .deps/root when the lead
# has carried it (tools/make_device_deps.sh makes it). Missing packages are
# reported by name before the build starts.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ARCH=${CUDA_ARCH:-90}
BUILD=$ROOT/build-gpu
JOBS=${JOBS:-16}
START=$(date +%s)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

say() { echo "[gpu_check $(($(date +%s) - START))s] $*" | tee -a "$SUMMARY"; }

[ -f tools/device_env.sh ] && source tools/device_env.sh

# ------------------------------------------------------------------ environment
{
  echo "## machine"; uname -a; nproc
  echo "## nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi failed"
  echo "## nvcc"; (command -v nvcc || echo /usr/local/cuda/bin/nvcc) ; (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) 2>&1 | tail -2
  echo "## cmake"; cmake --version | head -1
  echo "## ninja"; ninja --version 2>&1 || echo "no ninja"
} > "$OUT/env.txt" 2>&1
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || { say "FAIL: no nvcc found (PATH or /usr/local/cuda/bin)"; exit 1; }
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>/dev/null | \
  sed 's/^/device: /' | tee -a "$SUMMARY"

# ------------------------------------------------------------------ dependencies
# header -> Debian package, as CMakeLists.txt finds them (tests need GoogleTest).
missing=()
search_dirs=(/usr/include /usr/local/include)
IFS=: read -r -a prefixes <<< "${CMAKE_PREFIX_PATH:-}"
for p in "${prefixes[@]}"; do [ -n "$p" ] && search_dirs+=("$p/include"); done
have_header() {
  local h=$1 d
  for d in "${search_dirs[@]}"; do [ -e "$d/$h" ] && return 0; done
  return 1
}
check_dep() { have_header "$1" || missing+=("$2 (header $1)"); }
check_dep gtest/gtest.h libgtest-dev
check_dep gmock/gmock.h libgmock-dev
check_dep CLI/CLI.hpp libcli11-dev
check_dep nlohmann/json.hpp nlohmann-json3-dev
check_dep httplib.h libcpp-httplib-dev
check_dep pcre2.h libpcre2-dev
check_dep utf8proc.h libutf8proc-dev
if [ ${#missing[@]} -gt 0 ]; then
  say "FAIL: the build needs these packages, not found on this machine:"
  for m in "${missing[@]}"; do say "  - $m"; done
  say "Carry them: run tools/make_device_deps.sh on the dev machine (makes .deps/root), and carry .deps/."
  exit 2
fi

# ------------------------------------------------------------------ build
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${GEN[1]:-Unix Makefiles}" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"  # generator changed
fi
say "configure (sm_$ARCH, Release) -> build-gpu"
# CMAKE_CUDA_STANDARD=17: CMake < 3.26 has no C++20 dialect flag for nvcc and
# refuses CUDA targets inheriting CXX_STANDARD 20; the CUDA sources are C++17.
if ! timeout 120 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_CUDA_STANDARD=17 -DCMAKE_CUDA_COMPILER="$NVCC" \
    -DMOESTREAM_CUDA=ON -DMOESTREAM_BENCH=OFF -DMOESTREAM_TESTS=ON > "$OUT/configure.log" 2>&1; then
  say "FAIL: configure (see configure.log):"; tail -20 "$OUT/configure.log" | tee -a "$SUMMARY"; exit 3
fi
TARGETS=(--target test_cuda)
[ "${FULL_BUILD:-0}" = 1 ] && TARGETS=()
say "build ${TARGETS[*]:-all} (-j$JOBS)"
if ! timeout 420 cmake --build "$BUILD" -j"$JOBS" "${TARGETS[@]}" > "$OUT/build.log" 2>&1; then
  say "FAIL: build (see build.log); first errors:"
  grep -E "error|Error" "$OUT/build.log" | head -20 | tee -a "$SUMMARY"
  exit 4
fi
say "build ok"

# ------------------------------------------------------------------ tests
TEST_RC=0
if [ "${SKIP_TESTS:-0}" = 1 ]; then
  say "tests skipped (SKIP_TESTS=1)"
elif [ -n "${TEST_FILTER:-}" ]; then
  say "test_cuda --gtest_filter=$TEST_FILTER"
  timeout 240 "$BUILD/test_cuda" --gtest_filter="$TEST_FILTER" > "$OUT/test_cuda.log" 2>&1
  TEST_RC=$?
  grep -E "^\[  (PASSED|SKIPPED|FAILED) |device   \]|tests? ran" "$OUT/test_cuda.log" | sort -u | head -40 | tee -a "$SUMMARY"
  [ $TEST_RC -ne 0 ] && grep -E "Failure|got .* want" "$OUT/test_cuda.log" | head -30 | tee -a "$SUMMARY"
else
  say "ctest -L gpu"
  timeout 240 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 120 > "$OUT/ctest.log" 2>&1
  TEST_RC=$?
  grep -E "tests passed|tests failed" "$OUT/ctest.log" | tee -a "$SUMMARY"
  if [ $TEST_RC -ne 0 ]; then
    say "FAILED tests:"
    sed -n '/The following tests FAILED/,$p' "$OUT/ctest.log" | tee -a "$SUMMARY"
    grep -E "Failure|got .* want" "$OUT/ctest.log" | head -30 | tee -a "$SUMMARY"
  fi
  # the direct gtest output too (names of skipped tests and their reasons)
  timeout 240 "$BUILD/test_cuda" --gtest_brief=0 > "$OUT/test_cuda.log" 2>&1 || true
  grep -E "^\[  (SKIPPED|FAILED) \]|device   \]" "$OUT/test_cuda.log" | sort -u | head -40 | tee -a "$SUMMARY"
fi

# ------------------------------------------------------------------ bench
BENCH_RC=0
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  say "kernel bench: build"
  LIBS=()
  for l in moestream_cuda ms_quant ms_util; do
    f=$(find "$BUILD" -name "lib$l.a" | head -1)
    [ -n "$f" ] || { say "FAIL: lib$l.a not found in build-gpu"; exit 5; }
    LIBS+=("$f")
  done
  # The kernels only: libmoestream_cuda.a also holds the CUDA backend, whose
  # objects the linker would pull in (for weak std::string instantiations) and
  # which need the engine and model libraries.
  KB_LIB=$BUILD/kernel_bench_lib
  rm -rf "$KB_LIB" && mkdir -p "$KB_LIB"
  (cd "$KB_LIB" && ar x "${LIBS[0]}" && rm -f *backend*.o && ar rcs libkernels.a *.o)
  LIBS[0]=$KB_LIB/libkernels.a
  if ! timeout 180 "$NVCC" -O3 -std=c++17 -arch=sm_"$ARCH" -lineinfo --expt-relaxed-constexpr -I"$ROOT/src" \
      "$ROOT/bench/cuda/kernel_bench.cu" "${LIBS[@]}" -o "$BUILD/kernel_bench" > "$OUT/bench_build.log" 2>&1; then
    say "FAIL: kernel bench build (see bench_build.log)"; tail -20 "$OUT/bench_build.log" | tee -a "$SUMMARY"
    BENCH_RC=1
  else
    say "kernel bench: run ${BENCH_ARGS:-}"
    timeout 240 "$BUILD/kernel_bench" ${BENCH_ARGS:-} > "$OUT/kernel_bench.md" 2> "$OUT/kernel_bench.err"
    BENCH_RC=$?
    [ $BENCH_RC -ne 0 ] && { say "kernel bench exit $BENCH_RC:"; tail -5 "$OUT/kernel_bench.err" | tee -a "$SUMMARY"; }
    grep -E "copy|read-only|Rough" "$OUT/kernel_bench.md" | tee -a "$SUMMARY"
    grep -E "^\| (ffn|attn|output).*q4_K" "$OUT/kernel_bench.md" | tee -a "$SUMMARY"
  fi
fi

say "done: tests rc=$TEST_RC bench rc=$BENCH_RC; logs in $OUT"
[ $TEST_RC -eq 0 ] && [ $BENCH_RC -eq 0 ]
