#!/usr/bin/env python3
"""How strongly a tiny random parity model amplifies small perturbations.

tools/hf_parity.py bounds moestream's q8_0 error by the reference's own
response to last-bit jitter. That only bounds anything when the random model
is well conditioned: a model whose logits move 10-100% when its weights are
rounded to f16 has no usable q8_0 check. This script measures, per weight
initialisation, for one architecture of hf_parity.py:

  - per decoder layer: relative change of the hidden state (Frobenius norm
    over all positions) when the matrices are rounded to f16;
  - last-position logits: max relative error (as hf_parity.py defines it)
    for f16 weights, for q8_0 weights + activations against float
    activations, and the q8_0 reference's spread under 1e-6 input jitter;
  - router decisions that change under q8_0 (per layer and token).

Runs on the GPU machine (torch + transformers there), CPU only, no moestream:

    python3 tools/parity_conditioning.py --model qwen35moe [--inits current,unit-norms]
"""
import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_parity as hp  # noqa: E402


def norm_modules(torch, model):
    """(name, module, one_plus) for every RMSNorm-like module with a 1-D
    weight; one_plus: it scales by (1 + weight), found by running it with a
    zero weight (a plain w * norm(x) then returns zeros)."""
    out = []
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if "Norm" not in type(m).__name__ or w is None or w.dim() != 1:
            continue
        with torch.no_grad():
            saved = w.detach().clone()
            w.zero_()
            x = torch.randn(2, w.shape[0])
            try:
                y = m(x)
            except TypeError:
                y = m(x, torch.ones_like(x))
            if isinstance(y, tuple):
                y = y[0]
            one_plus = float(y.abs().max()) > 1e-3
            w.copy_(saved)
        out.append((name, m, one_plus))
    return out


def init_model(torch, model, kind, seed):
    """hf_parity.randomize, then the variant's changes."""
    hp.randomize(torch, model, seed)
    if kind == "current":
        return
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        if kind in ("unit-norms", "unit-norms-slow-decay"):
            # Effective scale 1 + 0.1 N whatever the norm's parametrisation.
            for _, m, one_plus in norm_modules(torch, model):
                if one_plus:
                    m.weight.copy_(0.1 * torch.randn(m.weight.shape, generator=g))
        if kind == "unit-norms-slow-decay":
            for name, p in model.named_parameters():
                if name.endswith("A_log"):  # A = exp(A_log) in [0.05, 0.5]: decays near 1
                    p.copy_(torch.log(0.05 + 0.45 * torch.rand(p.shape, generator=g)))
                elif name.endswith("dt_bias"):
                    p.copy_(torch.zeros(p.shape))
        if kind in ("sharp-routers", "unit-norms-sharp-routers"):
            if kind == "unit-norms-sharp-routers":
                for _, m, one_plus in norm_modules(torch, model):
                    if one_plus:
                        m.weight.copy_(0.1 * torch.randn(m.weight.shape, generator=g))
            # Router logits 4x as spread: decisive top-k, as trained routers are.
            for name, p in model.named_parameters():
                if name.endswith("mlp.gate.weight"):
                    p.mul_(4.0)
        if kind == "half-weights":  # matrices at half the scale
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    p.mul_(0.5)


def layer_states(torch, model, ids):
    states = []
    hooks = [layer.register_forward_hook(lambda mod, inp, out: states.append(
        (out[0] if isinstance(out, tuple) else out).detach().float().clone())) for layer in model.model.layers]
    logits = hp.hf_logits(torch, model, ids)
    for h in hooks:
        h.remove()
    return states, logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen35moe", choices=list(hp.MODELS))
    ap.add_argument("--inits", default="current,unit-norms,sharp-routers,unit-norms-sharp-routers")
    ap.add_argument("--jitter", type=float, default=hp.Q8_JITTER)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    import torch
    import transformers
    torch.set_num_threads(16)
    spec = hp.MODELS[args.model]
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, args.vocab, (n,), generator=gen).tolist() for n in (12, 40, 100)]
    for kind in args.inits.split(","):
        torch.manual_seed(args.seed)
        cfg = hp.make_config(transformers, spec, args.vocab)
        cls = getattr(transformers, spec["hf_class"])
        model = cls._from_config(cfg, attn_implementation="eager").float().eval()
        init_model(torch, model, kind, args.seed)
        if kind == args.inits.split(",")[0]:
            norms = norm_modules(torch, model)
            print(f"norms with (1 + w): {sum(1 for n in norms if n[2])} of {len(norms)}; e.g. "
                  + ", ".join(f"{type(m).__name__}{'(1+w)' if op else ''}" for _, m, op in norms[:6]))
        f16 = hp.rounded_reference(torch, model, "f16")
        q8 = hp.rounded_reference(torch, model, "q8_0")
        hp.use_eager_experts(q8)
        print(f"== {args.model} init {kind}")
        per_layer = [0.0] * len(model.model.layers)
        e16 = eq8 = spread = 0.0
        flips, decisions = 0, 0
        for ids in prompts:
            s32, l32 = layer_states(torch, model, ids)
            s16, l16 = layer_states(torch, f16, ids)
            for i, (a, b) in enumerate(zip(s16, s32)):
                per_layer[i] = max(per_layer[i], float((a - b).norm() / b.norm()))
            e16 = max(e16, hp.max_rel_err(l16[-1].tolist(), l32[-1].tolist()))
            rec = hp.RouterRecorder(torch, q8, spec["top_k"])
            lfa = hp.hf_logits(torch, q8, ids)[-1].tolist()
            r_fa = rec.routes()
            with hp.Q8ActivationRounding(torch, q8, False):
                lq = hp.hf_logits(torch, q8, ids)[-1].tolist()
            r_q = rec.routes()
            with hp.Q8ActivationRounding(torch, q8, False, args.jitter, 1):
                lj = hp.hf_logits(torch, q8, ids)[-1].tolist()
            rec.close()
            eq8 = max(eq8, hp.max_rel_err(lq, lfa))
            spread = max(spread, hp.max_rel_err(lj, lq))
            for la, lb in zip(r_fa, r_q):
                for ta, tb in zip(la, lb):
                    decisions += 1
                    flips += ta != tb
        print("  f16 weights, per-layer hidden-state change: " + ", ".join(f"{v:.2e}" for v in per_layer))
        print(f"  last logits: f16 weights {e16:.3e}; q8_0 act rounding vs float act {eq8:.3e}; "
              f"q8_0 reference under {args.jitter:g} jitter {spread:.3e}; routes changed by q8_0 act rounding "
              f"{flips}/{decisions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
