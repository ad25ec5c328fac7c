#!/usr/bin/env python3
"""Numerical parity of moestream against Hugging Face transformers.

Runs on the GPU machine (python3 with torch, transformers 5.x, safetensors,
tokenizers; no network). For each architecture (Qwen3-MoE, Qwen3.5/3.6-MoE
(qwen35moe), Mixtral, gpt-oss) it

  1. builds a tiny random-initialised model from a config (a few layers,
     8-16 experts, top-2..4, hidden 128), with the vocabulary of a real
     tokenizer file (tools/tokenizer_fixtures/out/{qwen3,llama2}, else a small
     byte-level BPE trained here with `tokenizers`), and saves it with
     save_pretrained;
  2. converts it with `moestream convert` to f32, f16, bf16 and q8_0;
  3. runs both on fixed prompts (token ids from the HF tokenizer, given to
     moestream with --tokens) and compares:
       - last-position logits: max relative error, defined as
         max_i |ms_i - hf_i| / max_i |hf_i|, at most 1e-4 (f32), 1e-2
         (f16, bf16) and for q8_0 the larger of 1e-2 and twice the
         reference's own spread (below).
         The reference for a type holds the same weights the converted file
         holds: HF's matrices rounded to f16 / bf16 / Q8_0 blocks (routers,
         norms and other vectors stay f32, as the converter keeps them), and
         computes in f32. So the error measures moestream's arithmetic, not
         the weight format's rounding; that rounding's own effect (moestream
         against the unrounded f32 model) is printed as an "info" row.
         Q8_0 blocks of 32 run along a row as the file stores it: Gated
         DeltaNet's out_proj has its columns (value heads) tiled by the
         converter, and where a head is narrower than a block (the parity
         model's 16) its blocks span other columns than in Hugging Face's
         order (until 2026-11-25 the reference rounded in Hugging Face's
         order: a 1e-2 error at the first layer that was the reference's).
         For q8_0 the reference also rounds the input of every matmul with a
         Q8_0 weight to Q8_0 blocks (d = amax/127, q = round-half-even(x/d);
         d kept as f16 for the CPU backend, f32 for CUDA), because that is
         the arithmetic of a Q8_0 x Q8_0 integer dot product, the format's
         defining kernel (llama.cpp does the same). It is applied by wrapping
         torch.nn.functional.linear during the reference forward; the script
         fails if any Q8_0 weight was not seen through it (a transformers
         version computing experts another way). Rounding is discontinuous:
         a last-bit difference that moves one activation across a rounding
         boundary changes it by a whole step, and the difference spreads
         through later layers, so two correct implementations differ by
         more than their f32 arithmetic. The script measures that scale on
         the reference itself: it reruns it with every rounded input first
         scaled by (1 + 1e-6 N(0,1)) (1e-6: the f32-level difference measured
         at f32), three seeds, and takes the median seed's worst prompt.
         Expert choice is the other discontinuity: a router near a tie
         between its k-th and (k+1)-th expert picks either on a last-bit
         difference, and swaps a whole expert's output. So the q8_0 logits
         are compared with the reference taking moestream's expert choices
         (moestream logits --routes; the jitter runs keep the reference's
         own), and every choice that differs from the reference's must have
         lost by under 2% of that token's router logit range (a near tie,
         not a wrong expert). Against the same weights
         with float activations moestream must still agree on the top-1 token
         (unless that reference's top-2 gap is smaller than the two HF
         references' own difference, the format's effect: a near tie,
         reported as such); that error is an "info" row.
         f32 runs with --kv-type f32 (both backends): rounding K/V to half
         can by itself use up the 1e-4 bound;
       - greedy continuation of 32 tokens at f32: identical ids;
       - the router's chosen experts per layer and token at f32: identical
         sets;
  4. checks tokenizer parity: the ids moestream's tokenizer gives (through the
     converted GGUF) against HF `tokenizers` on a set of texts.

Prints one table and writes it to OUT/parity.md; exits 1 on any failure.

    python3 tools/hf_parity.py --moestream build/moestream --out DIR [--backend cpu|cuda]
    python3 tools/hf_parity.py --moestream build/moestream --out DIR --dry-run
    python3 tools/hf_parity.py --moestream build/moestream --out DIR --layer-diff [--models M --types T]

--layer-diff runs a diagnostic instead of the checks (tools/layer_diff.sh on
the GPU machine): for each model, type and prompt, every MoE layer's router
input from moestream (logits --hidden) against the reference's (a forward
pre-hook on the router), the reference taking moestream's expert choices; per
layer the last token's relative error, the largest over tokens, how many
forced choices the reference's router would not make and by what margin, and
the layer's kind (qwen35moe: linear / full attention). Self-check: forcing
must not move the reference's router inputs up to the first layer whose
routes it changes. Writes OUT/layer_diff.md; exits 1 on an error or a failed
self-check.

--layer-diff-ablate (with --layer-diff; q8_0 only) adds a table per model:
the first MoE layer's router input error on the first two prompts, the
reference rerun with the q8_0 emulation of one group of parameters changed
(by role, the name without layer and expert index; model-wide): that role's
matmul inputs not rounded, or its weights left f32; globally no input
rounding, or f32 weights; and Gated DeltaNet's out_proj rounded in blocks of
Hugging Face's column order (not the file's, where value heads are tiled:
the emulation's error until 2026-11-25, 1e-2 at the first layer). The baseline row must
reproduce the layer-diff figure; a variant that falls far below it points to
the op moestream computes differently.

--dry-run checks the arguments, the moestream binary and its subcommands and
the tokenizer files, without importing torch.

moestream interface used (src/cli/cmd_convert.cpp, src/cli/cmd_logits.cpp):
    moestream convert HF_DIR -o OUT.gguf --type T --quiet
    moestream logits -m FILE --tokens 1,2,3 -o OUT.f32 --backend B
                     [--routes ROUTES.json] [--greedy N] [--kv-type f32]
        stdout: lines "top5: ...", "greedy: id,id,..." (with --greedy)
        ROUTES.json: {"experts": [layer][token][k]} for the prompt's tokens
    moestream logits ... --routes R.json --hidden H.f32     (--layer-diff)
        H.f32: float32 [MoE layer][token][n_embd], shape in H.f32.json
    moestream logits -m FILE -p TEXT --print-tokens   -> "tokens: id,id,..."
"""
import argparse
import array
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tools" / "tokenizer_fixtures" / "out"

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Mixture-of-experts models route each token to a few experts, 路由 専門家 🙂.",
    "1 12 123 1234 12345, and then some words again",
]
TOKENIZER_TEXTS = PROMPTS + [
    "Hello world",
    "  two leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n",
    "café naïve résumé Ångström",
    "你好，世界！",
    "I'm sure you'll see they've done it.",
    "<|im_start|>user\nhi<|im_end|>",
]
MAX_PROMPT_TOKENS = 48
# Every model also runs one prompt of LONG_PROMPT_TOKENS: longer than three
# 64-token tiles of the CUDA flash-attention prefill (and the delta rule's
# 64-token chunks), so tile edges and the online softmax across tiles are
# compared with the reference, not only one partial tile.
LONG_PROMPT = " ".join(f"step {i}: the {w} expert reads tile {i % 7} and writes {i * 3}" for i, w in
                       enumerate(["first", "routed", "cold", "hot", "shared", "streamed", "cached", "prefetched",
                                  "grouped", "masked", "causal", "softmax", "rotary", "gated", "decayed",
                                  "tiled", "pinned", "staged", "evicted", "resident"] * 2))
LONG_PROMPT_TOKENS = 200
GREEDY_TOKENS = 32
TYPES = ["f32", "f16", "bf16", "q8_0"]
LOGIT_BOUNDS = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2, "q8_0": 1e-2}
# q8_0: the bound is also at least Q8_SPREAD_FACTOR x the reference's own
# spread when every rounded matmul input is first jittered by Q8_JITTER
# (relative, the size of the f32 differences measured at f32): the median
# over Q8_JITTER_RUNS seeds of the worst prompt's error.
Q8_JITTER, Q8_JITTER_RUNS, Q8_SPREAD_FACTOR = 1e-6, 3, 2.0
# q8_0: the logits are compared with the reference taking moestream's expert
# choices (RouteForcer); where those differ from the reference's own, the
# reference's margin against them must be below this share of the token's
# router logit range (a near tie, not a wrong choice).
Q8_ROUTE_MARGIN = 0.02

