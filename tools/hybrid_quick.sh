#!/usr/bin/env bash
# Quick hybrid pass on a warm GPU machine (build-gpu and /tmp/q.gguf present):
# start-up trace, greedy text at several budgets vs full, bench rows per budget.
#   tools/hybrid_quick.sh [budgets...]   (default: 10.5G 8G 1.5G)
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_env.sh
MS=build-gpu/moestream; M=${BENCH_MODEL:-/tmp/q.gguf}
BUDGETS=("$@"); [ ${#BUDGETS[@]} -eq 0 ] && BUDGETS=(10.5G 8G 1.5G)
gtext() { timeout 120 $MS run -m $M -p "The history of the" -n 32 --temp 0 --ctx 512 -q "$@" 2>/tmp/g.err; }
gtext --vram full > /tmp/g_full.txt
for b in "${BUDGETS[@]}"; do
  gtext --vram $b > /tmp/g_$b.txt; cmp -s /tmp/g_full.txt /tmp/g_$b.txt && echo "greedy32 $b: identical" || { echo "greedy32 $b: DIFFERS"; tail -3 /tmp/g.err; }
done
for b in full "${BUDGETS[@]}"; do
  timeout 240 $MS bench -m $M -p 512 -n 128 -r 2 --backend cuda --vram $b --json -o /tmp/b_$b.json >/dev/null 2>/tmp/b.err || { echo "bench $b failed"; tail -3 /tmp/b.err; continue; }
  python3 - /tmp/b_$b.json $b <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); e = j.get("experts", {})
r = {x["test"]: (x["tps_mean"], x["tps_sd"]) for x in j["results"]}
line = sys.argv[2] + ": " + " | ".join(f"{k} {v[0]:.1f} ± {v[1]:.1f}" for k, v in r.items())
if e.get("hybrid"):
    p = e["pairs"]; tot = max(1, p["resident"] + p["streamed"] + p["host"]); s = e["seconds"]; n = max(1, e["tokens"])
    line += (f" | slots {e['cache_slots']}/{e['experts_total']} hit {100*p['hit_rate']:.1f}% cpu {100*p['host']/tot:.1f}%"
             f" stream {100*p['streamed']/tot:.1f}% h2d {e['h2d_gbps']:.1f}GB/s | meas pcie {e['measured']['pcie_gbps']:.1f}"
             f" cpu {e['measured']['cpu_gbps']:.1f} | ms/tok wait {1e3*s['route_wait']/n:.2f} plan {1e3*s['plan']/n:.2f} cpu {1e3*s['cpu_experts']/n:.2f} gpu {1e3*s['gpu_experts']/n:.2f} fwd {1e3*s['forward']/n:.2f}")
print(line)
PY
done
