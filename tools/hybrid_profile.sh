#!/usr/bin/env bash
# Decode profile of tiered experts on the GPU machine: for each budget, a
# greedy `moestream run` of 64 tokens with the CPU tier alone, the PCIe tier
# alone, and both (the cost model's split), printing tokens/s and the
# telemetry's time split; the last run of each budget keeps --verbose-steps
# lines in $OUT/steps_<budget>.log.
#
#   OUT=dir tools/hybrid_profile.sh [budgets...]   (default 1.5G 8G)
#   SKIP_BUILD=1 reuse build-gpu;  BENCH_MODEL=/tmp/q.gguf;  carry .deps
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(pwd)/gpu_out}
mkdir -p "$OUT"
source tools/device_env.sh
MS=build-gpu/moestream
M=${BENCH_MODEL:-/tmp/q.gguf}
BUDGETS=("$@"); [ ${#BUDGETS[@]} -eq 0 ] && BUDGETS=(1.5G 8G)
[ -n "${SKIP_BUILD:-}" ] || OUT=$OUT bash tools/device_full.sh build || exit 1
[ -f "$M" ] || timeout 300 $MS gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k -o "$M" > /dev/null 2>&1
for b in "${BUDGETS[@]}"; do
  for mode in "cpu-only:pcie_gbps=0.0001" "pcie-only:cpu_gbps=0.0001" "split:"; do
    name=${mode%%:*}; cost=${mode#*:}
    args=(run -m "$M" -p "The history of the" -n 64 --temp 0 --ctx 512 --vram "$b")
    [ -n "$cost" ] && args+=(--cost "$cost")
    [ "$name" = split ] && args+=(--verbose-steps)
    timeout 180 $MS "${args[@]}" > /dev/null 2> /tmp/prof.err
    echo "== $b $name: $(grep -E "decode|tok/s" /tmp/prof.err | grep -v "^step" | tr '\n' ' ' | cut -c1-300)"
    grep -E "^experts:" /tmp/prof.err | grep -vE "hit rate by layer" | sed 's/^/   /'
    [ "$name" = split ] && grep -E "^step" /tmp/prof.err > "$OUT/steps_$b.log"
  done
done
