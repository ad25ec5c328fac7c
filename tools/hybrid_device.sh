#!/usr/bin/env bash
# Tiered experts on the GPU machine in one call: build (tools/device_full.sh
# build), the hybrid GPU tests, then on the synthetic Qwen3-30B-A3B Q4_K model
# (16.1 GiB, generated if absent): greedy 32 tokens per VRAM budget against
# --vram full, and one `moestream bench` row per budget (experts telemetry
# included). Prints a short table; logs under $OUT.
#
#   OUT=dir tools/hybrid_device.sh [budgets...]     default budgets: 10.5G 8G 1.5G
#   SKIP_BUILD=1  reuse build-gpu;  SKIP_TESTS=1  no hybrid tests;  NO_SKEW=1  no --router-skew 1.0 rows;
#   ONLY_SKEW=1  only those;  BENCH_MODEL=/tmp/q.gguf;  POLICIES="default layers"  a row (and a
#   greedy check) per residency policy
#   carry: .deps (tools/make_device_deps.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/hybrid_common.sh
BUDGETS=("$@"); [ ${#BUDGETS[@]} -eq 0 ] && BUDGETS=(10.5G 8G 1.5G)
read -r -a POLS <<< "${POLICIES:-default}"

hybrid_build
[ -n "${SKIP_TESTS:-}" ] || timeout 150 build-gpu/test_cuda --gtest_filter='*Hybrid*:*GatherAndScatterRows*' > "$OUT/hybrid_tests.log" 2>&1
[ -n "${SKIP_TESTS:-}" ] || grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/hybrid_tests.log" | head -20
[ -n "${ONLY_SKEW:-}" ] || hybrid_model

GREEDY=()
for p in "${POLS[@]}"; do for b in "${BUDGETS[@]}"; do GREEDY+=("$b:$p"); done; done
[ -n "${ONLY_SKEW:-}" ] || timeout 900 python3 tools/greedy_divergence.py $MS "$M" "The history of the" 32 "${GREEDY[@]}" 2>>"$OUT/greedy.err"
bench_row() {  # model label budget [policy]
  local pol=${4:-default}
  timeout 240 $MS bench -m "$1" -p 512 -n 128 -r 2 --backend cuda --vram "$3" --policy "$pol" --json \
    -o "/tmp/b_$2_$3_$pol.json" > /dev/null 2>> "$OUT/bench.err" || { echo "bench $2 $3 $pol failed: $(tail -1 "$OUT/bench.err")"; return; }
  python3 tools/hybrid_bench_row.py "/tmp/b_$2_$3_$pol.json" "$2 $3 $pol"
}
START=$(date +%s)
[ -n "${ONLY_SKEW:-}" ] || bench_row "$M" uniform full
[ -n "${ONLY_SKEW:-}" ] || for p in "${POLS[@]}"; do for b in "${BUDGETS[@]}"; do bench_row "$M" uniform "$b" "$p"; done; done
# The skewed router (--router-skew 1.0): a second file, same shape.
if [ -z "${NO_SKEW:-}" ]; then
  MS_SKEW=${BENCH_MODEL_SKEW:-/tmp/q_skew1.gguf}
  [ -f "$MS_SKEW" ] || timeout 300 $MS gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k --router-skew 1.0 \
    -o "$MS_SKEW" > /dev/null 2>&1 || echo "gen of the skew-1.0 model failed"
  echo "(skew model ready after $(( $(date +%s) - START )) s)"
  bench_row "$MS_SKEW" skew1.0 full
  for p in "${POLS[@]}"; do bench_row "$MS_SKEW" skew1.0 8G "$p"; done
fi