# Tiny models: a few layers, 8-16 experts, top-2..4, hidden 128.
MODELS = {
    "qwen3moe": dict(
        hf_class="Qwen3MoeForCausalLM",
        config_class="Qwen3MoeConfig",
        tokenizer="qwen3",
        config=dict(
            hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            num_experts=16, num_experts_per_tok=4, norm_topk_prob=True,
            max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
            decoder_sparse_step=1, mlp_only_layers=[], hidden_act="silu",
        ),
        rope_theta=1000000.0,
        n_expert=16, top_k=4,
    ),
    # Qwen3.5/3.6-MoE: the real 3:1 pattern (3 Gated DeltaNet layers, then
    # full attention), 2 key heads serving 4 value heads (so the grouped ->
    # tiled value-head reorder of the converter is exercised), partial RoPE
    # (a quarter of the head), a shared expert. Its extra prompt is longer
    # than the 64-token chunk of the delta rule's prompt form.
    "qwen35moe": dict(
        hf_class="Qwen3_5MoeForCausalLM",
        config_class="Qwen3_5MoeTextConfig",
        tokenizer="qwen3",
        config=dict(
            hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4,
            num_experts=16, num_experts_per_tok=4, moe_intermediate_size=64, shared_expert_intermediate_size=64,
            max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False, hidden_act="silu",
        ),
        rope_theta=10000000.0,
        rope_extra=dict(partial_rotary_factor=0.25, mrope_section=[2, 1, 1]),
        n_expert=16, top_k=4,
        max_prompt_tokens=100,
        extra_prompts=[" ".join(f"item {i}: the {w} state carries on" for i, w in
                                enumerate(["recurrent", "linear", "gated", "delta", "chunked", "decayed",
                                           "shared", "routed", "partial", "rotary"]))],
    ),
    "mixtral": dict(
        hf_class="MixtralForCausalLM",
        config_class="MixtralConfig",
        tokenizer="llama2",
        config=dict(
            hidden_size=128, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
            num_experts_per_tok=2, max_position_embeddings=512, rms_norm_eps=1e-5,
            tie_word_embeddings=False, sliding_window=None, hidden_act="silu",
        ),
        rope_theta=1000000.0,
        n_expert=8, top_k=2,
    ),
    # gpt-oss (GptOssForCausalLM, GGUF arch gpt-oss): every part of the real
    # recipe at test size: biases on q/k/v/o, router and experts, attention
    # sinks, a sliding window of 8 on the even layers (the 48- and 200-token
    # prompts cross it), the clamped SwiGLU, YaRN x32 over 4096 (the real
    # rope_scaling, with truncate: true so transformers rounds the ramp ends
    # as llama.cpp's GGUF keys do; the published config says false, see
    # src/convert/hf_config.cpp). max_position_embeddings 32 x 4096 as the
    # real config (transformers derives YaRN's factor from that ratio when
    # original_max_position_embeddings is given). Types: f32, f16, bf16 only:
    # its experts are stored transposed ([E, in, out]) and run through
    # matmuls, which the q8_0 emulation (F.linear rows) does not cover.
    "gpt-oss": dict(
        hf_class="GptOssForCausalLM",
        config_class="GptOssConfig",
        tokenizer="qwen3",
        config=dict(
            hidden_size=64, intermediate_size=64, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
            hidden_act="silu", swiglu_limit=7.0, attention_bias=True,
        ),
        rope_theta=150000.0,
        rope_extra=dict(rope_type="yarn", factor=32.0, original_max_position_embeddings=4096,
                        beta_fast=32.0, beta_slow=1.0, truncate=True),
        n_expert=8, top_k=2,
        types=["f32", "f16", "bf16"],
    ),
}


def model_args(args, spec):
    """args with --types narrowed to the types the model's spec supports."""
    if "types" not in spec:
        return args
    return argparse.Namespace(**{**vars(args), "types": [t for t in args.types if t in spec["types"]]})


# ---------------------------------------------------------------- results table

class Results:
    def __init__(self):
        self.rows = []  # (model, type, check, value, bound, status)

    def add(self, model, typ, check, value, bound, ok, note=""):
        status = "PASS" if ok else "FAIL"
        if note:
            status += f" ({note})"
        self.rows.append((model, typ, check, value, bound, status))
        print(f"  {model:9s} {typ:5s} {check:28s} {value:>22s}  bound {bound:10s} {status}", flush=True)

    def info(self, model, typ, check, value):
        """A figure shown for context, not a pass/fail check."""
        self.rows.append((model, typ, check, value, "-", "info"))
        print(f"  {model:9s} {typ:5s} {check:28s} {value:>22s}  {'':16s} info", flush=True)

    def failed(self):
        return [r for r in self.rows if r[5].startswith("FAIL")]

    def markdown(self, header):
        lines = [header, "", "| model | type | check | result | bound | status |",
                 "|---|---|---|---|---|---|"]
        for r in self.rows:
            lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |")
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- moestream side

def run(cmd, timeout=600):
    # errors="replace": a random model's text may hold bytes of a split UTF-8
    # character; the figures read from the output are ASCII either way.
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n"
                           f"stdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
    return p.stdout


def read_f32(path, n_vocab=None):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    if n_vocab is not None and len(a) % n_vocab != 0:
        raise RuntimeError(f"{path}: {len(a)} floats is not a multiple of the vocabulary ({n_vocab})")
    return a


def read_hidden(path):
    """`moestream logits --hidden PATH`: (meta, floats), meta from PATH.json
    ({"n_layer_moe", "layers", "n_tokens", "n_embd"}), floats [layer][token][n_embd]."""
    meta = json.loads(Path(str(path) + ".json").read_text())
    a = read_f32(path)
    want = meta["n_layer_moe"] * meta["n_tokens"] * meta["n_embd"]
    if len(a) != want or len(meta["layers"]) != meta["n_layer_moe"]:
        raise RuntimeError(f"{path}: {len(a)} floats, its description {meta} gives {want}")
    return meta, a


class Moestream:
    def __init__(self, binary, backend, workdir):
        self.bin = str(binary)
        self.backend = backend
        self.work = Path(workdir)

    def convert(self, hf_dir, out, typ):
        run([self.bin, "convert", str(hf_dir), "-o", str(out), "--type", typ, "--quiet"])

    def kv_type(self, typ):
        """The KV cache type for weights of type `typ`: f32 for f32 weights
        (parity at 1e-4 needs unrounded K/V), else the default f16."""
        return "f32" if typ == "f32" else "f16"

    def logits(self, gguf, typ, tokens, tag, routes=False, greedy=0, hidden=False):
        """`typ`: the weights type of `gguf` (picks the KV cache type).
        hidden: also each MoE layer's router input per prompt token
        (res["hidden"]: read_hidden's (meta, floats))."""
        out = self.work / f"{tag}.f32"
        cmd = [self.bin, "logits", "-m", str(gguf), "--tokens", ",".join(map(str, tokens)),
               "-o", str(out), "--backend", self.backend]
        if self.kv_type(typ) == "f32":
            cmd += ["--kv-type", "f32"]
        routes_path = None
        if routes:
            routes_path = self.work / f"{tag}.routes.json"
            cmd += ["--routes", str(routes_path)]
        hidden_path = None
        if hidden:
            hidden_path = self.work / f"{tag}.hidden.f32"
            cmd += ["--hidden", str(hidden_path)]
        if greedy:
            cmd += ["--greedy", str(greedy)]
        stdout = run(cmd)
        res = {"logits": read_f32(out), "stdout": stdout}
        if routes_path:
            res["routes"] = json.loads(routes_path.read_text())["experts"]
        if hidden_path:
            res["hidden"] = read_hidden(hidden_path)
        if greedy:
            m = re.search(r"^greedy:\s*([0-9,\s]*)$", stdout, re.M)
            if not m:
                raise RuntimeError(f"no 'greedy:' line in moestream output:\n{stdout}")
            res["greedy"] = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
        return res

    def tokenize(self, gguf, text):
        stdout = run([self.bin, "logits", "-m", str(gguf), "-p", text, "--print-tokens"])
        m = re.search(r"^tokens:\s*([0-9,\s]*)$", stdout, re.M)
        if not m:
            raise RuntimeError(f"no 'tokens:' line in moestream output:\n{stdout}")
        return [int(x) for x in m.group(1).replace(" ", "").split(",") if x]


def find_tokenizer(name):
    d = FIXTURES / name
    if (d / "tokenizer.json").exists():
        return d
    return None


# ---------------------------------------------------------------- HF side

