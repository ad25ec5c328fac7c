#!/usr/bin/env python3
"""Greedy decoding, CPU backend against CUDA backend, on one model file.

    python3 tools/greedy_backends.py --moestream build-gpu/moestream -m /tmp/q.gguf \
        [--tokens 1000,2000,...] [-n 64] [--tol 0.05] [--out DIR]

1. Free-running: each backend generates n tokens greedily from the prompt
   (`moestream logits --greedy n`); the report says how many leading tokens
   are identical.
2. Lockstep, when the free-running sequences part: both backends score the
   CPU's sequence (`moestream logits --all` over prompt + the CPU's tokens),
   and at every one of the n positions the two must pick the same token,
   unless the CPU's logits for the two picks are within 2 x tol x rms(CPU's
   logits at that position) of each other (a near tie, where the rounding
   of a quantized model decides; tol is the CUDA backend's stated logit
   tolerance, tests/cuda/backend_forward_test.cpp).

Passes when the free-running sequences are identical, or when every lockstep
position agrees or is a near tie. Exits 1 otherwise. Standard library only.
"""
import argparse
import array
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from hf_parity import argmax  # same directory; hf_parity imports torch only in main()

DEFAULT_PROMPT = "1000,2000,3000,4000,5000,6000,7000,8000"


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout


def greedy(ms, model, tokens, n, backend, out):
    text = run([ms, "logits", "-m", model, "--tokens", tokens, "-o", str(out), "--greedy", str(n),
                "--backend", backend])
    for line in text.splitlines():
        if line.startswith("greedy:"):
            return [int(t) for t in line.split(":", 1)[1].strip().split(",") if t]
    raise RuntimeError(f"no 'greedy:' line from the {backend} backend:\n{text[-1000:]}")


def all_logits(ms, model, tokens, backend, out):
    run([ms, "logits", "-m", model, "--tokens", ",".join(map(str, tokens)), "-o", str(out), "--all",
         "--backend", backend])
    a = array.array("f")
    a.frombytes(Path(out).read_bytes())
    if sys.byteorder != "little":
        a.byteswap()
    if len(a) % len(tokens) != 0:
        raise RuntimeError(f"{backend}: {len(a)} floats is not a whole number of rows for {len(tokens)} tokens")
    return a, len(a) // len(tokens)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moestream", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tokens", default=DEFAULT_PROMPT, help="prompt token ids, comma-separated")
    ap.add_argument("-n", type=int, default=64, help="tokens to generate (default 64)")
    ap.add_argument("--tol", type=float, default=0.05, help="logit tolerance, fraction of the rms (default 0.05)")
    ap.add_argument("--out", default=None, help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    prompt = [int(t) for t in args.tokens.split(",") if t]
    if not prompt or args.n < 1:
        ap.error("need a non-empty prompt and -n >= 1")
    out = Path(args.out or tempfile.mkdtemp(prefix="greedy_backends_"))
    out.mkdir(parents=True, exist_ok=True)

    seq = {b: greedy(args.moestream, args.model, args.tokens, args.n, b, out / f"last_{b}.f32")
           for b in ("cpu", "cuda")}
    lead = 0
    while lead < args.n and seq["cpu"][lead] == seq["cuda"][lead]:
        lead += 1
    print(f"free-running greedy {args.n}: first {lead} identical")
    print(f"  cpu  {seq['cpu']}\n  cuda {seq['cuda']}")
    if lead == args.n:
        print(f"PASS: identical {args.n} tokens")
        return 0

    # Lockstep over the CPU's sequence: row p predicts token p + 1.
    toks = prompt + seq["cpu"][:-1]
    cpu, V = all_logits(args.moestream, args.model, toks, "cpu", out / "all_cpu.f32")
    gpu, Vg = all_logits(args.moestream, args.model, toks, "cuda", out / "all_cuda.f32")
    if V != Vg:
        raise RuntimeError(f"vocabulary sizes differ: cpu {V}, cuda {Vg}")
    same = ties = bad = 0
    for i in range(args.n):
        r = len(prompt) - 1 + i
        rc, rg = cpu[r * V:(r + 1) * V], gpu[r * V:(r + 1) * V]
        a, b = argmax(rc), argmax(rg)
        if a == b:
            same += 1
            continue
        rms = math.sqrt(sum(x * x for x in rc) / V)
        margin = rc[a] - rc[b]
        if margin <= 2 * args.tol * rms:
            ties += 1
            print(f"  step {i}: cpu {a}, cuda {b}: near tie (cpu margin {margin:.4g}, rms {rms:.4g})")
        else:
            bad += 1
            print(f"  step {i}: cpu {a}, cuda {b}: MISMATCH (cpu margin {margin:.4g} > {2 * args.tol:g} x rms {rms:.4g})")
    print(f"lockstep over the CPU's sequence: {same}/{args.n} identical, {ties} near ties, {bad} mismatches")
    if bad:
        print("FAIL")
        return 1
    print(f"PASS: identical for {lead} free-running tokens, then only near ties in lockstep")
    return 0


if __name__ == "__main__":
    sys.exit(main())
