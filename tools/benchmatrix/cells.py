"""The matrix, declared: architectures (shape, layers generated, depth),
quantizations, VRAM budgets, workloads and routers, expanded into cells.

A cell is one number pair (moestream, llama.cpp) with the id
ARCH/QUANT/BUDGET/WORKLOAD/ROUTER, e.g. qwen3-30b/q4_k_m/65%/tg128/uniform,
which is what --only matches. Cells that one engine invocation measures
together form a group (same file, budget and workload group): tg128 and pp512
come from one `bench -p 512 -n 128`, serve1 and serve8 from one server.
"""
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Arch:
    gen_arch: str       # moestream gen --arch
    preset: str         # moestream gen --preset
    full_layers: int    # the real model's layer count (the budgets are fractions of ITS bytes)
    layers: int         # layers generated (fewer: cheaper gen, load and runs; see budget.py for the scaling)
    depth: int          # the depth of the tg-at-depth workload
    quant: str          # the core quantization (gpt-oss: its native mxfp4 experts)
    locality: bool      # tiered cells also run under gen --router-locality
    note: str = ""


# Fewer layers than the real model: per-token work scales with the layer count
# for both engines alike, so the ratio stays while gen, load and every run get
# cheaper; budgets keep the real model's fraction of routed experts resident
# (budget.py). Qwen3.6 keeps whole 4-layer groups (3 DeltaNet + 1 attention) and
# its MTP layer; gpt-oss keeps pairs (sliding + full attention).
ARCHS = {
    "qwen3-30b": Arch("qwen3moe", "qwen3-30b-a3b", 48, 12, 32768, "q4_k_m", True),
    "qwen3.6-35b": Arch("qwen35moe", "qwen3.6-35b-a3b", 40, 8, 32768, "q4_k_m", True, "with its MTP layer"),
    "gpt-oss-20b": Arch("gpt-oss", "gpt-oss-20b", 24, 12, 32768, "mxfp4_moe", True),
    "gpt-oss-120b": Arch("gpt-oss", "gpt-oss-120b", 36, 4, 32768, "mxfp4_moe", True),
    "mixtral-8x7b": Arch("mixtral", "mixtral-8x7b", 32, 8, 16384, "q4_k_m", True, "depth 16384: its context is 32768"),
}

# The quantization sweep on the Qwen3-30B-A3B shape (llama-quantize's presets;
# its Q4_K_M is the core row). Short workloads only.
QUANT_ARCH = "qwen3-30b"
QUANT_TYPES = ["q2_k", "q3_k_m", "q4_0", "q4_k_s", "q5_k_m", "q6_k", "q8_0",
               "iq1_m", "iq2_xxs", "iq2_m", "iq3_xxs", "iq3_m", "iq4_nl", "iq4_xs"]

# (name, fraction of the real model's bytes; None: every weight on the GPU)
BUDGETS = [("full", None), ("65%", 0.65), ("35%", 0.35), ("10%", 0.10)]

# The locality router: the published Qwen3-30B-A3B decode statistics (docs/traces.md).
ROUTERS = {"uniform": [], "locality": ["--router-locality", "0.45", "--router-skew", "0.5"]}


@dataclass(frozen=True)
class Workload:
    name: str
    group: str       # cells one invocation measures together
    kind: str        # pp | tg | serve
    n_prompt: int = 0
    n_gen: int = 0
    depth: int = 0
    clients: int = 0


def workloads(arch):
    d = arch.depth
    return [Workload("tg128", "short", "tg", 512, 128), Workload("pp512", "short", "pp", 512, 128),
            Workload("pp8192", "pp8192", "pp", 8192, 0), Workload(f"tg64@d{d}", "depth", "tg", 0, 64, d),
            Workload("serve1", "serve", "serve", clients=1), Workload("serve8", "serve", "serve", clients=8)]


SERVE = {"parallel": 8, "ctx": 1024, "requests": 2, "max_tokens": 128}


@dataclass(frozen=True)
class Recipe:
    """One generated file: `moestream gen` with these arguments."""
    arch: str
    quant: str
    router: str
    layers: int

    def gen_args(self):
        a = ARCHS[self.arch]
        args = ["--arch", a.gen_arch, "--preset", a.preset, "--quant", self.quant]
        if self.layers != a.full_layers:
            args += ["--layers", str(self.layers)]
        return args + ROUTERS[self.router]

    @property
    def key(self):
        return "gen " + " ".join(self.gen_args())

    @property
    def file_name(self):
        return re.sub(r"[^A-Za-z0-9.]+", "_", f"{self.arch}_{self.quant}_{self.router}_{self.layers}l") + ".gguf"


@dataclass(frozen=True)
class Cell:
    arch: str
    quant: str
    budget: str
    workload: Workload
    router: str
    recipe: Recipe = field(compare=False)

    @property
    def id(self):
        return f"{self.arch}/{self.quant}/{self.budget}/{self.workload.name}/{self.router}"

    @property
    def group_key(self):
        return (self.recipe.key, self.budget, self.workload.group)


def budget_fraction(name):
    return dict(BUDGETS)[name]


def expand(full_depth=False):
    """Every cell of the matrix, in a stable order."""
    cells = []

    def add(arch_name, quant, wls):
        a = ARCHS[arch_name]
        layers = a.full_layers if full_depth else a.layers
        for router in ROUTERS:
            if router != "uniform" and not a.locality:
                continue
            recipe = Recipe(arch_name, quant, router, layers)
            for b, frac in BUDGETS:
                if router != "uniform" and frac is None:
                    continue  # the router changes nothing when every expert is resident
                for w in wls:
                    cells.append(Cell(arch_name, quant, b, w, router, recipe))

    for name, a in ARCHS.items():
        add(name, a.quant, workloads(a))
    qa = ARCHS[QUANT_ARCH]
    for q in QUANT_TYPES:
        add(QUANT_ARCH, q, [w for w in workloads(qa) if w.group == "short"])
    return cells


def select(cells, only):
    """The cells whose id matches the regular expression (re.search); all without one."""
    if not only:
        return list(cells)
    try:
        rx = re.compile(only)
    except re.error as e:
        raise SystemExit(f"matrix: --only '{only}' is not a regular expression: {e}")
    return [c for c in cells if rx.search(c.id)]


def groups(cells):
    """{group key: [cells]} in first-seen order."""
    out = {}
    for c in cells:
        out.setdefault(c.group_key, []).append(c)
    return out