def build_fallback_tokenizer(dest):
    """A small byte-level BPE trained on the prompts, when no fixture exists."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TOKENIZER_TEXTS * 20, trainer)
    dest.mkdir(parents=True, exist_ok=True)
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    return dest


def vocab_size_of(tokenizer_json):
    j = json.loads(Path(tokenizer_json).read_text())
    ids = list(j["model"]["vocab"].values()) + [a["id"] for a in j.get("added_tokens", [])]
    n = max(ids) + 1
    return (n + 127) // 128 * 128  # spare rows, as real checkpoints have


def make_config(transformers, spec, vocab_size):
    import inspect
    cls = getattr(transformers, spec["config_class"])
    kw = dict(spec["config"])
    kw["vocab_size"] = vocab_size
    params = inspect.signature(cls.__init__).parameters
    if "rope_parameters" in params or spec.get("rope_extra"):  # transformers 5.x
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": spec["rope_theta"], **spec.get("rope_extra", {})}
    else:
        kw["rope_theta"] = spec["rope_theta"]
    cfg = cls(**kw)
    # The expert count's name moved between versions (num_experts / num_local_experts).
    for name in ("num_experts", "num_local_experts"):
        if hasattr(cfg, name) and getattr(cfg, name) != spec["n_expert"]:
            setattr(cfg, name, spec["n_expert"])
    cfg.use_cache = True
    return cfg


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


def init_vectors_and_matrices(torch, model, g):
    """The generic part of randomize, drawn from generator `g` in parameter
    order: every vector 1 + 0.1 N, every matrix N / sqrt(fan_in) (the last
    dim). tools/parity_conditioning.py's "old" init is this alone."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))


def randomize(torch, model, seed):
    """Weights with O(1) activations and decisive routing (HF's default init is
    std 0.02, and transformers 5 starts routers at zero: every expert ties).

    Every norm scales by 1 + 0.1 N, whether it stores the scale (w) or its
    offset from 1 (Qwen3.5's (1 + w) norms: w = 0.1 N there). Gated DeltaNet
    decays are slow (A in [0.05, 0.5], dt_bias 0: a state keeps 40-98% per
    token), as a trained model's long-memory heads; with the 1 + 0.1 N of
    every other vector the decay would be ~0.03 per token, so the carried
    state (and the chunked prompt form) would hardly be tested, and the
    per-head output norm would amplify small differences up to 7x
    (tools/parity_conditioning.py, bench/results/parity.md)."""
    g = torch.Generator().manual_seed(seed)
    init_vectors_and_matrices(torch, model, g)
    with torch.no_grad():
        for _, m, one_plus in norm_modules(torch, model):
            if one_plus:
                m.weight.copy_(0.1 * torch.randn(m.weight.shape, generator=g))
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(0.05 + 0.45 * torch.rand(p.shape, generator=g)))
            elif name.endswith("dt_bias"):
                p.zero_()


def router_modules(model):
    """(layer index, router module) for every decoder layer: the MoE block's
    `gate` (mlp.gate; Mixtral's block_sparse_moe.gate in older transformers)."""
    out = []
    for i, layer in enumerate(model.model.layers):
        block = getattr(layer, "mlp", None)
        if block is not None and hasattr(block, "router"):  # gpt-oss: mlp.router (weight + bias)
            out.append((i, block.router))
            continue
        if block is None or not hasattr(block, "gate"):
            block = getattr(layer, "block_sparse_moe")
        out.append((i, block.gate))
    return out


class RouterRecorder:
    """Forward hooks on every layer's router: the chosen experts per token."""

    def __init__(self, torch, model, top_k):
        self.torch, self.top_k = torch, top_k
        self.calls = {}
        self.handles = [gate.register_forward_hook(self._hook(i)) for i, gate in router_modules(model)]

    def _hook(self, i):
        def hook(mod, inp, out):
            torch = self.torch
            idx = None
            if isinstance(out, tuple):
                for o in out:
                    if torch.is_tensor(o) and not o.is_floating_point() and o.shape[-1] == self.top_k:
                        idx = o
                if idx is None:
                    out = out[0]
            if idx is None:  # router logits (or probabilities): softmax keeps the order
                idx = torch.topk(out.float(), self.top_k, dim=-1).indices
            idx = idx.reshape(-1, self.top_k)
            self.calls[i] = [sorted(int(e) for e in row) for row in idx.tolist()]
        return hook

    def routes(self):
        return [self.calls[i] for i in sorted(self.calls)]

    def close(self):
        for h in self.handles:
            h.remove()


class RouteForcer:
    """Forward hooks on every layer's router that replace its chosen experts
    with given ones (`force[layer]`: per token, a list of k experts), their
    weights recomputed from the router's own logits as the model does
    (softmax, taken at the chosen experts, renormalised if the model
    renormalises). Where a given set is not the router's own choice, the
    margin by which it lost is recorded: the k-th largest logit minus the
    smallest logit of the given set, over the token's logit range (max -
    min). A correct implementation differs from the reference only at near
    ties; a wrong expert choice loses by a typical gap (~10% of the range for
    16 experts, top 4)."""

    def __init__(self, torch, model, top_k):
        self.torch, self.top_k = torch, top_k
        self.force = {}
        self.differ, self.decisions, self.max_margin = 0, 0, 0.0
        # The same per layer: {layer: [differ, decisions, max_margin]}.
        self.per_layer = {}
        self.handles = [gate.register_forward_hook(self._hook(i)) for i, gate in router_modules(model)]

    def _hook(self, i):
        def hook(mod, inp, out):
            torch, k = self.torch, self.top_k
            if i not in self.force:
                return None
            if not isinstance(out, tuple):
                raise RuntimeError("route forcing needs a router that returns its top-k (transformers 5)")
            scores = wts = idx = None
            for j, o in enumerate(out):
                if not torch.is_tensor(o):
                    continue
                if not o.is_floating_point() and o.shape[-1] == k:
                    idx = j
                elif o.is_floating_point() and o.shape[-1] == k:
                    wts = j
                elif o.is_floating_point():
                    scores = j
            if scores is None or wts is None or idx is None:
                raise RuntimeError("route forcing: the router's outputs are not (scores, weights, indices)")
            sc = out[scores].float().reshape(-1, out[scores].shape[-1])
            probs = sc if bool((sc >= 0).all()) and torch.allclose(sc.sum(-1), torch.ones_like(sc[:, 0]), atol=1e-4) \
                else torch.softmax(sc, dim=-1)
            logit = torch.log(probs.clamp_min(1e-30))  # logits up to a per-token constant
            own = out[idx].reshape(-1, k)
            forced = torch.tensor(self.force[i], dtype=own.dtype, device=own.device)
            if forced.shape != own.shape:
                raise RuntimeError(f"route forcing: layer {i} has {own.shape[0]} tokens, given {forced.shape[0]}")
            stats = self.per_layer.setdefault(i, [0, 0, 0.0])
            for t in range(own.shape[0]):
                self.decisions += 1
                stats[1] += 1
                if sorted(own[t].tolist()) == sorted(forced[t].tolist()):
                    continue
                self.differ += 1
                stats[0] += 1
                row = logit[t]
                kth = torch.topk(row, k).values[-1]
                margin = float((kth - row[forced[t]].min()) / (row.max() - row.min()))
                self.max_margin = max(self.max_margin, margin)
                stats[2] = max(stats[2], margin)
            w_old = out[wts].reshape(-1, k).float()
            w = probs.gather(1, forced.long())
            if torch.allclose(w_old.sum(-1), torch.ones_like(w_old[:, 0]), atol=1e-4):
                w = w / w.sum(-1, keepdim=True)
            res = list(out)
            res[wts] = w.to(out[wts].dtype).reshape(out[wts].shape)
            res[idx] = forced.reshape(out[idx].shape)
            return tuple(res)
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def hf_logits(torch, model, ids):
    with torch.no_grad():
        x = torch.tensor([ids], dtype=torch.long, device=next(model.parameters()).device)
        return model(input_ids=x, use_cache=False).logits[0].float().cpu()


def hf_greedy(torch, model, ids, n):
    out = list(ids)
    for _ in range(n):
        out.append(int(torch.argmax(hf_logits(torch, model, out)[-1])))
    return out[len(ids):]


def saved_expert_layout(hf_dir):
    names = []
    idx = hf_dir / "model.safetensors.index.json"
    if idx.exists():
        names = list(json.loads(idx.read_text())["weight_map"].keys())
    else:
        from safetensors import safe_open
        with safe_open(str(hf_dir / "model.safetensors"), "pt") as f:
            names = list(f.keys())
    if any("experts.gate_up_proj" in n or n.endswith("experts.down_proj") for n in names):
        return "fused"
    return "per-expert"


# ---------------------------------------------------------------- reference weights per type

def is_router(param_name):
    """Matrices the converter keeps in f32 whatever the type (its Router and
    Norm roles): Qwen3-MoE's mlp.gate.weight, Mixtral's block_sparse_moe.gate
    (mlp.gate in 5.x); Qwen3.5's shared-expert gate, Gated DeltaNet's alpha/beta
    projections (in_proj_a/b) and conv taps."""
    return (param_name.endswith(".gate.weight") or param_name.endswith(".gate")
            or param_name.endswith(".router.weight") or param_name.endswith("_bias")  # gpt-oss: router, expert biases
            or param_name.endswith("shared_expert_gate.weight")
            or any(f".linear_attn.{p}." in param_name for p in ("in_proj_a", "in_proj_b", "conv1d")))


