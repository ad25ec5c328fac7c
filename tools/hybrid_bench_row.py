#!/usr/bin/env python3
"""One line of a `moestream bench --json` result with the tiered experts'
telemetry: tokens/s per test, hit rate, shares of pairs by tier (all and per
decode token), H2D rate, the start-up measurements and ms per token by phase.

  tools/hybrid_bench_row.py BENCH.json LABEL
"""
import json
import sys

j = json.load(open(sys.argv[1]))
e = j.get("experts", {})
r = {x["test"]: (x["tps_mean"], x["tps_sd"]) for x in j["results"]}
line = sys.argv[2] + ": " + " | ".join(f"{k} {v[0]:.1f} ± {v[1]:.1f}" for k, v in r.items())
if e.get("hybrid"):
    p = e["pairs"]
    tot = max(1, p["resident"] + p["streamed"] + p["host"])
    s = e["seconds"]
    n = max(1, e["tokens"])
    d = e["decode_pairs"]
    dn = max(1, e["decode_tokens"])
    # The copy stream's busy time (bytes at its measured rate) over the time in forward().
    busy = (e["h2d_bytes"] / (e["h2d_gbps"] * 1e9) / s["forward"]) if e["h2d_gbps"] > 0 and s["forward"] > 0 else 0
    line += (f" | slots {e['cache_slots']}/{e['experts_total']} hit {100*p['hit_rate']:.1f}%"
             f" cpu {100*p['host']/tot:.1f}% stream {100*p['streamed']/tot:.1f}%"
             f" | per decode token res {d['resident']/dn:.0f} str {d['streamed']/dn:.0f} cpu {d['host']/dn:.0f}"
             f" | h2d {e['h2d_gbps']:.1f}GB/s link busy {100*busy:.0f}% | meas pcie {e['measured']['pcie_gbps']:.1f}"
             f" cpu {e['measured']['cpu_gbps']:.1f} host {e['measured'].get('host_gbps', 0):.1f} | ms/tok wait {1e3*s['route_wait']/n:.2f} plan {1e3*s['plan']/n:.2f}"
             f" cpu {1e3*s['cpu_experts']/n:.2f} gpu {1e3*s['gpu_experts']/n:.2f} fwd {1e3*s['forward']/n:.2f}")
    pf = e.get("prefetch", {})
    if pf.get("layer_steps"):
        line += (f" | prefetch {pf['mode']}: prec {100*pf['precision']:.0f}% staged {pf['staged']/dn:.1f}/tok"
                 f" used {100*pf['staged_precision']:.0f}% cover {100*pf['cold_covered']:.0f}%")
    elif pf.get("mode"):
        line += f" | prefetch {pf['mode']}: none"
    g = e.get("gated", {})
    if g.get("hits", 0) + g.get("misses", 0):
        line += (f" | gated: {100*g['hits']/(g['hits']+g['misses']):.0f}% of layer steps without the host"
                 f" ({100*g.get('staged_hits', 0)/(g['hits']+g['misses']):.0f}% staged)")
print(line)
