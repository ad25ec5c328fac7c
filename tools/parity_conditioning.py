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

    python3 tools/parity_conditioning.py --model qwen35moe [--inits current,old] [--trace 1e-4]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_parity as hp  # noqa: E402


def init_model(torch, model, kind, seed):
    """hf_parity.randomize, or a variant of it:
    old            the init before 2026-11-25: every vector 1 + 0.1 N (so
                   Qwen3.5's (1 + w) norms doubled their input, and Gated
                   DeltaNet kept ~3% of its state per token);
    sharp-routers  router matrices x4;
    half-weights   every matrix at half the scale."""
    if kind == "old":
        hp.init_vectors_and_matrices(torch, model, torch.Generator().manual_seed(seed))
        return
    hp.randomize(torch, model, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if kind == "sharp-routers" and name.endswith("mlp.gate.weight"):
                p.mul_(4.0)
            elif kind == "half-weights" and p.dim() >= 2:
                p.mul_(0.5)


def layer_states(torch, model, ids):
    states = []
    hooks = [layer.register_forward_hook(lambda mod, inp, out: states.append(
        (out[0] if isinstance(out, tuple) else out).detach().float().clone())) for layer in model.model.layers]
    logits = hp.hf_logits(torch, model, ids)
    for h in hooks:
        h.remove()
    return states, logits


def module_trace(torch, model, ids, rel, seed):
    """Where a perturbation grows: the embedding output is scaled by
    (1 + rel N(0,1)); every leaf module's (and every GDN mixer's core output,
    the norm's input) relative change of input and output, in call order.
    A module whose output change is many times its input's amplifies."""
    def capture(store):
        hooks = []
        for name, m in model.named_modules():
            if name == "" or any(True for _ in m.children()):
                continue
            def hook(mod, inp, out, name=name):
                t_in = next((t for t in inp if torch.is_tensor(t) and t.is_floating_point()), None)
                t_out = out[0] if isinstance(out, tuple) else out
                if torch.is_tensor(t_out) and t_out.is_floating_point():
                    store.append((name, None if t_in is None else t_in.detach().float().clone(),
                                  t_out.detach().float().clone()))
            hooks.append(m.register_forward_hook(hook))
        return hooks

    def run(jitter):
        store = []
        hooks = capture(store)
        emb = model.get_input_embeddings()
        g = torch.Generator().manual_seed(seed)
        jh = None
        if jitter:
            jh = emb.register_forward_hook(
                lambda mod, inp, out: out * (1 + rel * torch.randn(out.shape, generator=g)))
        logits = hp.hf_logits(torch, model, ids)
        for h in hooks:
            h.remove()
        if jh:
            jh.remove()
        return store, logits

    base, l0 = run(False)
    pert, l1 = run(True)
    def rc(a, b):
        if a is None or b is None or a.shape != b.shape:
            return float("nan")
        return float((a - b).norm() / max(float(b.norm()), 1e-30))
    print(f"  perturbation trace: embeddings x (1 + {rel:g} N), {len(ids)} tokens; rel change in -> out (gain)")
    for (name, i0, o0), (_, i1, o1) in zip(base, pert):
        ri, ro = rc(i1, i0), rc(o1, o0)
        gain = ro / ri if ri == ri and ri > 0 else float("nan")
        mark = "  <==" if gain == gain and gain > 3 else ""
        print(f"    {name:48s} {ri:9.2e} -> {ro:9.2e}  ({gain:6.2f}){mark}")
    print(f"  last logits rel change {hp.max_rel_err(l1[-1].tolist(), l0[-1].tolist()):.3e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen35moe", choices=list(hp.MODELS))
    ap.add_argument("--inits", default="current,old")
    ap.add_argument("--jitter", type=float, default=hp.Q8_JITTER)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--trace", type=float, default=0.0,
                    help="also trace a relative perturbation of this size (e.g. 1e-4) module by module")
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
            norms = hp.norm_modules(torch, model)
            print(f"norms with (1 + w): {sum(1 for n in norms if n[2])} of {len(norms)}; e.g. "
                  + ", ".join(f"{type(m).__name__}{'(1+w)' if op else ''}" for _, m, op in norms[:6]))
        if args.trace > 0:
            print(f"== {args.model} init {kind}")
            module_trace(torch, model, prompts[1], args.trace, args.seed)
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