def round_q8_0(torch, w):
    """Q8_0 blocks of 32 along the last dim (a GGUF row is HF's in-features):
    d = amax/127 stored as f16, q = round(w/d) in [-127, 127]."""
    shape = w.shape
    x = w.reshape(-1, 32)
    d = x.abs().amax(dim=1, keepdim=True) / 127.0
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    q = torch.clamp(torch.round(x * inv), -127, 127)
    return (q * d.half().float()).reshape(shape)


def rounded_reference(torch, model, typ, keep=None, col_perm=None):
    """A copy of the f32 model whose weight matrices hold what the converted
    file of type `typ` holds (see the converter's choose_tensor_type).
    keep(name) true: that parameter stays f32 (--layer-diff-ablate).
    col_perm: {name: (perm, inv)}, Q8_0 blocks taken over those matrices'
    columns in the file's order (None: file_col_perms, the converter's; {}:
    Hugging Face's order, for --layer-diff-ablate)."""
    import copy
    if typ == "f32":
        return model
    if col_perm is None:
        col_perm = file_col_perms(torch, model)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if p.dim() < 2 or is_router(name) or (keep is not None and keep(name)):
                continue
            if typ == "f16":
                p.copy_(p.half().float())
            elif typ == "bf16":
                p.copy_(p.bfloat16().float())
            elif typ == "q8_0":
                if p.shape[-1] % 32 != 0:
                    p.copy_(p.half().float())  # the converter's fallback for odd rows
                elif name in col_perm:
                    perm, inv = col_perm[name]
                    p.copy_(round_q8_0(torch, p[..., perm.to(p.device)])[..., inv.to(p.device)])
                else:
                    p.copy_(round_q8_0(torch, p))
            else:
                raise ValueError(f"no reference rounding for {typ}")
    return ref


def is_q8_0_matrix(name, p):
    """The parameters the converter writes as Q8_0 and moestream multiplies
    with Q8_0 activations (the token embedding is only looked up)."""
    return p.dim() >= 2 and not is_router(name) and "embed_tokens" not in name and p.shape[-1] % 32 == 0


def round_act_q8_0(torch, x, half_scale):
    """x rounded as moestream quantizes a matmul's input for a Q8_0 weight:
    blocks of 32 along the last dim, d = amax/127, q = round-half-even(x/d)
    clamped to [-127, 127]; the value used is q*d with d as stored (f16 on
    the CPU backend, f32 on CUDA)."""
    shape = x.shape
    b = x.reshape(-1, 32)
    d = b.abs().amax(dim=1, keepdim=True) / 127.0
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    q = torch.clamp(torch.round(b * inv), -127, 127)
    ds = d.half().float() if half_scale else d
    return (q * ds).reshape(shape)


def use_eager_experts(model):
    """transformers 5 may run the 3-D expert tensors through grouped or
    batched matmuls (gathered copies, no F.linear); its eager path calls
    F.linear on a view of each expert, which Q8ActivationRounding sees."""
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
            return
        except Exception:  # noqa: BLE001 -- fall back to the config attribute
            pass
    try:
        model.config._experts_implementation = "eager"
    except Exception:  # noqa: BLE001 -- older versions: per-expert nn.Linear, nothing to do
        pass


class Q8ActivationRounding:
    """While active, torch.nn.functional.linear rounds its input to Q8_0
    blocks when the weight is (a slice of) one of `model`'s Q8_0 matrices.
    transformers calls F.linear for nn.Linear and for the 3-D expert tensors
    of its eager experts path; `unseen()` names matrices that never went
    through it, so a different code path is an error, not a silent pass."""

    def __init__(self, torch, model, half_scale, jitter=0.0, seed=0, skip=None, col_perm=None):
        self.torch, self.half_scale = torch, half_scale
        # jitter > 0: each input is first scaled by (1 + jitter * N(0,1)),
        # a stand-in for another implementation's last-bit differences.
        self.jitter = jitter
        self.gen = torch.Generator().manual_seed(seed)
        self.names = {}
        for name, p in model.named_parameters():
            if is_q8_0_matrix(name, p):
                self.names[p.untyped_storage().data_ptr()] = name
        self.seen = set()
        # `col_perm`, {name: (perm, inv)}: that matrix's input is rounded in
        # blocks of 32 of x[..., perm] (the file's column order), then put
        # back (x[..., inv]); None: file_col_perms, {}: Hugging Face's order.
        # --layer-diff-ablate: `skip`, names of Q8_0 matrices whose input is
        # left as it is (still counted as seen).
        skip = skip or ()
        if col_perm is None:
            col_perm = file_col_perms(torch, model)
        self.skip = {k for k, n in self.names.items() if n in skip}
        self.col_perm = {k: col_perm[n] for k, n in self.names.items() if n in col_perm}

    def __enter__(self):
        F = self.torch.nn.functional
        self.orig = F.linear
        orig, names, seen, torch, half = self.orig, self.names, self.seen, self.torch, self.half_scale
        jitter, gen = self.jitter, self.gen
        skip, col_perm = self.skip, self.col_perm

        def linear(x, weight, bias=None):
            key = weight.untyped_storage().data_ptr()
            if key in names:
                seen.add(key)
                if key in skip:
                    return orig(x, weight, bias)
                if jitter > 0:
                    x = x * (1 + jitter * torch.randn(x.shape, generator=gen).to(x.device, x.dtype))
                if key in col_perm:
                    perm, inv = col_perm[key]
                    x = round_act_q8_0(torch, x[..., perm.to(x.device)], half)[..., inv.to(x.device)]
                else:
                    x = round_act_q8_0(torch, x, half)
            return orig(x, weight, bias)

        F.linear = linear
        return self

    def __exit__(self, *exc):
        self.torch.nn.functional.linear = self.orig
        return False

    def unseen(self):
        # Per-expert layouts (older transformers) skip experts no token chose.
        return sorted(n for k, n in self.names.items()
                      if k not in self.seen and not re.search(r"experts\.\d+\.", n))


# ---------------------------------------------------------------- comparisons

def max_rel_err(ms, hf):
    """max_i |ms_i - hf_i| / max_i |hf_i| over one vocabulary row."""
    scale = max(abs(float(v)) for v in hf)
    diff = max(abs(float(a) - float(b)) for a, b in zip(ms, hf))
    return diff / scale if scale > 0 else diff


def argmax(v):
    best, bi = -math.inf, -1
    for i, x in enumerate(v):
        if x > best:
            best, bi = x, i
    return bi


def prepare_model(name, spec, args, ms, torch, transformers):
    """The tiny random model of `spec`, saved, converted to every type of
    args.types: dict(model (on args.hf_device), hf_tok, tok_note, vocab,
    prompts (token id lists), ggufs {type: path})."""
    print(f"== {name}", flush=True)
    work = Path(args.out) / name
    hf_dir = work / "hf"
    if hf_dir.exists():
        shutil.rmtree(hf_dir)
    hf_dir.mkdir(parents=True)

    tok_dir = find_tokenizer(spec["tokenizer"])
    tok_note = f"fixture {spec['tokenizer']}"
    if tok_dir is None:
        tok_dir = build_fallback_tokenizer(work / "bpe_tokenizer")
        tok_note = "BPE trained here"
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (tok_dir / f).exists():
            shutil.copy(tok_dir / f, hf_dir / f)
    from tokenizers import Tokenizer
    hf_tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    vocab = vocab_size_of(hf_dir / "tokenizer.json")

    torch.manual_seed(args.seed)
    cfg = make_config(transformers, spec, vocab)
    model_cls = getattr(transformers, spec["hf_class"])
    try:
        model = model_cls._from_config(cfg, attn_implementation="eager")
    except Exception:  # older/newer spelling
        cfg._attn_implementation = "eager"
        model = model_cls(cfg)
    model = model.float().eval()
    randomize(torch, model, args.seed)
    model.save_pretrained(str(hf_dir))  # safetensors by default (4.35+, 5.x)
    layout = saved_expert_layout(hf_dir)
    print(f"  saved {spec['hf_class']} (vocab {vocab}, {tok_note}, experts {layout})", flush=True)
    model = model.to(args.hf_device)

    prompts = []
    for p in PROMPTS + spec.get("extra_prompts", []):
        ids = hf_tok.encode(p).ids[:spec.get("max_prompt_tokens", MAX_PROMPT_TOKENS)]
        if ids:
            prompts.append(ids)
    prompts.append(hf_tok.encode(LONG_PROMPT).ids[:LONG_PROMPT_TOKENS])

    ggufs = {}
    for typ in args.types:
        out = work / f"{name}-{typ}.gguf"
        t0 = time.time()
        ms.convert(hf_dir, out, typ)
        ggufs[typ] = out
        print(f"  converted {typ} in {time.time() - t0:.1f} s", flush=True)
    return dict(model=model, hf_tok=hf_tok, tok_note=tok_note, vocab=vocab, prompts=prompts, ggufs=ggufs)


