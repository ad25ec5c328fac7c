"""bench/results/matrix.md from the cache: the entries of one machine and
commit pair, worst moestream/llama.cpp ratio first, then the cells that
failed or were skipped, the files and every engine's exact command."""
import time

from benchmatrix import cells as cl

GIB = 1 << 30


def _v(s):
    return "-" if not s else f"{s['mean']:.1f} ± {s['sd']:.1f}"


def _budget(e):
    p = e.get("plan") or {}
    if p.get("fraction") is None:
        return "full"
    if not p.get("budget"):
        return e.get("budget", "?")
    return (f"{e['budget']}: {p['budget'] / GIB:.2f} GiB ({100 * p.get('experts_frac', 0):.0f}% of experts; "
            f"{p['fraction'] * p['bytes_real'] / GIB:.1f} GiB of the real {p['bytes_real'] / GIB:.1f})")


def _experts(e):
    """moestream's expert tiers over the run: hit rate and the CPU's share of expert pairs."""
    x = e.get("experts") or {}
    p = x.get("pairs") if x.get("hybrid") else None
    if not p:
        return ""
    total = p.get("resident", 0) + p.get("streamed", 0) + p.get("host", 0)
    return f"; hit {100 * p.get('hit_rate', 0):.0f}%, CPU {100 * p.get('host', 0) / total:.0f}%" if total else ""


def _llama_place(e):
    p = e.get("plan") or {}
    if "ncmoe" not in p:
        return "-"
    s = f"-ncmoe {p['ncmoe']}"
    lm = (e.get("llama") or {}).get("load_mode")
    if lm and lm != "auto":
        s += f", -lm {lm}"
    if p.get("llama_over_budget"):
        s += f" (over budget: ~{p['llama_vram_est'] / GIB:.2f} GiB)"
    return s


def _peaks(e):
    pk = e.get("vram_peak_mib") or {}
    f = lambda v: "-" if v is None else str(v)  # noqa: E731
    return f"{f(pk.get('moestream'))} / {f(pk.get('llama'))}"


def entries_for(cache, machine, ms_commit, llama_commit):
    return [e for e in cache.entries.values()
            if (e.get("machine"), e.get("ms_commit"), e.get("llama_commit")) == (machine, ms_commit, llama_commit)]


def ordered(entries):
    """Measured cells by ratio, worst first (ties by id); then the rest by id."""
    ok = sorted((e for e in entries if e.get("status") == "ok"), key=lambda e: (e["ratio"], e["cell"]))
    rest = sorted((e for e in entries if e.get("status") != "ok"), key=lambda e: e["cell"])
    return ok, rest


