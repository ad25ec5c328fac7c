"""VRAM budgets and llama.cpp's matching placement, from `moestream inspect --json`.

A budget is a fraction f of the REAL model's bytes (issue #43: 65%, 35%, ...).
The file measured may have fewer layers (cells.ARCHS), so the budget given
to moestream keeps what f would keep on the real model: the same fraction of
the routed experts resident beside every dense weight, the KV cache of the
workload's context and moestream's fixed reserve:

    real model:  experts_frac = (f * bytes_real - dense_real - kv_real - reserve) / experts_real
    this file:   budget = dense + kv + reserve + experts_frac * experts

with the real model's parts scaled from the file's per-layer bytes (layers
past the generated count, such as Qwen3.6's MTP layer, are counted once).
A fraction below zero means the budget cannot hold the dense weights and the
KV cache at that context: the cell is not run (the report says so).

llama.cpp runs -ngl 99 with --n-cpu-moe N: the GPU holds every dense tensor
but token_embd (llama.cpp keeps the input embedding on the CPU), the experts
of layers N..L-1, its KV cache and compute buffers (the f32 logits of one
512-token micro-batch plus COMPUTE_BASE). N is the fewest layers whose
experts go to the CPU so that this fits the same budget.
"""
GIB = 1 << 30
COMPUTE_BASE = 160 << 20  # llama.cpp's other compute buffers beside the logits (measured rows: ~0.1-0.2 GiB)
UBATCH = 512


def _layers(inspect):
    return sorted(inspect["split"]["layers"], key=lambda l: l["layer"])


def kv_bytes(inspect, ctx):
    v = inspect["vram"]
    return int(v.get("kv_fixed_bytes", 0) + v["kv_bytes_per_1k_tokens"] * ctx / 1024)


def plan(inspect, fraction, ctx, generated_layers, full_layers):
    """The budget for this file, or None (full). Returns dict with the arithmetic."""
    layers = _layers(inspect)
    main = [l for l in layers if l["layer"] < generated_layers]
    extra = [l for l in layers if l["layer"] >= generated_layers]
    scale = full_layers / generated_layers
    v = inspect["vram"]
    dense = v["dense_bytes"]
    reserve = v["reserve_bytes"]
    kv = kv_bytes(inspect, ctx)
    experts = sum(l["expert_bytes"] for l in layers)
    main_dense = sum(l["dense_bytes"] for l in main)
    main_exp = sum(l["expert_bytes"] for l in main)
    extra_exp = sum(l["expert_bytes"] for l in extra)
    dense_real = dense + (scale - 1) * main_dense
    experts_real = scale * main_exp + extra_exp
    kv_real = kv * scale
    bytes_real = inspect["split"]["dense_bytes"] + (scale - 1) * main_dense + experts_real
    out = {"fraction": fraction, "ctx": ctx, "scale": scale, "bytes_real": bytes_real, "file_bytes": dense + experts,
           "minimum": dense + kv + reserve}
    if fraction is None:
        out.update(budget=None, experts_frac=1.0, ok=True)
        return out
    frac = (fraction * bytes_real - dense_real - kv_real - reserve) / experts_real if experts_real else 0
    out["experts_frac"] = min(frac, 1.0)
    if frac <= 0:
        out.update(budget=None, ok=False,
                   why=f"{fraction:.0%} of the real model ({fraction * bytes_real / GIB:.2f} GiB) holds no experts "
                       f"beside dense {dense_real / GIB:.2f} + KV@{ctx} {kv_real / GIB:.2f} + reserve "
                       f"{reserve / GIB:.2f} GiB")
        return out
    out["budget"] = int(dense + kv + reserve + out["experts_frac"] * experts)
    out["ok"] = True
    return out


def llama_overhead(inspect, ctx):
    """llama.cpp's KV cache at ctx plus its compute buffers, bytes."""
    n_vocab = inspect["hparams"]["n_vocab"]
    return kv_bytes(inspect, ctx) + COMPUTE_BASE + 4 * n_vocab * UBATCH


def ncmoe(inspect, budget, ctx):
    """(N, llama.cpp's estimated VRAM bytes) for a budget in bytes (None: full, N = 0)."""
    layers = _layers(inspect)
    embd = sum(t["bytes"] for t in inspect.get("tensors", []) if t["name"] == "token_embd.weight")
    dense_gpu = inspect["split"]["dense_bytes"] - embd
    over = llama_overhead(inspect, ctx)
    exp = [l["expert_bytes"] for l in layers]
    if budget is None:
        return 0, dense_gpu + sum(exp) + over
    room = budget - dense_gpu - over
    n, used = len(exp), 0
    # llama.cpp moves the experts of layers 0..N-1 to the CPU: keep the last ones.
    while n > 0 and used + exp[n - 1] <= room:
        used += exp[n - 1]
        n -= 1
    return n, dense_gpu + used + over


def ctx_of(workload):
    """The context both engines size their KV cache for in this workload."""
    if workload.kind == "serve":
        from benchmatrix.cells import SERVE
        return SERVE["parallel"] * SERVE["ctx"]
    # (moestream bench's context: the depth, then the prompt or 8 prompt tokens and the generated ones)
    return workload.depth + max(workload.n_prompt, 8 + workload.n_gen) + 1