def check_model(name, spec, args, ms, res, torch, transformers):
    p = prepare_model(name, spec, args, ms, torch, transformers)
    model, hf_tok, tok_note, vocab, prompts, ggufs = (p[k] for k in ("model", "hf_tok", "tok_note", "vocab",
                                                                     "prompts", "ggufs"))

    # HF reference (all positions, routes) once per prompt.
    rec = RouterRecorder(torch, model, spec["top_k"])
    ref = []
    for ids in prompts:
        rec.calls = {}
        logits = hf_logits(torch, model, ids)
        ref.append({"last": logits[-1].tolist(), "routes": rec.routes()})
    rec.close()
    # Per type, the reference with the converted file's weights.
    ref_last = {"f32": [r["last"] for r in ref]}
    # q8_0: the bounded reference also rounds matmul inputs; the float-input
    # one (same weights) is what the top-1 check and an info row use.
    float_act_last = {}
    bounds, spreads = dict(LOGIT_BOUNDS), {}
    q8_model, half = None, args.backend == "cpu"
    float_models = {}
    for typ in args.types:
        if typ != "f32":
            rmodel = rounded_reference(torch, model, typ)
            ref_last[typ] = [hf_logits(torch, rmodel, ids)[-1].tolist() for ids in prompts]
            if typ == "q8_0":
                float_act_last[typ] = ref_last[typ]
                use_eager_experts(rmodel)
                q8_model = rmodel
                q8_rec = RouterRecorder(torch, rmodel, spec["top_k"])
                own_routes = []
                with Q8ActivationRounding(torch, rmodel, half) as qa:
                    ref_last[typ] = []
                    for ids in prompts:
                        q8_rec.calls = {}
                        ref_last[typ].append(hf_logits(torch, rmodel, ids)[-1].tolist())
                        own_routes.append(dict(enumerate(q8_rec.routes())))
                q8_rec.close()
                if qa.unseen():
                    raise RuntimeError("q8_0 reference: these matrices did not go through "
                                       "torch.nn.functional.linear, so their inputs were not rounded: "
                                       + ", ".join(qa.unseen()[:4]))
                # Rounding is discontinuous: a last-bit difference that moves
                # one activation across a rounding boundary changes it by a
                # whole step, and that difference spreads. How far the
                # reference itself moves under f32-sized input jitter is the
                # scale any correct implementation can differ by. The routes
                # stay the unjittered run's (RouteForcer): expert choice is
                # the other discontinuity, checked on its own below.
                per_seed = []
                forcer = RouteForcer(torch, rmodel, spec["top_k"])
                # Forced onto its own choices, the reference must not move:
                # else the router's outputs were misread.
                forcer.force = own_routes[0]
                with Q8ActivationRounding(torch, rmodel, half):
                    same = max_rel_err(hf_logits(torch, rmodel, prompts[0])[-1].tolist(), ref_last[typ][0])
                if same > 1e-6 or forcer.differ:
                    raise RuntimeError(f"route forcing moved the reference on its own routes ({same:.2e}, "
                                       f"{forcer.differ} differ): the router's outputs are not understood")
                for seed in range(1, Q8_JITTER_RUNS + 1):
                    worst_seed = 0.0
                    with Q8ActivationRounding(torch, rmodel, half, Q8_JITTER, seed):
                        for pi, ids in enumerate(prompts):
                            forcer.force = own_routes[pi]
                            worst_seed = max(worst_seed, max_rel_err(hf_logits(torch, rmodel, ids)[-1].tolist(),
                                                                     ref_last[typ][pi]))
                    per_seed.append(worst_seed)
                forcer.close()
                # How far the jittered reference's own routers moved: the
                # scale of the route check below on this model.
                spreads["routes"] = (f"{forcer.differ}/{forcer.decisions} differ, largest margin "
                                     f"{forcer.max_margin:.2%} of logit range")
                # The median seed: one unlucky cascade should not widen the bound.
                spread = sorted(per_seed)[len(per_seed) // 2]
                bounds[typ] = max(LOGIT_BOUNDS[typ], Q8_SPREAD_FACTOR * spread)
                spreads[typ] = f"{spread:.3e} (seeds: " + ", ".join(f"{v:.2e}" for v in per_seed) + ")"
            elif typ in ("f16", "bf16"):
                # Kept for route forcing: a long prompt at f16 rounding can
                # flip a router's near tie, as q8_0's rounding can.
                use_eager_experts(rmodel)
                float_models[typ] = rmodel
            del rmodel

    for typ in args.types:
        worst, worst_f32w, worst_fa, worst_free, top1_ok, near_ties = 0.0, 0.0, 0.0, 0.0, True, 0
        routes_ok, routes_checked = True, typ == "f32"
        # q8_0: the reference takes moestream's expert choices, and where they
        # differ from its own, by how little they lost is checked separately.
        # f16 / bf16 likewise, so that a flipped near tie (checked by the
        # same margin) is told apart from an error in the arithmetic.
        forced = typ == "q8_0" or typ in float_models
        forced_model = q8_model if typ == "q8_0" else float_models.get(typ)
        forcer = RouteForcer(torch, forced_model, spec["top_k"]) if forced else None
        bound = bounds[typ]
        for pi, ids in enumerate(prompts):
            r = ms.logits(ggufs[typ], typ, ids, f"{name}-{typ}-p{pi}", routes=routes_checked or forced)
            last = list(r["logits"][-vocab:])
            if len(last) != vocab:
                raise RuntimeError(f"moestream returned {len(r['logits'])} logits, expected {vocab}")
            hf_last = ref_last[typ][pi]
            if forced:
                worst_free = max(worst_free, max_rel_err(last, hf_last))
                forcer.force = {li: [list(e) for e in layer] for li, layer in enumerate(r["routes"])}
                if typ == "q8_0":
                    with Q8ActivationRounding(torch, q8_model, half):
                        hf_last = hf_logits(torch, q8_model, ids)[-1].tolist()
                else:
                    hf_last = hf_logits(torch, forced_model, ids)[-1].tolist()
                print(f"    {name} {typ} prompt {pi} ({len(ids)} tokens): rel err {max_rel_err(last, ref_last[typ][pi]):.3e}"
                      f" routing itself, {max_rel_err(last, hf_last):.3e} on moestream's routes", flush=True)
            err = max_rel_err(last, hf_last)
            worst = max(worst, err)
            worst_f32w = max(worst_f32w, max_rel_err(last, ref[pi]["last"]))
            # Top-1 against the file's weights with float activations where
            # the bounded reference rounds them; a near tie is a top-2 gap
            # smaller than what that rounding moves HF's own logits by.
            top_ref, tie_scale = hf_last, bound
            if typ in float_act_last:
                top_ref = float_act_last[typ][pi]
                tie_scale = max(bound, max_rel_err(hf_last, top_ref))
                worst_fa = max(worst_fa, max_rel_err(last, top_ref))
            a, b = argmax(last), argmax(top_ref)
            if a != b:
                scale = max(abs(v) for v in top_ref)
                gap = (top_ref[b] - top_ref[a]) / scale
                if gap < tie_scale:
                    near_ties += 1
                else:
                    top1_ok = False
            if routes_checked:
                got = [[sorted(e) for e in layer] for layer in r["routes"]]
                want = ref[pi]["routes"]
                if got != want:
                    routes_ok = False
                    for li, (g, w) in enumerate(zip(got, want)):
                        for ti, (ge, we) in enumerate(zip(g, w)):
                            if ge != we:
                                print(f"    route mismatch: prompt {pi} layer {li} token {ti}: "
                                      f"moestream {ge} hf {we}", flush=True)
                                break
        what = "last logits max rel err" + (", moestream's routes" if forced else "")
        res.add(name, typ, what, f"{worst:.3e}", f"{bound:.3g}", worst <= bound)
        if forced:
            forcer.close()
            res.add(name, typ, "routes unlike the reference's lose by a near tie",
                    f"{forcer.differ}/{forcer.decisions} differ, largest margin {forcer.max_margin:.2%} of logit range",
                    f"< {Q8_ROUTE_MARGIN:.0%}", forcer.max_margin < Q8_ROUTE_MARGIN)
            res.info(name, typ, "rel err, each side routing itself", f"{worst_free:.3e}")
        if typ in spreads:
            res.info(name, typ, f"reference spread, {Q8_JITTER:g} jitter, same routes", spreads[typ])
            res.info(name, typ, f"reference's routers under {Q8_JITTER:g} jitter", spreads["routes"])
        if typ in float_act_last:
            res.info(name, typ, "rel err vs float activations", f"{worst_fa:.3e}")
        if typ != "f32":
            res.info(name, typ, "rel err vs unrounded f32 model", f"{worst_f32w:.3e}")
        note = f"{near_ties} near tie(s)" if near_ties else ""
        res.add(name, typ, "top-1 agrees", "yes" if top1_ok else "no", "all prompts",
                top1_ok or typ not in ("q8_0",), note)
        if routes_checked:
            n = len(prompts) * spec["config"]["num_hidden_layers"]
            res.add(name, typ, "router experts identical", "yes" if routes_ok else "no",
                    f"{n} layer-prompts", routes_ok)

    # Greedy continuation at f32.
    if "f32" in args.types:
        same = True
        for pi, ids in enumerate(prompts[:2]):
            want = hf_greedy(torch, model, ids, GREEDY_TOKENS)
            got = ms.logits(ggufs["f32"], "f32", ids, f"{name}-greedy-p{pi}", greedy=GREEDY_TOKENS)["greedy"]
            if got != want:
                same = False
                print(f"    greedy mismatch (prompt {pi}):\n      moestream {got}\n      hf        {want}", flush=True)
        res.add(name, "f32", f"greedy {GREEDY_TOKENS} tokens identical", "yes" if same else "no", "identical", same)

    # Tokenizer parity through the converted GGUF.
    gguf = ggufs[args.types[0]]
    mismatches = 0
    for text in TOKENIZER_TEXTS:
        want = hf_tok.encode(text).ids
        got = ms.tokenize(gguf, text)
        if got != want:
            mismatches += 1
            print(f"    tokenizer mismatch on {text!r}:\n      moestream {got}\n      hf        {want}", flush=True)
    res.add(name, "-", f"tokenizer ({tok_note})", f"{len(TOKENIZER_TEXTS) - mismatches}/{len(TOKENIZER_TEXTS)} texts",
            "all", mismatches == 0)

# ---------------------------------------------------------------- --layer-diff

class RouterInputRecorder:
    """Forward pre-hooks on every layer's router: its input (the MoE block's
    input after the layer's FFN norm, what moestream's route hook reports as
    `hidden`), per layer as a [tokens][hidden] float tensor on the CPU."""

    def __init__(self, torch, model):
        self.torch = torch
        self.inputs = {}
        self.handles = []
        for i, gate in router_modules(model):
            try:
                self.handles.append(gate.register_forward_pre_hook(self._hook(i), with_kwargs=True))
            except TypeError:  # torch < 2.0: positional arguments only
                hook = self._hook(i)
                self.handles.append(gate.register_forward_pre_hook(lambda mod, args, hook=hook: hook(mod, args, {})))

    def _hook(self, i):
        def hook(mod, args, kwargs):
            torch = self.torch
            x = next((a for a in list(args) + list(kwargs.values())
                      if torch.is_tensor(a) and a.is_floating_point()), None)
            if x is None:
                raise RuntimeError(f"layer {i}: the router was called without a float tensor")
            self.inputs[i] = x.detach().float().reshape(-1, x.shape[-1]).cpu().clone()
            return None
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def layer_kinds(model):
    """Per decoder layer: the config's layer_types (qwen35moe: linear_attention
    / full_attention), else from full_attention_interval, else "attention"."""
    cfg = model.config
    cfg = getattr(cfg, "text_config", None) or cfg
    n = len(model.model.layers)
    types = getattr(cfg, "layer_types", None)
    if types:
        return [str(t) for t in list(types)[:n]] + ["?"] * max(0, n - len(types))
    interval = getattr(cfg, "full_attention_interval", None)
    if interval:
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    return ["attention"] * n


def row_rel_err(a, b):
    """Per token: ||a_t - b_t|| / ||b_t|| (a, b: [tokens][dim] tensors)."""
    return (a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30)


# Self-check of --layer-diff: forcing must leave the reference's first router
# input exactly as it was, and later ones up to the first layer whose routes
# it changes within the last-bit noise of the recomputed gate weights
# (RouteForcer renormalises them itself): a misread router moves them O(1).
LAYER_DIFF_SELF_TOL_FIRST, LAYER_DIFF_SELF_TOL = 1e-6, 1e-4


# ---------------------------------------------------------------- --layer-diff-ablate
# q8_0: the first MoE layer's router input rerun with the emulation of one
# group of parameters changed, on the first ABLATE_PROMPTS prompts.
ABLATE_PROMPTS = 2


def param_role(name):
    """A parameter's module role: its name without the decoder layer's and
    the expert's index and the trailing .weight / .bias, e.g.
    model.layers.0.linear_attn.out_proj.weight -> linear_attn.out_proj,
    model.layers.2.mlp.experts.5.up_proj.weight -> mlp.experts.up_proj,
    model.embed_tokens.weight -> embed_tokens."""
    s = re.sub(r"^(.*\.)?layers\.\d+\.", "", name)
    if s == name:
        s = re.sub(r"^model\.", "", s)
    s = re.sub(r"(^|\.)experts\.\d+\.", r"\1experts.", s)
    return re.sub(r"\.(weight|bias)$", "", s)


def layer_roles(model, first):
    """The roles (param_role) of decoder layer `first`'s parameters and of
    those outside the layers (embedding, final norm, head), in model order."""
    roles = []
    for name, _ in model.named_parameters():
        m = re.search(r"(^|\.)layers\.(\d+)\.", name)
        if (m is None or int(m.group(2)) == first) and param_role(name) not in roles:
            roles.append(param_role(name))
    return roles


def tiled_out_proj_perm(torch, model):
    """The converter's column order of Gated DeltaNet's out_proj
    (src/convert/tensor_plan.cpp: value heads grouped -> tiled, GGUF column
    i = HF column perm[i]; its Q8_0 blocks of 32 run in that order), as
    (perm, inv) index tensors, or None without linear-attention heads."""
    cfg = model.config
    cfg = getattr(cfg, "text_config", None) or cfg
    nk, nv, dv = (getattr(cfg, a, None) for a in ("linear_num_key_heads", "linear_num_value_heads",
                                                  "linear_value_head_dim"))
    if not (nk and nv and dv) or nv % nk:
        return None
    perm = [((j % nk) * (nv // nk) + j // nk) * dv + x for j in range(nv) for x in range(dv)]
    perm = torch.tensor(perm, dtype=torch.long)
    return perm, torch.argsort(perm)


def file_col_perms(torch, model):
    """{name: (perm, inv)} for the Q8_0 matrices whose columns the converter
    reorders: Gated DeltaNet's out_proj (value heads tiled). Its Q8_0 blocks
    of 32 run over the file's order; where a value head is narrower than a
    block (the parity model's 16) a block spans other heads than in
    Hugging Face's order, so the reference must round in the file's."""
    tiled = tiled_out_proj_perm(torch, model)
    if tiled is None:
        return {}
    return {n: tiled for n, p in model.named_parameters()
            if is_q8_0_matrix(n, p) and n.endswith("linear_attn.out_proj.weight") and p.shape[-1] == len(tiled[0])}


def ablation_variants(torch, model, first):
    """(label, role, params, rounded_reference keep predicate or None,
    Q8ActivationRounding skip names, col_perm: None for the file's order) for
    --layer-diff-ablate: the baseline, the two global variants, out_proj
    rounded in Hugging Face's column order (the emulation's old error),
    then per role of layer `first` (and outside the layers) "input not
    rounded" (its Q8_0 matrices) and "weight f32" (its rounded matrices)."""
    named = list(model.named_parameters())
    q8_names = [n for n, p in named if is_q8_0_matrix(n, p)]
    rounded = [n for n, p in named if p.dim() >= 2 and not is_router(n)]
    out = [("baseline (normal emulation)", "all", len(rounded), None, (), None),
           ("no input rounding anywhere", "all", len(q8_names), None, frozenset(q8_names), None),
           ("f32 weights everywhere", "all", len(rounded), lambda n: True, (), None)]
    perms = file_col_perms(torch, model)
    if perms:
        out.append(("weight + input blocks in Hugging Face's column order (the emulation before 2026-11-25)",
                    "linear_attn.out_proj", len(perms), None, (), {}))
    for role in layer_roles(model, first):
        q8 = [n for n, p in named if param_role(n) == role and is_q8_0_matrix(n, p)]
        rnd = [n for n in rounded if param_role(n) == role]
        if q8:
            out.append(("input not rounded", role, len(q8), None, frozenset(q8), None))
        if rnd:
            out.append(("weight f32", role, len(rnd), (lambda n, role=role: param_role(n) == role), (), None))
    return out


def ablated_reference(torch, model, typ, keep, col_perm):
    """rounded_reference with `keep` left f32 and col_perm's column orders."""
    ref = rounded_reference(torch, model, typ, keep=keep, col_perm=col_perm)
    use_eager_experts(ref)
    return ref


def ablate_first_layer(torch, model, ref, typ, first, data, half, k):
    """--layer-diff-ablate: per variant (ablation_variants), the first MoE
    layer's router input rel err, moestream against the reference forced
    onto moestream's routes, per prompt of `data` ([(ids, moestream's router
    input of layer `first` [tokens][dim], forced routes)]): a list of
    (label, role, params, [(last, max) per prompt]). `ref` (the normal
    q8_0 reference) serves the variants that keep its weights."""
    rows = []
    for label, role, n, keep, skip, col_perm in ablation_variants(torch, model, first):
        rmodel = ref if keep is None and col_perm is None else ablated_reference(torch, model, typ, keep, col_perm)
        rec = RouterInputRecorder(torch, rmodel)
        forcer = RouteForcer(torch, rmodel, k)
        errs = []
        try:
            for ids, ms_first, force in data:
                rec.inputs, forcer.force = {}, force
                with Q8ActivationRounding(torch, rmodel, half, skip=skip, col_perm=col_perm) as qa:
                    hf_logits(torch, rmodel, ids)
                if qa.unseen():
                    raise RuntimeError("ablation: matrices not seen through F.linear: " + ", ".join(qa.unseen()[:4]))
                rel = row_rel_err(ms_first, rec.inputs[first])
                errs.append((float(rel[-1]), float(rel.max())))
        finally:
            rec.close()
            forcer.close()
        if rmodel is not ref:
            del rmodel
        rows.append((label, role, n, errs))
        print(f"    ablation {label:45s} {role:32s} " + "  ".join(f"p{i} last {a:.3e} max {b:.3e}"
                                                                  for i, (a, b) in enumerate(errs)), flush=True)
    return rows


def ablation_markdown(name, typ, backend, first, rows, normal):
    """The --layer-diff-ablate table; `normal`: [(last, max)] per prompt of
    the layer-diff run above, which the baseline row must reproduce."""
    base = max(b for _, b in rows[0][3]) if rows and rows[0][3] else 0.0
    same = bool(rows) and all(abs(a - c) <= 1e-6 * max(c, 1e-30) and abs(b - d) <= 1e-6 * max(d, 1e-30)
                              for (a, b), (c, d) in zip(rows[0][3], normal))
    n = len(normal)
    md = [f"### {name} {typ}, backend {backend}: ablation of the q8_0 emulation, MoE layer {first}'s router input", "",
          f"Rel err of MoE layer {first}'s router input, moestream against the reference on moestream's routes, "
          f"first {n} prompt(s), last token / max over tokens, with the emulation of one group of parameters "
          "changed (model-wide, by role: the name without layer and expert index). \"input not rounded\": "
          "that role's matmul inputs are not rounded to Q8_0 blocks (weights still rounded); \"weight f32\": "
          "its weights unrounded (inputs still rounded); \"Hugging Face's column order\": weight and input blocks "
          "of 32 taken over Hugging Face's columns, not the file's (value heads tiled), as the emulation did "
          "before 2026-11-25. "
          "A variant that falls far below the baseline points to the op moestream computes differently. "
          f"Baseline reproduces the layer-diff run's figure: {'yes' if same else 'NO'}.", "",
          "| variant | role | params | " + " | ".join(f"prompt {i} last / max" for i in range(n))
          + " | worst max / baseline's |",
          "|---|---|---|" + "---|" * n + "---|",
          "| layer-diff run (tables above) | - | - | " + " | ".join(f"{a:.3e} / {b:.3e}" for a, b in normal) + " | - |"]
    for label, role, cnt, errs in rows:
        worst = max((b for _, b in errs), default=0.0)
        md.append(f"| {label} | {role} | {cnt} | " + " | ".join(f"{a:.3e} / {b:.3e}" for a, b in errs)
                  + f" | {worst / base if base > 0 else float('nan'):.3g} |")
    return md + [""]



def layer_diff(name, spec, args, ms, torch, transformers):
    """Where moestream's hidden state departs from the reference's, layer by
    layer, with the reference taking moestream's expert choices (RouteForcer),
    so that a different choice does not hide an arithmetic difference. For
    each type and prompt: `moestream logits --routes --hidden`, then the
    reference (the converted file's weights; q8_0 with its matmul inputs
    rounded as in the parity check) once routing itself and once forced onto
    moestream's routes, the routers' inputs recorded by pre-hooks. Returns
    (markdown, self_check_ok). The self-check: forcing must not move the
    reference's router inputs up to the first layer whose routes it changes
    (the first MoE layer's exactly, later ones to last-bit noise). With
    --layer-diff-ablate, q8_0 also gets ablate_first_layer's table."""
    p = prepare_model(name, spec, args, ms, torch, transformers)
    model, prompts, ggufs, vocab = p["model"], p["prompts"], p["ggufs"], p["vocab"]
    kinds = layer_kinds(model)
    half, k = args.backend == "cpu", spec["top_k"]
    md = []
    self_ok = True
    for typ in args.types:
        ref = rounded_reference(torch, model, typ)
        q8 = typ == "q8_0"
        if q8:
            use_eager_experts(ref)
        inputs = RouterInputRecorder(torch, ref)
        own = RouterRecorder(torch, ref, k)
        forcer = RouteForcer(torch, ref, k)  # after `own`: that one sees the router's own choice

        def forward(ids):
            inputs.inputs, own.calls = {}, {}
            if q8:
                with Q8ActivationRounding(torch, ref, half) as qa:
                    last = hf_logits(torch, ref, ids)[-1].tolist()
                if qa.unseen():
                    raise RuntimeError("q8_0 reference: matrices not seen through F.linear: "
                                       + ", ".join(qa.unseen()[:4]))
            else:
                last = hf_logits(torch, ref, ids)[-1].tolist()
            return last, dict(inputs.inputs), dict(own.calls)

        title = (f"{name} {typ}, backend {args.backend}: router input rel err ||ms - ref|| / ||ref|| per MoE layer, "
                 f"reference on moestream's routes")
        print(f"  -- {title}", flush=True)
        summary = ["| prompt | tokens | last logits rel err, ms routes | same, each side routing itself "
                   "| first layer ms routes differ (ref routing itself) | self-check: forcing moves ref up to it |",
                   "|---|---|---|---|---|---|"]
        table = ["| prompt | layer | kind | ms routes unlike ref's (forced run) | largest margin "
                 "| last token rel err | max over tokens (token) | ref forced vs free: last / max |",
                 "|---|---|---|---|---|---|---|---|"]
        ablate = getattr(args, "layer_diff_ablate", False) and q8
        ablate_data, ablate_normal = [], []
        for pi, ids in enumerate(prompts):
            r = ms.logits(ggufs[typ], typ, ids, f"{name}-{typ}-ld{pi}", routes=True, hidden=True)
            meta, flat = r["hidden"]
            layers, T, D = meta["layers"], meta["n_tokens"], meta["n_embd"]
            if T != len(ids):
                raise RuntimeError(f"moestream --hidden: {T} tokens, the prompt has {len(ids)}")
            ms_hidden = torch.tensor(flat.tolist(), dtype=torch.float32).reshape(len(layers), T, D)
            ms_routes = {l: [sorted(e) for e in r["routes"][j]] for j, l in enumerate(layers)}
            ms_last = list(r["logits"][-vocab:])

            forcer.force = {}
            free_last, free_in, free_routes = forward(ids)
            forcer.force = {l: [list(e) for e in ms_routes[l]] for l in layers}
            forcer.per_layer = {}
            forced_last, forced_in, _ = forward(ids)
            forcer.force = {}

            if ablate and pi < ABLATE_PROMPTS:
                rel0 = row_rel_err(ms_hidden[0], forced_in[layers[0]])
                ablate_data.append((ids, ms_hidden[0].clone(), {l: [list(e) for e in ms_routes[l]] for l in layers}))
                ablate_normal.append((float(rel0[-1]), float(rel0.max())))
            first_differ = next((l for l in layers if free_routes.get(l) != ms_routes[l]), None)
            self_worst, ok = 0.0, True
            for j, l in enumerate(layers):
                if first_differ is not None and l > first_differ:
                    break
                e = float(row_rel_err(forced_in[l], free_in[l]).max())
                self_worst = max(self_worst, e)
                ok = ok and e <= (LAYER_DIFF_SELF_TOL_FIRST if j == 0 else LAYER_DIFF_SELF_TOL)
            self_ok = self_ok and ok
            e_forced, e_free = max_rel_err(ms_last, forced_last), max_rel_err(ms_last, free_last)
            fd = "none" if first_differ is None else str(first_differ)
            summary.append(f"| {pi} | {T} | {e_forced:.3e} | {e_free:.3e} | {fd} | "
                           f"{'ok' if ok else 'FAILED'} ({self_worst:.1e}) |")
            print(f"  prompt {pi} ({T} tokens): last logits rel err {e_forced:.3e} on moestream's routes, "
                  f"{e_free:.3e} each routing itself; first layer whose routes differ: {fd}; "
                  f"self-check {'ok' if ok else 'FAILED'} ({self_worst:.1e})", flush=True)
            for j, l in enumerate(layers):
                a, b = ms_hidden[j], forced_in[l]
                if a.shape != b.shape:
                    raise RuntimeError(f"layer {l}: moestream's router input is {tuple(a.shape)}, "
                                       f"the reference's {tuple(b.shape)}")
                rel = row_rel_err(a, b)
                t_max = int(rel.argmax())
                self_rel = row_rel_err(forced_in[l], free_in[l])
                differ, decisions, margin = forcer.per_layer.get(l, [0, 0, 0.0])
                kind = kinds[l] if l < len(kinds) else "?"
                table.append(f"| {pi} | {l} | {kind} | {differ}/{decisions} | {margin:.2%} | {float(rel[-1]):.3e} "
                             f"| {float(rel[t_max]):.3e} ({t_max}) | {float(self_rel[-1]):.1e} / "
                             f"{float(self_rel.max()):.1e} |")
                print(f"    layer {l:2d} {kind:17s} routes unlike ref {differ:3d}/{decisions:<3d} "
                      f"margin {margin:6.2%}  "
                      f"last {float(rel[-1]):.3e}  max {float(rel[t_max]):.3e} (token {t_max})  "
                      f"ref forced vs free {float(self_rel[-1]):.1e} / {float(self_rel.max()):.1e}", flush=True)
        inputs.close()
        own.close()
        forcer.close()
        ablate_md = []
        if ablate and ablate_data:
            first = layers[0]
            print(f"  -- ablation of the q8_0 emulation: MoE layer {first}'s router input, "
                  f"first {len(ablate_data)} prompt(s)", flush=True)
            try:
                rows = ablate_first_layer(torch, model, ref, typ, first, ablate_data, half, k)
                ablate_md = ablation_markdown(name, typ, args.backend, first, rows, ablate_normal)
            except Exception as e:  # noqa: BLE001 -- keep the layer-diff tables
                import traceback
                traceback.print_exc()
                print(f"error: {name} {typ} ablation: {e}", file=sys.stderr, flush=True)
                ablate_md = [f"### {name} {typ}: ablation", "", f"error: {str(e).splitlines()[0][:200]}", ""]
        del ref
        md += [f"## {title}", ""] + summary + [""] + table + [""] + ablate_md
    return "\n".join(md) + "\n", self_ok


def run_layer_diff(args, torch, transformers):
    """--layer-diff: the diagnostic for every selected model and type; writes
    OUT/layer_diff.md. Exit status 1 on an error or a failed self-check."""
    ms = Moestream(args.moestream, args.backend, Path(args.out))
    parts, errors, self_ok = [], [], True
    for name in args.models:
        try:
            md, ok = layer_diff(name, MODELS[name], model_args(args, MODELS[name]), ms, torch, transformers)
            parts.append(md)
            self_ok = self_ok and ok
        except Exception as e:  # noqa: BLE001 -- report and go on with the next model
            errors.append(f"{name}: {e}")
            parts.append(f"## {name}\n\nerror: {str(e).splitlines()[0][:200]}\n")
    header = (f"# Router inputs per MoE layer, moestream vs transformers {transformers.__version__} "
              f"(torch {torch.__version__}), backend {args.backend}\n\nGenerated by tools/hf_parity.py --layer-diff. "
              "Rel err = ||moestream - reference|| / ||reference|| of a token's router input (the MoE block's "
              "normed input), the reference holding the converted file's weights (q8_0: matmul inputs rounded as "
              "in the parity check) and taking moestream's expert choices. \"routes unlike ref's\": tokens whose "
              "forced choice is not what the reference's router would pick at its own state; margin: by how much "
              "it lost, share of the token's router logit range. \"ref forced vs free\": the reference's own "
              "router input with and without forcing (0 up to the first layer whose routes forcing changes). "
              "KV cache by weights type: " + ", ".join(f"{t} -> {ms.kv_type(t)}" for t in args.types) + ".\n")
    md = header + "\n" + "\n".join(parts)
    (Path(args.out) / "layer_diff.md").write_text(md)
    print()
    print(md)
    for e in errors:
        print("error: " + e, file=sys.stderr)
    if not self_ok:
        print("self-check FAILED: forcing moved the reference before any route changed", file=sys.stderr)
    print(f"table in {Path(args.out) / 'layer_diff.md'}")
    return 1 if errors or not self_ok else 0


# ---------------------------------------------------------------- main

def dry_run(args):
    ok = True
    print(f"moestream binary: {args.moestream}")
    for sub in (["--version"], ["convert", "--help"], ["logits", "--help"]):
        try:
            out = run([args.moestream] + sub, timeout=60)
            first = out.strip().splitlines()[0] if out.strip() else ""
            print(f"  {' '.join(sub):16s} ok   {first}")
            if sub[0] == "logits":
                flags = ["--tokens", "--routes", "--greedy", "--print-tokens", "--backend", "--all", "--kv-type"]
                for flag in flags + (["--hidden"] if args.layer_diff else []):
                    if flag not in out:
                        print(f"  logits has no {flag} flag")
                        ok = False
        except Exception as e:  # noqa: BLE001
            print(f"  {' '.join(sub):16s} FAILED: {str(e).splitlines()[0]}")
            ok = False
    for name in args.models:
        t = MODELS[name]["tokenizer"]
        d = find_tokenizer(t)
        print(f"{name}: tokenizer {'fixture ' + str(d) if d else 'none found: a BPE will be trained'}")
    print(f"types: {', '.join(args.types)}; backend: {args.backend}; out: {args.out}"
          + ("; layer diff (no checks)" if args.layer_diff else "")
          + ("; q8_0 emulation ablation" if args.layer_diff_ablate else ""))
    kv = Moestream(args.moestream, args.backend, args.out).kv_type
    print("kv cache by weights type: " + ", ".join(f"{t} -> {kv(t)}" for t in args.types))
    print("dry run " + ("ok" if ok else "found problems"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moestream", required=True, help="path to the moestream binary")
    ap.add_argument("--out", required=True, help="work directory (models, GGUFs, parity.md)")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated: " + ", ".join(TYPES))
    ap.add_argument("--hf-device", default="cpu", help="device for the transformers reference (default cpu)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dry-run", action="store_true", help="check arguments and the binary only")
    ap.add_argument("--layer-diff", action="store_true",
                    help="diagnostic instead of the checks: per MoE layer, moestream's router input against "
                         "the reference's on moestream's routes (OUT/layer_diff.md)")
    ap.add_argument("--layer-diff-ablate", action="store_true",
                    help="with --layer-diff, q8_0: also rerun the reference with the emulation of one group of "
                         "parameters changed (input not rounded / weight f32, per role of the first MoE layer) "
                         "and tabulate that layer's router input error (appended to OUT/layer_diff.md)")
    args = ap.parse_args()
    if args.layer_diff_ablate and not args.layer_diff:
        ap.error("--layer-diff-ablate needs --layer-diff")
    args.models = [m for m in args.models.split(",") if m]
    args.types = [t for t in args.types.split(",") if t]
    for m in args.models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r}; choose from {', '.join(MODELS)}")
    for t in args.types:
        if t not in LOGIT_BOUNDS:
            ap.error(f"unknown type {t!r}; choose from {', '.join(TYPES)}")
    if not (os.path.isfile(args.moestream) and os.access(args.moestream, os.X_OK)):
        ap.error(f"--moestream {args.moestream}: not an executable file")
    args.moestream = str(Path(args.moestream).resolve())
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        return dry_run(args)

    import torch
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(int(os.environ.get("HF_PARITY_THREADS", 0)) or max(1, min(16, os.cpu_count() or 1)))
    if args.layer_diff:
        return run_layer_diff(args, torch, transformers)

    res = Results()
    ms = Moestream(args.moestream, args.backend, Path(args.out))
    errors = []
    for name in args.models:
        try:
            check_model(name, MODELS[name], model_args(args, MODELS[name]), ms, res, torch, transformers)
        except Exception as e:  # noqa: BLE001 -- report and go on with the next model
            errors.append(f"{name}: {e}")
            res.add(name, "-", "ran to the end", "error", "-", False, str(e).splitlines()[0][:120])
    header = (f"# moestream vs transformers {transformers.__version__} (torch {torch.__version__}), "
              f"backend {args.backend}\n\nGenerated by tools/hf_parity.py. Relative error = "
              f"max|moestream - hf| / max|hf| over the last position's logits. KV cache by weights type: "
              + ", ".join(f"{t} -> {ms.kv_type(t)}" for t in args.types) + ".")
    md = res.markdown(header)
    (Path(args.out) / "parity.md").write_text(md)
    print()
    print(md)
    for e in errors:
        print("error: " + e, file=sys.stderr)
    failed = res.failed()
    checks = [r for r in res.rows if r[5] != "info"]
    print(f"{len(checks) - len(failed)}/{len(checks)} checks passed; table in {Path(args.out) / 'parity.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
