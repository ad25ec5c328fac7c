#!/usr/bin/env python3
"""Greedy tokens of a VRAM budget against --vram full, and where they part.

For each budget: `moestream logits --greedy N` under that budget and under
--vram full; if the token lists differ, the gap between the all-resident
run's two best candidates at the first differing position (its "margins:"
line, the same decode steps) is printed as a fraction of the logits' rms, so
a near-tie (a flip any last-bit difference may cause) can be told from a real
error. For scale, the same context through the all-resident batch path
(`logits --tokens`): whether it picks the decode path's token there.

  tools/greedy_divergence.py MOESTREAM MODEL "prompt" N budget[:policy] [...]
"""
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
    """(tokens, margins) of `logits --greedy n` under a budget ("8G" or "8G:layers")."""
    budget, _, policy = vram.partition(":")
    extra = ["--policy", policy] if policy else []
    out = logits_cmd(ms, model, ["-p", prompt, "--greedy", str(n), "--vram", budget] + extra)
    toks = margins = None
    for line in out.splitlines():
        if line.startswith("greedy: "):
            toks = [int(t) for t in line[len("greedy: "):].split(",")]
        if line.startswith("margins: "):
            margins = [float(t) for t in line[len("margins: "):].split(",")]
    if toks is None or margins is None:
        raise SystemExit("no greedy/margins lines in moestream logits' output")
    return toks, margins


def batch_pick(ms, model, tokens, fd_path):
    """The all-resident batch path's best token after `tokens`."""
    logits_cmd(ms, model, ["--tokens", ",".join(map(str, tokens)), "--vram", "full", "-o", fd_path])
    data = open(fd_path, "rb").read()
    row = struct.unpack(f"<{len(data) // 4}f", data)
    return max(range(len(row)), key=lambda i: row[i])


def main():
    if len(sys.argv) < 6:
        raise SystemExit(__doc__)
    ms, model, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    prompt_ids = [int(t) for t in logits_cmd(ms, model, ["-p", prompt, "--print-tokens"]).split(":")[1].split(",")]
    want, margins = greedy(ms, model, prompt, n, "full")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "logits.bin")
        for b in sys.argv[5:]:
            got, _ = greedy(ms, model, prompt, n, b)
            if got == want:
                print(f"greedy{n} {b}: identical to full")
                continue
            i = next(k for k in range(n) if got[k] != want[k])
            alt = batch_pick(ms, model, prompt_ids + want[:i], path)
            print(f"greedy{n} {b}: DIFFERS from full at token {i} ({got[i]} for {want[i]}); full's best two there "
                  f"are {margins[i]:.5f} x rms apart; full's own batch path picks "
                  f"{alt}{' (the same)' if alt == want[i] else ''}")


if __name__ == "__main__":
    main()
