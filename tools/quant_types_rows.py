#!/usr/bin/env python3
"""The arithmetic and the table of tools/quant_types_device.sh.

  quant_types_rows.py ncmoe INSPECT.json BUDGETS OVERHEAD_GIB
      llama.cpp's --n-cpu-moe N for each VRAM budget (comma list, G = GiB):
      the fewest layers whose experts stay on the CPU so that what llama.cpp
      puts on the GPU fits the budget. With -ngl 99 -ncmoe N, the GPU holds
      every dense tensor but token_embd (llama.cpp keeps the input embedding
      on the CPU), the experts of layers N..L-1, and its KV cache and compute
      buffers (OVERHEAD_GIB). Prints "N,N,..." on stdout and the arithmetic,
      one line per budget, on stderr.

  quant_types_rows.py table WORKDIR TYPE[,TYPE...] BUDGETS
      One markdown table from WORKDIR/TYPE_ms.json (moestream bench --json
      --vram full,BUDGETS), TYPE_llama_plan.txt (lines "budget N load_mode")
      and TYPE_llama_*.json (llama-bench -o json): per type and budget,
      moestream pp/tg, llama.cpp pp/tg (with its load mode and N), the tg and
      pp ratios and whether the tg target is met (full: >= 1.1x, tiered
      budgets: >= 1.5x; issue #27). Missing pieces show as "-".
"""
import glob
import json
import os
import sys

GIB = 1 << 30


def parse_gib(text):
    t = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 / (1 << 20), "M": 1 / 1024, "G": 1.0, "T": 1024.0}
    if t and t[-1] in mult:
        return float(t[:-1]) * mult[t[-1]]
    return float(t) / GIB


def ncmoe(inspect_path, budgets, overhead_gib):
    j = json.load(open(inspect_path))
    split = j["split"]
    embd = sum(t["bytes"] for t in j["tensors"] if t["name"] == "token_embd.weight")
    dense_gpu = split["dense_bytes"] - embd
    layers = [l["expert_bytes"] for l in sorted(split["layers"], key=lambda l: l["layer"])]
    n_layer = len(layers)
    out = []
    for b in budgets.split(","):
        room = parse_gib(b) * GIB - dense_gpu - overhead_gib * GIB
        # Experts of the last layers first (llama.cpp moves layers 0..N-1 to the CPU).
        n = n_layer
        used = 0
        while n > 0 and used + layers[n - 1] <= room:
            used += layers[n - 1]
            n -= 1
        out.append(n)
        print(f"{b}: dense on GPU {dense_gpu / GIB:.2f} GiB (dense {split['dense_bytes'] / GIB:.2f} - token_embd "
              f"{embd / GIB:.2f}) + KV/compute {overhead_gib:.2f} GiB leaves {max(room, 0) / GIB:.2f} GiB for experts; "
              f"layers {n}..{n_layer - 1} ({n_layer - n} x ~{(used / max(1, n_layer - n)) / GIB:.3f} GiB = "
              f"{used / GIB:.2f} GiB) fit -> --n-cpu-moe {n}; llama.cpp's VRAM ~ "
              f"{(dense_gpu + used) / GIB + overhead_gib:.2f} GiB", file=sys.stderr)
    print(",".join(str(n) for n in out))


def ms_rows(path):
    """{budget name: (pp, pp_sd, tg, tg_sd, extra)} from a moestream bench sweep."""
    if not os.path.exists(path):
        return {}
    j = json.load(open(path))
    runs = j.get("sweep") or [j]
    rows = {}
    for r in runs:
        name = r.get("summary", {}).get("vram", "full")
        res = {x["test"]: (x["tps_mean"], x["tps_sd"]) for x in r["results"]}
        pp = next((v for k, v in res.items() if k.startswith("pp")), (0, 0))
        tg = next((v for k, v in res.items() if k.startswith("tg")), (0, 0))
        s = r.get("summary", {})
        extra = ""
        if s.get("hybrid"):
            extra = f"hit {100 * s.get('hit_rate', 0):.0f}%, cpu {100 * s.get('cpu_share', 0):.0f}%"
        rows[name] = (pp[0], pp[1], tg[0], tg[1], extra)
    return rows


def llama_rows(workdir, typ):
    """{(n_cpu_moe, load mode): {"pp": (ts, sd), "tg": (ts, sd)}} from llama-bench JSON files."""
    rows = {}
    for f in sorted(glob.glob(os.path.join(workdir, f"{typ}_llama_*.json"))):
        try:
            arr = json.load(open(f))
        except (OSError, ValueError):
            continue
        for x in arr:
            r = rows.setdefault((int(x.get("n_cpu_moe", 0)), str(x.get("load_mode", "?"))), {})
            r["pp" if x.get("n_gen", 0) == 0 else "tg"] = (float(x["avg_ts"]), float(x["stddev_ts"]))
    return rows


def llama_plan(workdir, typ):
    """{budget: (N, load mode)} as the device script chose them."""
    plan = {}
    path = os.path.join(workdir, f"{typ}_llama_plan.txt")
    if os.path.exists(path):
        for line in open(path):
            b, n, mode = line.split()
            plan[b] = (int(n), mode)
    return plan


def cell(v):
    return f"{v[0]:.1f} ± {v[1]:.1f}" if v and v[0] > 0 else "-"


def table(workdir, types, budgets):
    print("| type | budget | llama.cpp -ncmoe | moestream pp512 | moestream tg128 | llama.cpp pp512 | llama.cpp tg128 "
          "| load mode | tg ratio | pp ratio | tg target | moestream experts |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|")
    for typ in types.split(","):
        ms = ms_rows(os.path.join(workdir, f"{typ}_ms.json"))
        ll = llama_rows(workdir, typ)
        plan = llama_plan(workdir, typ)
        for b in ["full"] + budgets.split(","):
            m = ms.get(b)
            n, mode = plan.get(b, (None, "-"))
            lr = ll.get((n, mode), {})
            tg_r = m[2] / lr["tg"][0] if m and lr.get("tg") and lr["tg"][0] > 0 else 0
            pp_r = m[0] / lr["pp"][0] if m and lr.get("pp") and lr["pp"][0] > 0 else 0
            want = 1.1 if b == "full" else 1.5
            met = ("yes" if tg_r >= want else "NO") + f" (>= {want}x)" if tg_r else "-"
            print(f"| {typ} | {b} | {n if n is not None else '-'} | {cell(m[:2] if m else None)} | "
                  f"{cell(m[2:4] if m else None)} | {cell(lr.get('pp'))} | {cell(lr.get('tg'))} | {mode} | "
                  f"{f'{tg_r:.2f}x' if tg_r else '-'} | {f'{pp_r:.2f}x' if pp_r else '-'} | {met} | {m[4] if m else ''} |")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "ncmoe":
        ncmoe(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
