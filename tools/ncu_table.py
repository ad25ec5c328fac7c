#!/usr/bin/env python3
"""Kernel time table from `ncu --metrics gpu__time_duration.sum --csv` output:
per kernel name, launches, mean and total microseconds, largest total first.

    python3 tools/ncu_table.py ncu.csv [label]
"""
import csv
import sys
from collections import defaultdict

SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def main():
    path = sys.argv[1]
    label = sys.argv[2] if len(sys.argv) > 2 else path
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # skip ncu's own log lines
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            v = float(r["Metric Value"].replace(",", "")) * SCALE.get(r.get("Metric Unit", "nsecond"), 1e-3)
        except ValueError:
            continue
        name = r.get("Kernel Name", "?")
        name = name.replace("ms::cuda::", "").replace("(anonymous namespace)::", "").replace("dev::", "")
        rows.append((name, v))
    agg = defaultdict(lambda: [0, 0.0])
    for n, v in rows:
        agg[n][0] += 1
        agg[n][1] += v
    total = sum(v for _, v in rows)
    print(f"== ncu {label}: {len(rows)} kernels, {total:.1f} us")
    for n, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{t:10.1f} us {c:6d} x {t / c:8.2f} us  {n[:110]}")


if __name__ == "__main__":
    main()
