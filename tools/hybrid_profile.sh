#!/usr/bin/env bash
# Decode profile of tiered experts on the GPU machine: for each budget,
# `moestream bench -p 0 -n 64` (random tokens) with the CPU tier alone, the
# PCIe tier alone, and both (the cost model's split): tokens/s and the
# telemetry's split per decode token (tools/hybrid_bench_row.py).
#
#   OUT=dir tools/hybrid_profile.sh [budgets...]   (default 1.5G 8G)
#   SKIP_BUILD=1 reuse build-gpu;  BENCH_MODEL=/tmp/q.gguf;  carry .deps
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/hybrid_common.sh
BUDGETS=("$@"); [ ${#BUDGETS[@]} -eq 0 ] && BUDGETS=(1.5G 8G)
hybrid_build
hybrid_model
for b in "${BUDGETS[@]}"; do
  for mode in "cpu-only:pcie_gbps=0.0001" "pcie-only:cpu_gbps=0.0001" "split:"; do
    name=${mode%%:*}; cost=${mode#*:}
    # Decode only (-p 0): random tokens as bench's tg does; telemetry per decode token.
    args=(bench -m "$M" -p 0 -n 64 -r 1 --backend cuda --vram "$b" --json -o /tmp/prof.json)
    [ -n "$cost" ] && args+=(--cost "$cost")
    timeout 180 $MS "${args[@]}" > /dev/null 2> /tmp/prof.err || { echo "== $b $name failed: $(tail -1 /tmp/prof.err)"; continue; }
    python3 tools/hybrid_bench_row.py /tmp/prof.json "== $b $name"
  done
done
