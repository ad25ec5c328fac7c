#!/usr/bin/env bash
# Prefetch A/B on the GPU machine: the hybrid GPU tests, then for each budget
# `moestream bench -p 0 -n 64` (decode, random tokens) with --prefetch off,
# next and auto: tokens/s, the telemetry's split and the prediction's
# precision / coverage (tools/hybrid_bench_row.py).
#
#   OUT=dir tools/prefetch_ab.sh [budgets...]   (default 10.5G 8G 1.5G)
#   SKIP_BUILD=1 reuse build-gpu;  SKIP_TESTS=1;  MODES="off auto";  POLICY=adaptive;
#   BENCH_MODEL=/tmp/q.gguf;  carry .deps
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/hybrid_common.sh
BUDGETS=("$@"); [ ${#BUDGETS[@]} -eq 0 ] && BUDGETS=(10.5G 8G 1.5G)
read -r -a MODES <<< "${MODES:-off next auto}"
POL=${POLICY:-default}
hybrid_build
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 240 build-gpu/test_cuda --gtest_filter='*Hybrid*' > "$OUT/hybrid_tests.log" 2>&1
  grep -E "^\[  (PASSED|FAILED)|Failure|^\[  FAILED" "$OUT/hybrid_tests.log" | head -20
fi
hybrid_model
for b in "${BUDGETS[@]}"; do
  for mode in "${MODES[@]}"; do
    timeout 180 $MS bench -m "$M" -p "${PP:-0}" -n 64 -r 1 --backend cuda --vram "$b" --policy "$POL" --prefetch "$mode" \
      --json -o /tmp/pf.json > /dev/null 2> /tmp/pf.err || { echo "== $b $mode failed: $(tail -1 /tmp/pf.err)"; continue; }
    python3 tools/hybrid_bench_row.py /tmp/pf.json "== $b $POL $mode"
  done
done
