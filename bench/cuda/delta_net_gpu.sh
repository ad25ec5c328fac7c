#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root: the Gated DeltaNet GPU
# tests (tests/cuda/delta_net_test.cpp and the end-to-end qwen35moe tests)
# and bench/cuda/delta_net_bench.cu, from binaries built on the dev machine
# and carried in $CARRY (default build-gdn/carry: test_cuda, delta_net_bench
# and the two shared libraries the GPU machine lacks, libpcre2-8 and
# libutf8proc). Logs and the bench table under $OUT; a short summary on stdout.
#
#   bench/cuda/delta_net_gpu.sh                     # tests, then the bench
#   FILTER='CudaDeltaNet*' bench/cuda/delta_net_gpu.sh
#   BENCH_ARGS='512 2048 8192' bench/cuda/delta_net_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
C=${CARRY:-build-gdn/carry}
export LD_LIBRARY_PATH="$C:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
START=$(date +%s)
timeout 300 "$C/test_cuda" --gtest_filter="${FILTER:-CudaDeltaNet*:*Qwen35*}" > "$OUT/test.log" 2>&1
TEST_RC=$?
echo "tests rc=$TEST_RC ($(($(date +%s) - START)) s)"
grep -E "^\[  (PASSED|FAILED) |tests? ran|Failure$" "$OUT/test.log" | sort | uniq -c | head -40
grep -E -A4 "Failure$" "$OUT/test.log" | head -60
grep -E "^\[ delta chunked" "$OUT/test.log" | awk '{print}' | sort -t'(' -k1,1 | tail -30
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  timeout 200 "$C/delta_net_bench" ${BENCH_ARGS:-} > "$OUT/bench.md" 2> "$OUT/bench.err"
  echo "bench rc=$? ($(($(date +%s) - START)) s)"
  cat "$OUT/bench.md" "$OUT/bench.err"
fi
[ $TEST_RC -eq 0 ]
