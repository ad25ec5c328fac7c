#!/usr/bin/env python3
"""Tiny GGUFs made by llama.cpp's own converter, and Hugging Face's logits.

Runs on the GPU machine (python3 with torch, transformers 5.x, safetensors,
tokenizers; no network). For each architecture it

  1. builds a tiny random-initialised checkpoint with transformers (hidden 64,
     2-3 layers, 4 experts, a ~300-token byte-level BPE trained here) and
     saves it with save_pretrained; every weight is rounded to f16 first, so
     f32 and f16 files hold the same values and Hugging Face's forward is the
     exact reference for both;
       qwen3moe   Qwen3MoeForCausalLM
       qwen35moe  Qwen3_5MoeForCausalLM, layer_types [linear, full, linear]
                  (not the every-4th default, so a reader must use the file's
                  recurrent_layers array), 2 key heads for 4 value heads (the
                  converter's grouped -> tiled value-head reorder), plus an MTP
                  block (mtp.* tensors and mtp_num_hidden_layers = 1, as the
                  published Qwen3.5/3.6 checkpoints carry; transformers does
                  not make them, so they are added to the safetensors here)
       mixtral    MixtralForCausalLM
       gpt-oss    GptOssForCausalLM (biases, sinks, sliding window 4 on
                  the even layers, YaRN), pre-tokenizer gpt-4o
  2. converts it with llama.cpp's convert_hf_to_gguf.py to f32, f16 and q8_0
     (--outtype), qwen35moe also with --no-mtp; the converter is run as it
     is, except that the tokenizer's pre-tokenizer name is given (the hash
     check knows only published tokenizers: qwen2 / qwen35 / llama-bpe);
  3. runs Hugging Face's forward in float64 on a fixed token sequence and
     writes every position's logits (float32 file, [n_tokens][n_vocab]);
  4. optionally (--quantize BIN) requantizes each f32 file with llama-quantize
     to each of --quant-types (the types needs_imatrix() names get an
     importance matrix: --imatrix BIN makes one per model with llama-imatrix
     on the training texts), and (--moestream BIN) compares moestream's
     last-position logits on each --backends with the float64 reference
     (max |ms - hf| / max |hf|: FLOAT_BOUNDS, ROUNDED_BOUNDS, and for lower
     bits compare_moestream's CPU-vs-CUDA and top-1 checks). --quant-hidden N
     widens the checkpoint (hidden and FFN sizes N, a multiple of 256) so that
     K-quant and IQ blocks of 256 fit the rows and llama-quantize uses the
     asked type rather than its fallback for narrow rows; widened checkpoints
     are conditioned (condition(); --init) and measured (conditioning()).

Everything lands in OUT/<model>/ (hf/, *.gguf, hf_logits.f32, hf_logits.json,
convert logs) plus OUT/summary.md. tools/llamacpp_files.sh is the wrapper for
the GPU machine; tests/fixtures/llamacpp/README.md says which files became
fixtures.

    python3 tools/llamacpp_files.py --llama DIR --out OUT [--models a,b] [--types f32,f16,q8_0]
        [--quantize llama-quantize --quant-types q4_K,q6_K] [--moestream BIN --backends cpu,cuda]

--llama DIR: llama.cpp's convert_hf_to_gguf.py with conversion/ and
gguf-py/gguf/ beside it (tools/llamacpp_files.sh packs them).
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

TEXT = "The quick brown fox jumps over the lazy dog. 1 12 123 experts route tokens"
MAX_TOKENS = 16
TRAIN_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Mixture-of-experts models route each token to a few experts.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "1 12 123 1234 12345, and then some words again",
    "Hello world, tabs\tand\nnewlines",
]

MODELS = {
    "qwen3moe": dict(
        hf_class="Qwen3MoeForCausalLM", config_class="Qwen3MoeConfig", pre="qwen2",
        config=dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4,
                    num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=256, rms_norm_eps=1e-6,
                    tie_word_embeddings=False, decoder_sparse_step=1, mlp_only_layers=[], hidden_act="silu"),
        rope_theta=1000000.0, n_expert=4),
    "qwen35moe": dict(
        hf_class="Qwen3_5MoeForCausalLM", config_class="Qwen3_5MoeTextConfig", pre="qwen35", mtp=True,
        config=dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    layer_types=["linear_attention", "full_attention", "linear_attention"],
                    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                    linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2,
                    moe_intermediate_size=32, shared_expert_intermediate_size=32, max_position_embeddings=256,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, hidden_act="silu"),
        rope_theta=10000000.0, rope_extra=dict(partial_rotary_factor=0.25, mrope_section=[2, 1, 1]), n_expert=4),
    "mixtral": dict(
        hf_class="MixtralForCausalLM", config_class="MixtralConfig", pre="llama-bpe",
        config=dict(hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
                    rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None, hidden_act="silu"),
        rope_theta=1000000.0, n_expert=4),
    # gpt-oss: biases, sinks, a window of 4 on the even layers (the 16-token
    # sequence crosses it), YaRN as the real config (max_position_embeddings
    # 32 x 4096; truncate: true, see hf_parity.py's entry). The experts are
    # bf16/f32 here, which llama.cpp's converter takes ("not in MXFP4").
    "gpt-oss": dict(
        hf_class="GptOssForCausalLM", config_class="GptOssConfig", pre="gpt-4o",
        config=dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                    sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                    max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    hidden_act="silu", swiglu_limit=7.0, attention_bias=True),
        rope_theta=150000.0,
        rope_extra=dict(rope_type="yarn", factor=32.0, original_max_position_embeddings=4096,
                        beta_fast=32.0, beta_slow=1.0, truncate=True),
        n_expert=4),
}

# The converter run with the pre-tokenizer name given (see the docstring).
CONVERT_WRAPPER = r'''
import runpy, sys
llama, pre = sys.argv[1], sys.argv[2]
sys.path.insert(0, llama)
try:
    import yaml  # noqa: F401  (gguf-py reads model cards with it)
except ImportError:
    import types
    stub = types.ModuleType("yaml")
    stub.safe_load = lambda *a, **k: {}
    sys.modules["yaml"] = stub
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [llama + "/convert_hf_to_gguf.py"] + sys.argv[3:]
runpy.run_path(llama + "/convert_hf_to_gguf.py", run_name="__main__")
'''


def log(msg):
    print(msg, flush=True)


def build_tokenizer(dest):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXTS * 20, trainer)
    dest.mkdir(parents=True, exist_ok=True)
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": None}))
    return tok


def round_f16(torch, model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


def add_mtp_block(torch, hf_dir, spec, seed):
    """Adds mtp.* tensors (one MTP block, Qwen3.5's checkpoint names) to
    model.safetensors and mtp_num_hidden_layers = 1 to config.json."""
    from safetensors.torch import load_file, save_file
    path = hf_dir / "model.safetensors"
    sd = load_file(str(path))
    types = spec["config"]["layer_types"]
    fa = types.index("full_attention")
    src = next(k for k in sd if f"layers.{fa}." in k)
    prefix = src[:src.index(f"layers.{fa}.")] + f"layers.{fa}."
    g = torch.Generator().manual_seed(seed + 7)

    def rnd(like, name):
        if like.dim() == 1 or (like.dim() == 2 and like.shape[0] == 1 and "norm" in name):
            v = 0.1 * torch.randn(like.shape, generator=g)  # Qwen3.5's (1 + w) norms store w
        else:
            v = torch.randn(like.shape, generator=g) / math.sqrt(like.shape[-1])
        return v.to(like.dtype).half().to(like.dtype).contiguous()

    H = spec["config"]["hidden_size"]
    extra = {}
    for k, v in sd.items():
        if k.startswith(prefix):
            rest = k[len(prefix):]
            extra["mtp.layers.0." + rest] = rnd(v, rest)
    f32 = torch.float32
    extra["mtp.fc.weight"] = rnd(torch.zeros(H, 2 * H, dtype=f32), "fc")
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        extra[f"mtp.{n}.weight"] = rnd(torch.zeros(H, dtype=f32), n)
    sd.update(extra)
    save_file(sd, str(path), metadata={"format": "pt"})
    cfg = json.loads((hf_dir / "config.json").read_text())
    cfg["mtp_num_hidden_layers"] = 1
    (hf_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    return sorted(extra)


# The widened checkpoints (--quant-hidden) with hf_parity.randomize alone are
# badly conditioned: every sublayer writes O(1) into a residual whose
# embedding part is O(1/16), so the logits depend on the whole nonlinear
# stack, routers sit near ties, and Q8_0 lands 2.6e-2 (qwen3moe) to 0.38
# (qwen35moe) from the float forward (bench/results/llamacpp_files_quant.md,
# run of 2026-11-26 19:00). --init conditioned (the default) makes them look
# more like a trained model's first layers: token embeddings N(0, 1), every
# matrix that writes into the residual (attention o_proj, Gated DeltaNet's
# out_proj, every expert's and the shared expert's down_proj, gpt-oss's
# biases with them) scaled by RESIDUAL_WRITE_SCALE, routers by ROUTER_SCALE.
# A sublayer then moves the residual by ~15% of its norm (a broken kernel
# still moves the logits by far more than the bounds), the routers see mostly
# the exactly-looked-up embedding and decide with margins ~4x wider.
# `conditioning()` measures the effect (parity_conditioning.py's method).
RESIDUAL_WRITE_SCALE = 0.25
ROUTER_SCALE = 4.0


def is_router_param(name):
    return (name.endswith("mlp.gate.weight") or name.endswith("block_sparse_moe.gate.weight")
            or name.endswith("mlp.router.weight") or name.endswith("mlp.router.bias"))


def condition(torch, model):
    """--init conditioned, applied after hf_parity.randomize (see above)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.mul_(math.sqrt(p.shape[-1]))
            elif is_router_param(name):
                p.mul_(ROUTER_SCALE)
            elif any(k in name for k in ("o_proj", "down_proj", "out_proj")):
                p.mul_(RESIDUAL_WRITE_SCALE)


def init_weights(torch, model, seed, init):
    import hf_parity
    hf_parity.randomize(torch, model, seed)
    if init == "conditioned":
        condition(torch, model)


WIDE_KEYS = ("hidden_size", "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size")


def widened(spec, n):
    """spec with its hidden and FFN sizes set to n (None: as it is)."""
    if not n:
        return spec
    cfg = dict(spec["config"])
    for k in WIDE_KEYS:
        if k in cfg:
            cfg[k] = n
    return dict(spec, config=cfg)


def make_checkpoint(torch, transformers, name, spec, work, seed, init="conditioned"):
    import hf_parity
    hf_dir = work / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(hf_dir)
    vocab = hf_parity.vocab_size_of(hf_dir / "tokenizer.json")
    torch.manual_seed(seed)
    cfg = hf_parity.make_config(transformers, spec, vocab)
    cls = getattr(transformers, spec["hf_class"])
    try:
        model = cls._from_config(cfg, attn_implementation="eager")
    except Exception:
        cfg._attn_implementation = "eager"
        model = cls(cfg)
    model = model.float().eval()
    init_weights(torch, model, seed, init)
    round_f16(torch, model)
    model.save_pretrained(str(hf_dir))
    layout = hf_parity.saved_expert_layout(hf_dir)
    mtp = add_mtp_block(torch, hf_dir, spec, seed) if spec.get("mtp") else []
    log(f"  saved {spec['hf_class']} vocab {vocab}, experts {layout}, mtp tensors {len(mtp)}")
    ids = tok.encode(TEXT).ids[:MAX_TOKENS]
    return model, ids, vocab


def conditioning(torch, transformers, name, spec, vocab, ids, seed, inits=("conditioned", "plain"), measured=None):
    """tools/parity_conditioning.py's measurement on this script's (widened)
    checkpoint before its f16 rounding, for each init: last-position max rel
    err of f16 weights, of Q8_0 weights (float activations) and of Q8_0
    weights + Q8_0 activations (as moestream's CPU backend computes) against
    the f32 model, and the routing decisions that Q8_0 activation rounding
    changes. Prompts: the check's tokens and 40 random ones. Markdown rows."""
    import hf_parity as hp
    gen = torch.Generator().manual_seed(7)
    prompts = [ids, torch.randint(0, vocab, (40,), generator=gen).tolist()]
    top_k = spec["config"].get("num_experts_per_tok", 2)
    rows = []
    measured = {} if measured is None else measured
    for init in inits:
        torch.manual_seed(seed)
        cfg = hp.make_config(transformers, spec, vocab)
        cls = getattr(transformers, spec["hf_class"])
        try:
            model = cls._from_config(cfg, attn_implementation="eager")
        except Exception:
            cfg._attn_implementation = "eager"
            model = cls(cfg)
        model = model.float().eval()
        init_weights(torch, model, seed, init)
        f16 = hp.rounded_reference(torch, model, "f16")
        q8 = hp.rounded_reference(torch, model, "q8_0")
        hp.use_eager_experts(q8)
        e16 = eq8w = eq8 = 0.0
        flips = decisions = 0
        for p in prompts:
            l32 = hp.hf_logits(torch, model, p)[-1].tolist()
            e16 = max(e16, hp.max_rel_err(hp.hf_logits(torch, f16, p)[-1].tolist(), l32))
            rec = hp.RouterRecorder(torch, q8, top_k)
            lfa = hp.hf_logits(torch, q8, p)[-1].tolist()
            r_fa = rec.routes()
            with hp.Q8ActivationRounding(torch, q8, False):
                lq = hp.hf_logits(torch, q8, p)[-1].tolist()
            r_q = rec.routes()
            rec.close()
            eq8w = max(eq8w, hp.max_rel_err(lfa, l32))
            eq8 = max(eq8, hp.max_rel_err(lq, l32))
            for la, lb in zip(r_fa, r_q):
                for ta, tb in zip(la, lb):
                    decisions += 1
                    flips += ta != tb
        rows.append(f"| {name} | {init} | {e16:.2e} | {eq8w:.2e} | {eq8:.2e} | {flips}/{decisions} |")
        measured.setdefault("q8_0", eq8)  # the first init is the checkpoint's
        log(f"  conditioning {init}: f16 {e16:.2e}, q8_0 weights {eq8w:.2e}, + act {eq8:.2e}, routes {flips}/{decisions}")
    return rows


def to_per_expert(torch, hf_dir):
    """Rewrites a transformers-5 Mixtral checkpoint (mlp.experts.gate_up_proj,
    fused) in the 4.x layout the published checkpoints have
    (block_sparse_moe.experts.E.w1/w3/w2), for a converter that reads only that."""
    from safetensors.torch import load_file, save_file
    path = hf_dir / "model.safetensors"
    sd = load_file(str(path))
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[:-len("mlp.experts.gate_up_proj")] + "block_sparse_moe.experts."
            F = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{base}{e}.w1.weight"] = v[e, :F].contiguous()
                out[f"{base}{e}.w3.weight"] = v[e, F:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[:-len("mlp.experts.down_proj")] + "block_sparse_moe.experts."
            for e in range(v.shape[0]):
                out[f"{base}{e}.w2.weight"] = v[e].contiguous()
        elif k.endswith("mlp.gate.weight"):
            out[k.replace("mlp.gate.weight", "block_sparse_moe.gate.weight")] = v
        else:
            out[k] = v
    save_file(out, str(path), metadata={"format": "pt"})


def hf_reference(torch, model, ids, work):
    dtype = "float64"
    try:
        m = model.double()
        with torch.no_grad():
            logits = m(input_ids=torch.tensor([ids]), use_cache=False).logits[0].to(torch.float64)
    except Exception as e:  # a float32-only op in this transformers version
        log(f"  float64 forward failed ({e}); float32 instead")
        dtype = "float32"
        m = model.float()
        with torch.no_grad():
            logits = m(input_ids=torch.tensor([ids]), use_cache=False).logits[0].to(torch.float64)
    rows = logits.tolist()
    with open(work / "hf_logits.f32", "wb") as f:
        for r in rows:
            f.write(struct.pack(f"<{len(r)}f", *r))
    (work / "hf_logits.json").write_text(json.dumps({
        "tokens": ids, "n_tokens": len(ids), "n_vocab": len(rows[0]), "dtype": "float32",
        "what": f"Hugging Face forward in {dtype} (weights rounded to f16), every position's logits, row-major"}))
    return rows


def convert(args, name, spec, work, outtype, extra=()):
    suffix = "-nomtp" if "--no-mtp" in extra else ""
    out = work / f"{name}{suffix}-{outtype}.gguf"
    wrapper = work / "convert_wrapper.py"
    wrapper.write_text(CONVERT_WRAPPER)
    cmd = [sys.executable, str(wrapper), str(Path(args.llama).resolve()), spec["pre"], str(work / "hf"),
           "--outtype", outtype, "--outfile", str(out), *extra]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300)
    (work / f"convert{suffix}-{outtype}.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        log(f"  FAIL convert {out.name}: rc {r.returncode}\n" + "\n".join((r.stdout + r.stderr).splitlines()[-15:]))
        return None
    log(f"  converted {out.name} ({out.stat().st_size} B) in {time.time() - t0:.1f} s")
    return out


def dump_gguf(args, path):
    """Tensor table (name, type, shape) and metadata keys, with gguf-py."""
    sys.path.insert(0, str(Path(args.llama).resolve() / "gguf-py"))
    try:
        from gguf import GGUFReader
        r = GGUFReader(str(path))
        lines = []
        for k, f in r.fields.items():
            if k.startswith("tokenizer.ggml.") and k not in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
                continue
            try:
                v = f.contents()
            except Exception:
                v = "?"
            lines.append(f"kv {k} = {v}")
        for t in r.tensors:
            lines.append(f"tensor {t.name} {t.tensor_type.name} {list(int(x) for x in t.shape)}")
        path.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    except Exception as e:
        log(f"  (dump of {path.name} failed: {e})")


def rel_err(a, b):
    scale = max(abs(x) for x in b) or 1.0
    return max(abs(x - y) for x, y in zip(a, b)) / scale


# Bounds against the float64 reference (max |ms - hf| / max |hf|, last position).
# f32: both sides compute in f32 on the same weights (1e-6 seen): 1e-4.
# f16: the same weights too, but the f16 files run with an f16 K/V cache
# (each K/V value rounded by up to 2^-11 = 4.9e-4 relative) and CUDA rounds
# some matmul inputs to f16 as well: 2e-3, four such roundings' worth.
# bf16 and q8_0 files hold rounded weights (the reference keeps the f16
# ones): per weight 2^-9 (bf16), ~0.5% rms (Q8_0, plus Q8_0 activations),
# ~1% at the logits of the conditioned checkpoints; bounds 1e-2 and 3e-2, and
# the top token must agree with the reference's. Where the conditioning table
# was measured, q8_0's bound is at least twice the reference's own error with
# Q8_0 weights and activations (qwen35moe's Gated DeltaNet layers amplify
# activation rounding: 7.9e-2 there against 1.0e-2 for the weights alone).
FLOAT_BOUNDS = {"f32": 1e-4, "f16": 2e-3}
ROUNDED_BOUNDS = {"bf16": 1e-2, "q8_0": 3e-2}

# Quantized files: the CPU and CUDA backends on the same file must agree
# within this share of the largest logit (they round activations
# differently: the CPU's Q8_K / Q8_0 rows against the GPU's Q8_1-style
# blocks, f16 K/V on both), and each backend's top token must be the one it
# picks on the model's own f16 file.
QUANT_BACKEND_BOUND = 3e-2

# The top-token checks of quantized files (against the model's own f16 file)
# look at the positions where the reference's top token leads the second by
# at least this share of its largest |logit|. The 4- and 5-bit files' logits
# stay within 0.06-0.14 of the reference by that measure, so at those
# positions no rounding of theirs can swap the two, and a swap is a bug; at
# the others (these tiny random models' last position leads by 0.03) the
# order of the first two is the format's, not the engine's (a near tie).
# The positions come from the reference alone, before any run is looked at.
TOP1_MARGIN = 0.15


def top1_margin(row):
    """(top - second) / max |logit| of one row of logits."""
    a, b = sorted(row, reverse=True)[:2]
    return (a - b) / (max(abs(x) for x in row) or 1.0)


def top1_positions(ref_rows):
    """The positions the top-token checks use (the last one when none leads enough)."""
    return [i for i, r in enumerate(ref_rows) if top1_margin(r) >= TOP1_MARGIN] or [len(ref_rows) - 1]


def imatrix_for(args, name, work, f32_file):
    """llama-imatrix over the training texts (None when not asked or failed)."""
    if not args.imatrix or f32_file is None:
        return None
    text = work / "imatrix_text.txt"
    # ~40 chunks of 32 tokens: plenty for these tiny models (213 took ~30 s
    # a model, and minutes with several runs at once)
    text.write_text("\n".join(TRAIN_TEXTS * 8) + "\n")
    dst = work / f"{name}-imatrix.gguf"
    r = subprocess.run([args.imatrix, "-m", str(f32_file), "-f", str(text), "-o", str(dst), "-c", "32", "-b", "32",
                        "-ngl", "0", "--no-ppl"], capture_output=True, text=True, errors="replace", timeout=300)
    (work / "imatrix.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0 or not dst.exists():
        log(f"  FAIL llama-imatrix (rc {r.returncode}): " + " ".join((r.stdout + r.stderr).splitlines()[-3:]))
        return None
    return dst


def needs_imatrix(q):
    """The file types llama-quantize refuses without an importance matrix:
    its tensor_requires_imatrix() names the IQ1_S/IQ1_M/IQ2_*/IQ3_XXS tensor
    types (IQ3_XS and IQ3_XXS files hold IQ3_XXS tensors, an IQ3_XXS file on
    these small models also IQ2_S ones) and Q2_K inside a Q2_K_S file."""
    q = q.upper()
    return q.startswith("IQ1") or q.startswith("IQ2") or q in ("IQ3_XXS", "IQ3_XS", "Q2_K_S")


def top1(v):
    return max(range(len(v)), key=v.__getitem__)


def first_divergence(a_rows, b_rows, bound):
    """(largest per-position rel err, first position above bound or None):
    a kernel bug shows from position 0, a near-tie route flip from the token
    where it happens on."""
    errs = [rel_err(a, b) for a, b in zip(a_rows, b_rows)]
    first = next((i for i, e in enumerate(errs) if e > bound), None)
    return max(errs), first, errs


def compare_moestream(args, gguf, ids, ref_rows, typ, own_f16=None, measured=None):
    """f32 / f16 files hold the reference's exact weights (rounded to f16
    before saving): FLOAT_BOUNDS. bf16 / q8_0: ROUNDED_BOUNDS and the top
    token. Lower-bit types are the format's effect against an unrounded
    reference, so their error against it is printed only; their checks: CPU
    and CUDA within QUANT_BACKEND_BOUND of each other (with the first
    position where they part, for a diagnosis), and each backend's top token
    equal to its top token on the f16 file (own_f16: backend -> rows of
    logits) at top1_positions(), for 4+ bit types; below 4 bits the top token
    may move and is reported, not required. Returns the rows and each
    backend's logits (every position)."""
    rows = []
    bound = FLOAT_BOUNDS.get(typ)
    got, full = {}, {}
    ref_last = ref_rows[-1]
    n_vocab = len(ref_last)
    checked = top1_positions(ref_rows)
    for be in args.backends.split(","):
        out = gguf.with_suffix(f".{be}.f32")
        cmd = [args.moestream, "logits", "-m", str(gguf), "--tokens", ",".join(map(str, ids)), "-o", str(out),
               "--backend", be, "--all"]
        if typ == "f32":
            cmd += ["--kv-type", "f32"]
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300)
        if r.returncode != 0:
            rows.append((gguf.name, be, "FAIL", (r.stderr.strip().splitlines() or ["?"])[-1]))
            continue
        data = out.read_bytes()
        n = len(data) // 4
        allv = struct.unpack(f"<{n}f", data)
        full[be] = [allv[i:i + n_vocab] for i in range(0, n - n_vocab + 1, n_vocab)]
        ms = allv[-n_vocab:]
        got[be] = ms
        e = rel_err(ms, ref_last)
        if bound is not None:
            rows.append((gguf.name, be, "ok" if e <= bound else "FAIL", f"rel err {e:.2e} (bound {bound:g})"))
            continue
        top_hf = top1(ms) == top1(ref_last)
        detail = f"rel err vs HF {e:.2e}, top-1 vs HF {'agrees' if top_hf else 'differs'}"
        ok = True
        if typ in ROUNDED_BOUNDS:
            rb = max(ROUNDED_BOUNDS[typ], 2 * (measured or {}).get(typ, 0.0))
            ok = e <= rb and top_hf
            detail += f" (bound {rb:.3g} and top-1)"
        if own_f16 and be in own_f16 and len(own_f16[be]) == len(full[be]) == len(ref_rows):
            f16_rows = own_f16[be]
            differ = [i for i in checked if top1(full[be][i]) != top1(f16_rows[i])]
            same = not differ
            last_same = top1(ms) == top1(f16_rows[-1])
            low_bit = any(typ.lower().startswith(p) for p in ("q2", "q3", "iq1", "iq2", "iq3", "tq"))
            detail += (f", top-1 vs own f16 {'agrees' if same else 'differs at ' + ','.join(map(str, differ))} "
                       f"of positions {','.join(map(str, checked))} (reference margin >= {TOP1_MARGIN:g})"
                       f"{'' if last_same or len(ids) - 1 in checked else '; the last position differs, a near tie'}"
                       f"{' (below 4 bits: reported)' if low_bit else ''}")
            ok = ok and (same or low_bit)
        rows.append((gguf.name, be, "ok" if ok else "FAIL", detail))
    if bound is None and len(got) == 2:
        a, b = got.values()
        d = rel_err(a, b)
        ok = d <= QUANT_BACKEND_BOUND
        worst, first, _ = first_divergence(*full.values(), QUANT_BACKEND_BOUND)
        where = "every position within it" if first is None else f"first position above it: {first} of {len(ids)}"
        rows.append((gguf.name, "+".join(got), "ok" if ok else "FAIL",
                     f"backends agree to {d:.2e} (bound {QUANT_BACKEND_BOUND:g}); worst position {worst:.2e}, {where}"))
    return rows, full


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--types", default="f32,f16,bf16,q8_0")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--quantize", help="llama-quantize binary")
    ap.add_argument("--quant-types", default="q4_0,q4_K,q5_K,q6_K,q8_0")
    ap.add_argument("--imatrix", help="llama-imatrix binary (for the 1-2 bit IQ types and Q2_K_S)")
    ap.add_argument("--quant-hidden", type=int, default=256,
                    help="with --quantize: hidden and FFN sizes of the checkpoints (0: as in MODELS)")
    ap.add_argument("--moestream", help="moestream binary: compare its logits with the reference")
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--init", choices=("auto", "conditioned", "plain"), default="auto",
                    help="checkpoint weights: hf_parity.randomize (plain) or that plus condition() "
                         "(conditioned); auto: conditioned for the widened --quantize checkpoints only, so "
                         "the narrow fixtures (tests/fixtures/llamacpp) are made as before")
    ap.add_argument("--threads", type=int, default=8, help="torch threads")
    ap.add_argument("--no-conditioning", action="store_true",
                    help="skip the conditioning table (made with --quantize: conditioning.md)")
    args = ap.parse_args()
    import torch
    import transformers
    torch.set_num_threads(args.threads)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    out = Path(args.out)
    summary = ["| model | file | backend | result | detail |", "|---|---|---|---|---|"]
    cond = ["| model | init | f16 weights | q8_0 weights | q8_0 weights + activations | routes changed by q8_0 act. |",
            "|---|---|---:|---:|---:|---:|"]
    failures = 0
    init = args.init if args.init != "auto" else ("conditioned" if args.quantize and args.quant_hidden else "plain")
    log(f"init {init}")
    for name in args.models.split(","):
        spec = widened(MODELS[name], args.quant_hidden if args.quantize else 0)
        work = out / name
        log(f"== {name}")
        try:
            model, ids, vocab = make_checkpoint(torch, transformers, name, spec, work, args.seed, init)
            ref = hf_reference(torch, model, ids, work)
        except Exception:
            traceback.print_exc()
            failures += 1
            summary.append(f"| {name} | (checkpoint) | - | FAIL | see log |")
            continue
        measured = {}
        if args.quantize and not args.no_conditioning:
            try:
                cond += conditioning(torch, transformers, name, spec, vocab, ids, args.seed,
                                     (init, "plain") if init != "plain" else ("plain",), measured)
            except Exception:  # a measurement only: the checks go on
                traceback.print_exc()
                cond.append(f"| {name} | (failed: see log) | | | | |")
        files = []
        if name == "mixtral" and convert(args, name, spec, work, "f32") is None:
            log("  retrying with the checkpoint in the 4.x per-expert layout")
            to_per_expert(torch, work / "hf")
        for typ in args.types.split(","):
            files.append((typ, convert(args, name, spec, work, typ)))
            if spec.get("mtp"):
                files.append((typ, convert(args, name, spec, work, typ, ("--no-mtp",))))
        if args.quantize:
            src = next((p for t, p in files if t == "f32" and p and "nomtp" not in p.name), None)
            imat = imatrix_for(args, name, work, src) if any(needs_imatrix(q) for q in args.quant_types.split(",")) else None
            for q in args.quant_types.split(",") if src else []:
                dst = work / f"{name}-{q}.gguf"
                extra_q = ["--imatrix", str(imat)] if imat and needs_imatrix(q) else []
                if extra_q and spec.get("mtp"):
                    # llama-imatrix never runs the MTP block (blk.N, N = the
                    # trunk's layer count), so it has no importance data for
                    # it and llama-quantize refuses the very-low-bit types
                    # there ("Missing importance matrix for tensor blk.N...");
                    # those tensors go to Q8_0 (as published files keep them
                    # wide); should that fail, the --no-mtp file is used.
                    extra_q += ["--tensor-type", f"blk\\.{spec['config']['num_hidden_layers']}\\.=q8_0"]
                r = subprocess.run([args.quantize, *extra_q, str(src), str(dst), q.upper()], capture_output=True,
                                   text=True, errors="replace", timeout=300)
                logtext = r.stdout + r.stderr
                if r.returncode != 0 and extra_q and spec.get("mtp"):
                    nomtp = next((p for t, p in files if t == "f32" and p and "nomtp" in p.name), None)
                    if nomtp:
                        log(f"  llama-quantize {q} with the MTP block at q8_0 failed; from the --no-mtp file")
                        dst = work / f"{name}-nomtp-{q}.gguf"
                        r = subprocess.run([args.quantize, *extra_q[:2], str(nomtp), str(dst), q.upper()],
                                           capture_output=True, text=True, errors="replace", timeout=300)
                        logtext += "\n==== from the --no-mtp file\n" + r.stdout + r.stderr
                (work / f"quantize-{q}.log").write_text(logtext)
                files.append((q, dst if r.returncode == 0 else None))
                if r.returncode != 0:
                    log(f"  FAIL llama-quantize {q}: " + " ".join(logtext.strip().splitlines()[-2:]))
        own_f16 = {}
        for typ, path in files:
            if path is None:
                failures += 1
                summary.append(f"| {name} | {typ} | - | FAIL | conversion failed |")
                continue
            dump_gguf(args, path)
            if args.moestream:
                rows, full = compare_moestream(args, path, ids, ref, typ,
                                               None if typ in ("f32", "f16") else own_f16, measured)
                if typ == "f16" and "nomtp" not in path.name:
                    own_f16 = full
                for f, be, res, detail in rows:
                    failures += res != "ok"
                    summary.append(f"| {name} | {f} | {be} | {res} | {detail} |")
            else:
                summary.append(f"| {name} | {path.name} | - | made | {path.stat().st_size} B |")
    (out / "summary.md").write_text("\n".join(summary) + "\n")
    if len(cond) > 2:
        (out / "conditioning.md").write_text("\n".join(cond) + "\n")
        log("\n".join(cond))
    log("\n".join(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
