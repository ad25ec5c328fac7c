#!/usr/bin/env bash
# Tiered experts on the GPU machine in one call: build (tools/device_full.sh
# build), the hybrid GPU tests, then on the synthetic Qwen3-30B-A3B Q4_K model
# (16.1 GiB, generated if absent): greedy 32 tokens per VRAM budget against
# --vram full, and one `moestream bench` row per budget (experts telemetry
# included). Prints a short table; logs under $OUT.
#
#   OUT=dir tools/hybrid_device.sh [budgets...]     default budgets: 10.5G 8G 1.5G
#   SKIP_BUILD=1  reuse build-gpu;  BENCH_MODEL=/tmp/q.gguf
#   carry: .deps (tools/make_device_deps.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(pwd)/gpu_out}
mkdir -p "$OUT"
source tools/device_env.sh
MS=build-gpu/moestream
M=${BENCH_MODEL:-/tmp/q.gguf}
BUDGETS=("$@"); [ ${#BUDGETS[@]} -eq 0 ] && BUDGETS=(10.5G 8G 1.5G)

[ -n "${SKIP_BUILD:-}" ] || OUT=$OUT bash tools/device_full.sh build || exit 1
timeout 150 build-gpu/test_cuda --gtest_filter='*Hybrid*:*GatherAndScatterRows*' > "$OUT/hybrid_tests.log" 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/hybrid_tests.log" | head -20
[ -f "$M" ] || timeout 300 $MS gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k -o "$M" > /dev/null 2>&1

timeout 900 python3 tools/greedy_divergence.py $MS "$M" "The history of the" 32 "${BUDGETS[@]}" 2>>"$OUT/greedy.err"
for b in full "${BUDGETS[@]}"; do
  timeout 240 $MS bench -m "$M" -p 512 -n 128 -r 2 --backend cuda --vram "$b" --json -o "/tmp/b_$b.json" \
    > /dev/null 2>> "$OUT/bench.err" || { echo "bench $b failed: $(tail -1 "$OUT/bench.err")"; continue; }
  python3 - "/tmp/b_$b.json" "$b" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); e = j.get("experts", {})
r = {x["test"]: (x["tps_mean"], x["tps_sd"]) for x in j["results"]}
line = sys.argv[2] + ": " + " | ".join(f"{k} {v[0]:.1f} ± {v[1]:.1f}" for k, v in r.items())
if e.get("hybrid"):
    p = e["pairs"]; tot = max(1, p["resident"] + p["streamed"] + p["host"]); s = e["seconds"]; n = max(1, e["tokens"])
    line += (f" | slots {e['cache_slots']}/{e['experts_total']} hit {100*p['hit_rate']:.1f}% cpu {100*p['host']/tot:.1f}%"
             f" stream {100*p['streamed']/tot:.1f}% h2d {e['h2d_gbps']:.1f}GB/s | meas pcie {e['measured']['pcie_gbps']:.1f}"
             f" cpu {e['measured']['cpu_gbps']:.1f} | ms/tok wait {1e3*s['route_wait']/n:.2f} plan {1e3*s['plan']/n:.2f}"
             f" cpu {1e3*s['cpu_experts']/n:.2f} gpu {1e3*s['gpu_experts']/n:.2f} fwd {1e3*s['forward']/n:.2f}")
print(line)
PY
done
