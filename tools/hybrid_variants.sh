#!/usr/bin/env bash
# Decode variants of tiered experts in one GPU-machine call, for A/B work:
# each argument is "label|budget|bench args|env assignments[|skew]", run as
# `env ... moestream bench -m $M -p ${P:-0} -n ${N:-64} -r 1 --backend cuda --vram budget args --json`
# and printed as one row (tools/hybrid_bench_row.py), with the host's
# per-layer-step profile (--hybrid-profile) after it.
#
#   OUT=dir tools/hybrid_variants.sh "base|10.5G||" "noprefetch|10.5G|--prefetch off|" ...
# (a fifth field "skew": the --router-skew 1.0 file, generated when absent).
#   SKIP_TESTS unset: ctest -L gpu first (log in $OUT/ctest_gpu.log).
#   P=512 N=0: prompt passes instead of decode (the row's "link busy" is the copy stream's share).
#   SKIP_BUILD=1 reuse build-gpu;  BENCH_MODEL=/tmp/q.gguf;  REPS=2 runs the list twice;  carry .deps
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/hybrid_common.sh
hybrid_build
if [ -z "${SKIP_TESTS:-}" ]; then
  (cd build-gpu && timeout 400 ctest -L gpu --output-on-failure -j4 > "$OUT/ctest_gpu.log" 2>&1)
  grep -E "tests passed|FAILED|Failed" "$OUT/ctest_gpu.log" | head -20
fi
hybrid_model
MS_SKEW=${BENCH_MODEL_SKEW:-/tmp/q_skew1.gguf}
for rep in $(seq 1 "${REPS:-1}"); do
  for v in "$@"; do
    IFS='|' read -r label budget args envs model <<< "$v"
    file=$M
    if [ "$model" = skew ]; then
      file=$MS_SKEW
      [ -f "$file" ] || timeout 300 $MS gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k --router-skew 1.0 \
        -o "$file" > /dev/null 2>&1 || echo "gen of the skew-1.0 model failed"
    fi
    # shellcheck disable=SC2086
    env $envs timeout 240 $MS bench -m "$file" -p "${P:-0}" -n "${N:-64}" -r 1 --backend cuda \
      --vram "$budget" --hybrid-profile $args --json -o /tmp/var.json > /dev/null 2> /tmp/var.err \
      || { echo "== $label failed: $(tail -1 /tmp/var.err)"; continue; }
    python3 tools/hybrid_bench_row.py /tmp/var.json "== $label"
    grep -E "gated serve|gated staging|link timeline" /tmp/var.err | sed 's/^/   /'
  done
done