def write(path, cache, context, matrix_cells, cores=None, only=None):
    machine, msc, llc = context
    es = entries_for(cache, machine, msc, llc)
    ok, rest = ordered(es)
    ids = {c.id for c in matrix_cells}
    measured = {e["cell"] for e in es}
    missing = len(ids - measured)
    below = sum(1 for e in ok if e["ratio"] < 1.0)
    groups = {}

    def gid(e):
        k = (e.get("recipe"), e.get("budget"), e.get("group"))
        if k not in groups:
            groups[k] = (f"g{len(groups) + 1}", e)
        return groups[k][0]

    L = []
    L.append("# moestream vs llama.cpp, cell by cell (issue #43)\n")
    L.append(f"Written by `tools/matrix.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} from "
             "matrix.json beside it (the same numbers, every repetition, and the budget arithmetic).\n")
    L.append(f"- machine: {machine}" + (f", {cores} CPU cores" if cores else ""))
    L.append(f"- moestream: {msc}; llama.cpp: {llc}")
    L.append(f"- cells: {len(ok)} measured ({below} below 1.0x), {len(rest)} failed or skipped, {missing} of the "
             f"matrix's {len(ids)} not measured yet on this machine and commits (`tools/matrix.py` resumes them)")
    L.append("- run (resumes; exit status 3 while cells are left): on the GPU machine, carrying `.llb` "
             "(tools/llama_bench_local.sh) and a moestream built for sm_90, "
             "`eval \"$(tools/llb_unpack.sh /tmp/lb)\" && python3 tools/matrix.py --moestream BIN --llama-bin "
             "/tmp/lb/bin --max-seconds 540 --mirror \"$OUT\"`, then bring `$OUT/matrix.json` back here")
    L.append("")
    L.append("How: both engines run the same generated file in the same call, one after the other, with the same "
             "threads (`moestream gen`: random weights, real shapes and quantization mix; fewer layers than the "
             "real model, listed under Files: per-token work scales with the layers for both engines, so the ratio "
             "holds, while fixed per-token costs (output head, sampling) weigh a little more). Budgets are fractions "
             "of the REAL model's bytes; on a file with fewer layers moestream's `--vram` keeps the fraction of "
             "routed experts that budget keeps on the real model (tools/benchmatrix/budget.py), and llama.cpp "
             "(`-ngl 99 -fa 1 --n-cpu-moe N`) gets the fewest CPU layers whose VRAM use (dense weights less "
             "token_embd, the experts of layers N.., its KV cache and compute buffers) fits the same budget. "
             "At a budget llama-bench runs both load modes (`-lm none,mmap`) and the better one counts. The locality "
             "router is `gen --router-locality 0.45 --router-skew 0.5` (the published Qwen3-30B-A3B decode "
             "statistics, docs/traces.md; gen builds it for qwen3moe only). Serving: `moestream serve` vs "
             f"`llama-server`, {cl.SERVE['parallel']} slots of {cl.SERVE['ctx']} tokens, tools/serve_load.py with "
             f"1 or 8 streaming clients, {cl.SERVE['requests']} requests of {cl.SERVE['max_tokens']} tokens each; "
             "the metric is the aggregate decode tok/s. Ratio: moestream / llama.cpp (above 1: moestream faster). "
             "VRAM peak: device memory in use during the run less before it (nvidia-smi, 0.5 s samples).")
    L.append("")
    L.append("## Cells, worst ratio first\n")
    L.append("| # | cell | moestream | llama.cpp | ratio | budget | llama.cpp placement | VRAM peak MiB (ms / llama) "
             "| commands |")
    L.append("|---:|---|---:|---:|---:|---|---|---|---|")
    for i, e in enumerate(ok, 1):
        L.append(f"| {i} | {e['cell']} | {_v(e.get('moestream'))} | {_v(e.get('llama'))} | {e['ratio']:.2f}x | "
                 f"{_budget(e)}{_experts(e)} | {_llama_place(e)} | {_peaks(e)} | {gid(e)} |")
    if rest:
        L.append("\n## Failed or skipped\n")
        L.append("| cell | status | moestream | llama.cpp | why | commands |")
        L.append("|---|---|---:|---:|---|---|")
        for e in rest:
            why = (e.get("error") or "").replace("|", "/").replace("\n", " ")
            g = gid(e) if e.get("commands") else "-"
            L.append(f"| {e['cell']} | {e['status']} | {_v(e.get('moestream'))} | {_v(e.get('llama'))} | {why} | {g} |")
    L.append("\n## Files\n")
    L.append("| recipe (`moestream gen` arguments) | layers generated / real | tensor bytes: this file / the real model |")
    L.append("|---|---|---|")
    seen = set()
    for e in ok + rest:
        r = e.get("recipe")
        if r in seen:
            continue
        seen.add(r)
        p = e.get("plan") or {}
        br, fb = p.get("bytes_real"), p.get("file_bytes")
        L.append(f"| `{r}` | {e.get('layers', '?')} / {e.get('full_layers', '?')} | "
                 f"{'-' if not br else f'{fb / GIB:.2f} / {br / GIB:.1f} GiB'} |")
    L.append("\n## Commands\n")
    for g, e in groups.values():
        c = e.get("commands") or {}
        L.append(f"- {g} ({e.get('group')}, {e.get('budget')}, {e.get('group_seconds', 0):.0f} s):")
        L.append(f"  - moestream: `{c.get('moestream', '-')}`")
        L.append(f"  - llama.cpp: `{c.get('llama', '-')}`")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
