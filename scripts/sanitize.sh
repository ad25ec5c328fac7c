#!/usr/bin/env bash
# Builds the unit tests and the moestream binary with AddressSanitizer +
# UndefinedBehaviorSanitizer (CUDA and benchmarks off) in build-sanitize/ and
# runs the default suite (ctest -LE slow) there; any finding fails the run.
#   scripts/sanitize.sh [ctest args...]     e.g. scripts/sanitize.sh -R ThreadPool
# Compiler: $CXX (default g++; clang++ works too). JOBS: parallel build jobs.
# Slow (a full build, tests 2-5x slower): a nightly job, not part of CI
# (see the README's "Sanitizers").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
CXX=${CXX:-g++}
CC=${CC:-$([ "$(basename "$CXX")" = clang++ ] && echo clang || echo gcc)}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# Build type "Sanitize" (no per-type flags): -O1 keeps the kernels' tests
# fast enough, -g1 gives file:line in reports, and asserts stay on (no NDEBUG).
LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Sanitize -DMOESTREAM_CUDA=OFF -DMOESTREAM_BENCH=OFF \
      -DMOESTREAM_TESTS=ON -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="$CC" "${LAUNCHER[@]}" \
      "-DCMAKE_CXX_FLAGS=-O1 -g1 $SAN" "-DCMAKE_C_FLAGS=-O1 -g1 $SAN" "-DCMAKE_EXE_LINKER_FLAGS=$SAN" >/dev/null
cmake --build build-sanitize -j "${JOBS:-$(nproc)}"
# Leaks count as findings; UBSan prints the stack and stops at the first one.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)" -LE slow "$@"
echo "sanitize: the default suite passed under ASan+UBSan ($CXX)"
