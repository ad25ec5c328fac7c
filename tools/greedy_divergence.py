#!/usr/bin/env python3
"""Greedy tokens of a VRAM budget against --vram full, and where they part.

For each budget: `moestream logits --greedy N` under that budget and under
--vram full; if the token lists differ, the all-resident run's logits at the
first differing position are read back (`logits --tokens ... -o`) and the gap
between its two best candidates is printed as a fraction of the logits' rms,
so a near-tie (a flip any last-bit difference may cause) can be told from a
real error.

  tools/greedy_divergence.py MOESTREAM MODEL "prompt" N budget [budget...]
"""
import math
import os
import struct
import subprocess
import sys
import tempfile


def logits_cmd(ms, model, extra):
    r = subprocess.run([ms, "logits", "-m", model, "--backend", "cuda"] + extra,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"moestream logits failed: {r.stderr.strip().splitlines()[-1:]}")
    return r.stdout


def greedy(ms, model, prompt, n, vram):
    out = logits_cmd(ms, model, ["-p", prompt, "--greedy", str(n), "--vram", vram])
    for line in out.splitlines():
        if line.startswith("greedy: "):
            return [int(t) for t in line[len("greedy: "):].split(",")]
    raise SystemExit("no greedy line in moestream logits' output")


def margin_at(ms, model, tokens, fd_path):
    logits_cmd(ms, model, ["--tokens", ",".join(map(str, tokens)), "--vram", "full", "-o", fd_path])
    data = open(fd_path, "rb").read()
    row = struct.unpack(f"<{len(data) // 4}f", data)
    order = sorted(range(len(row)), key=lambda i: row[i], reverse=True)
    rms = math.sqrt(sum(x * x for x in row) / len(row))
    return (row[order[0]] - row[order[1]]) / rms, order[0], order[1]


def main():
    if len(sys.argv) < 6:
        raise SystemExit(__doc__)
    ms, model, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    prompt_ids = [int(t) for t in logits_cmd(ms, model, ["-p", prompt, "--print-tokens"]).split(":")[1].split(",")]
    want = greedy(ms, model, prompt, n, "full")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "logits.bin")
        for b in sys.argv[5:]:
            got = greedy(ms, model, prompt, n, b)
            if got == want:
                print(f"greedy{n} {b}: identical to full")
                continue
            i = next(k for k in range(n) if got[k] != want[k])
            m, a, c = margin_at(ms, model, prompt_ids + want[:i], path)
            print(f"greedy{n} {b}: DIFFERS from full at token {i} ({got[i]} for {want[i]}); "
                  f"full's best two there ({a}, {c}) are {m:.5f} x rms apart")


if __name__ == "__main__":
    main()
