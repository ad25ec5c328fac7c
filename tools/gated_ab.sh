#!/usr/bin/env bash
# Gated decode A/B on the GPU machine: the GPU tests (ctest -L gpu), then for
# each budget `moestream bench -p 0 -n 64` (decode) with the gated step and
# with a round trip per tiered layer (--no-gated), interleaved
# REPS times (the machine varies ±10% run to run), plus the skew-1.0 model at
# 8G with the adaptive policy. One line per run (tools/hybrid_bench_row.py).
#
#   OUT=dir tools/gated_ab.sh [budgets...]   (default 10.5G 8G 1.5G)
#   SKIP_BUILD=1;  SKIP_TESTS=1;  REPS=2;  POLICY=default;  NO_SKEW=1;  carry .deps
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/hybrid_common.sh
BUDGETS=("$@"); [ ${#BUDGETS[@]} -eq 0 ] && BUDGETS=(10.5G 8G 1.5G)
POL=${POLICY:-default}
START=$(date +%s)
hybrid_build
if [ -z "${SKIP_TESTS:-}" ]; then
  (cd build-gpu && timeout 400 ctest -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1)
  grep -E "tests passed|FAILED|Failed" "$OUT/ctest_gpu.log" | head -20
fi
hybrid_model
row() {  # model label budget policy gated
  local no_gated=""; [ "$5" = 0 ] && no_gated=--no-gated
  timeout 180 $MS bench -m "$1" -p "${PP:-0}" -n 64 -r 1 --backend cuda --vram "$3" $no_gated \
    --policy "$4" --json -o /tmp/g.json > /dev/null 2> /tmp/g.err || { echo "== $2 $3 gated=$5 failed: $(tail -1 /tmp/g.err)"; return; }
  python3 tools/hybrid_bench_row.py /tmp/g.json "== $2 $3 $4 gated=$5"
}
for rep in $(seq "${REPS:-2}"); do
  for b in "${BUDGETS[@]}"; do
    row "$M" uniform "$b" "$POL" 1
    row "$M" uniform "$b" "$POL" 0
  done
done
echo "(uniform rows done after $(( $(date +%s) - START )) s)"
if [ -z "${NO_SKEW:-}" ]; then
  MS_SKEW=${BENCH_MODEL_SKEW:-/tmp/q_skew1.gguf}
  [ -f "$MS_SKEW" ] || timeout 300 $MS gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k --router-skew 1.0 \
    -o "$MS_SKEW" > /dev/null 2>&1 || echo "gen of the skew-1.0 model failed"
  for rep in $(seq "${REPS:-2}"); do
    row "$MS_SKEW" skew1.0 8G adaptive 1
    row "$MS_SKEW" skew1.0 8G adaptive 0
  done
  row "$MS_SKEW" skew1.0 full default 1
fi
echo "(done after $(( $(date +%s) - START )) s)"
