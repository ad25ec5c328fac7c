"""The two engines' commands for a group of cells, and their output parsed
into {workload name: (mean, sd, values)} (tokens/s; serving: aggregate decode
tokens/s of the client count)."""
import json
import statistics

from benchmatrix.cells import SERVE


def vram_arg(budget):
    """--vram: full, or the budget in MiB (moestream's M is MiB); a str (dry run) as it is."""
    if isinstance(budget, str):
        return budget
    return "full" if budget is None else f"{max(1, budget >> 20)}M"


def ms_bench_cmd(ms, model, wls, budget, threads, reps, out_json):
    w = wls[0]
    return [ms, "bench", "-m", model, "-p", str(w.n_prompt), "-n", str(w.n_gen), "-d", str(w.depth), "-r", str(reps),
            "-t", str(threads), "--backend", "cuda", "--vram", vram_arg(budget), "--json", "-o", out_json]


def llama_bench_cmd(lb, model, wls, n_cpu_moe, full, threads, reps):
    w = wls[0]
    cmd = [lb, "-m", model, "-ngl", "99", "-fa", "1", "-ncmoe", str(n_cpu_moe), "-p", str(w.n_prompt),
           "-n", str(w.n_gen), "-d", str(w.depth), "-r", str(reps), "-t", str(threads), "-o", "json"]
    # With experts on the CPU, llama.cpp holds them either in its own (pinned)
    # buffers or mmap'ed pages; which is faster differs by budget and test, so
    # both run and each cell takes llama.cpp's better one. At full nothing stays
    # on the CPU and the mode makes no difference.
    if not full:
        cmd += ["-lm", "none,mmap"]
    return cmd


def ms_serve_cmd(ms, model, budget, threads, port):
    return [ms, "serve", "-m", model, "--backend", "cuda", "--parallel", str(SERVE["parallel"]), "--ctx",
            str(SERVE["ctx"]), "--vram", vram_arg(budget), "-t", str(threads), "--host", "127.0.0.1", "--port",
            str(port), "-q"]


def llama_serve_cmd(ls, model, n_cpu_moe, threads, port):
    return [ls, "-m", model, "-ngl", "99", "-fa", "on", "-np", str(SERVE["parallel"]), "--cont-batching", "-c",
            str(SERVE["parallel"] * SERVE["ctx"]), "--n-cpu-moe", str(n_cpu_moe), "-fit", "off", "-t", str(threads),
            "--host", "127.0.0.1", "--port", str(port)]


def stats(values):
    values = [float(v) for v in values]
    if not values:
        return None
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "sd": sd, "values": values}


def _matches(w, kind, n_prompt, n_gen, depth):
    if w.kind != kind or w.depth != depth:
        return False
    return n_prompt == w.n_prompt if kind == "pp" else n_gen == w.n_gen


def parse_ms_bench(text, wls):
    """moestream bench --json (one budget) -> {workload: stats}."""
    j = json.loads(text)
    run = j["sweep"][0] if "sweep" in j else j
    out = {}
    for r in run["results"]:
        kind = "pp" if r["test"].startswith("pp") else "tg"
        for w in wls:
            if _matches(w, kind, r["n_tokens"] if kind == "pp" else 0, r["n_tokens"] if kind == "tg" else 0,
                        r.get("n_depth", 0)):
                out[w.name] = stats(r.get("tps") or [r["tps_mean"]])
    return out, {"git": j.get("build", {}).get("git", "unknown"), "device": run.get("device", ""),
                 "experts": run.get("experts", {})}


def parse_llama_bench(text, wls):
    """llama-bench -o json -> {workload: stats with the load mode}: per workload the
    load mode with the higher mean."""
    arr = json.loads(text)
    out = {}
    commit = "unknown"
    for x in arr:
        commit = x.get("build_commit", commit)
        kind = "tg" if x.get("n_gen", 0) > 0 else "pp"
        for w in wls:
            if _matches(w, kind, x.get("n_prompt", 0), x.get("n_gen", 0), x.get("n_depth", 0)):
                s = stats(x.get("samples_ts") or [x["avg_ts"]])
                s["load_mode"] = str(x.get("load_mode", ""))
                if w.name not in out or s["mean"] > out[w.name]["mean"]:
                    out[w.name] = s
    return out, {"git": commit}


def experts_summary(tel):
    """moestream's expert telemetry without its per-layer lists (the cache stays small)."""
    if not isinstance(tel, dict):
        return tel
    out = {k: v for k, v in tel.items() if k != "layers"}
    if isinstance(out.get("prefetch"), dict):
        out["prefetch"] = {k: v for k, v in out["prefetch"].items() if k != "layers"}
    return out


def command_text(cmd):
    """A command as one shell line (arguments with spaces or shell characters quoted)."""
    import shlex
    return " ".join(shlex.quote(str(c)) for c in cmd)
