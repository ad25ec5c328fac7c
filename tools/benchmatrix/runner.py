"""Runs the pending groups of the selected cells: gen of each file (kept in the
work directory between calls on a warm machine), `moestream inspect` for the
budgets, then per group moestream and llama.cpp in turn, results into the
cache after every group. No group starts unless its estimated time fits what
--max-seconds leaves, and every engine runs under a timeout of what is left,
so a call stops cleanly before the device's cap."""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

from benchmatrix import budget as bud
from benchmatrix import cells as cl
from benchmatrix import engines as en
from benchmatrix.cache import key as cache_key

# Seconds a step takes (a gen; a group, both engines) when the cache has no
# timing of the same file and group yet (--estimate sets them, and then wins).
DEFAULT_SECONDS = {"gen": 60, "short": 90, "pp8192": 90, "depth": 240, "serve": 200}
EXPLICIT = set()


def estimate(ctx, group_cells):
    g = group_cells[0].workload.group
    if g in EXPLICIT:
        return DEFAULT_SECONDS[g]
    # This file's own timing, else the longest of any file's group of this kind
    # (measured on a GPU machine: far below the defaults), else the default.
    return (ctx.cache.seconds_of(g, group_cells[0].recipe.key) or ctx.cache.seconds_of(g)
            or DEFAULT_SECONDS[g])
RESERVE_S = 10  # kept back for writing the cache and the report


class Deadline(Exception):
    pass


class Ctx:
    """What one call runs with."""

    def __init__(self, args, cache, log=print):
        self.a = args
        self.cache = cache
        self.log = log
        self.start = time.monotonic()
        self.machine = "unknown"
        self.ms_commit = "unknown"
        self.llama_commit = "unknown"

    def left(self):
        return self.a.max_seconds - (time.monotonic() - self.start)

    def key(self, cell):
        return cache_key(self.machine, self.ms_commit, self.llama_commit, cell.recipe.key, cell.id)


# ------------------------------------------------------------------ probes
def gpu_name():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        line = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
        return line or "unknown GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "no GPU (nvidia-smi not found)"


def ms_commit_of(ms):
    """moestream's build commit: bench --json on the built-in tiny model, CPU backend (< 1 s)."""
    try:
        r = subprocess.run([ms, "bench", "-p", "1", "-n", "1", "-r", "1", "--backend", "cpu", "-t", "1", "--json"],
                           capture_output=True, text=True, timeout=120)
        return json.loads(r.stdout)["build"]["git"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError):
        return "unknown"


def llama_commit_of(llama_bin, repo_root):
    for p in [os.path.join(repo_root, ".llb", "llama-src.version"), os.path.join(repo_root, ".llama", "llama-src.version")]:
        if os.path.exists(p):
            return open(p).read().split()[0]
    try:
        r = subprocess.run([os.path.join(llama_bin, "llama-bench"), "--version"], capture_output=True, text=True,
                           timeout=60)
        m = re.search(r"\(([0-9a-f]{7,40})\)", r.stdout + r.stderr)
        if m:
            return m.group(1)
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "unknown"


# ------------------------------------------------------------------ processes
class PeakVram:
    """Samples the device's memory in use (MiB) while an engine runs; the peak
    less what was in use before it started (None without nvidia-smi)."""

    def __init__(self):
        self.base = self._sample()
        self.peak = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def _sample():
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                               capture_output=True, text=True, timeout=5)
            return int(r.stdout.split()[0]) if r.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            return None

    def _loop(self):
        while not self._stop.wait(0.5):
            v = self._sample()
            if v is not None:
                self.peak = v if self.peak is None else max(self.peak, v)

    def __enter__(self):
        if self.base is not None:
            self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._t.is_alive():
            self._t.join()

    def used(self):
        return None if self.peak is None or self.base is None else max(0, self.peak - self.base)


def run_proc(ctx, cmd, log_path, timeout_s):
    """(rc, stdout, seconds, peak MiB); Deadline when it ran past what the call has left."""
    t = min(timeout_s, ctx.left() - RESERVE_S)
    if t < 5:
        raise Deadline()
    t0 = time.monotonic()
    with open(log_path, "w") as err, PeakVram() as pv:
        try:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        except OSError as e:  # no such engine here: the cells fail, the call goes on
            err.write(f"cannot start {cmd[0]}: {e}\n")
            return 127, "", 0.0, None
        try:
            out, _ = p.communicate(timeout=t)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            if t < timeout_s:
                raise Deadline()
            return 124, "", time.monotonic() - t0, pv.used()
    return p.returncode, out, time.monotonic() - t0, pv.used()


def tail(path, n=4):
    try:
        with open(path, errors="replace") as f:
            return " / ".join(l.strip() for l in f.readlines()[-n:] if l.strip())[-600:]
    except OSError:
        return ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(port, proc, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def run_server(ctx, cmd, port, wls, openai_compat, log_path):
    """One server over the group's client counts, --reps times each:
    ({workload: stats of aggregate decode tok/s}, extra, error, seconds, peak MiB)."""
    import serve_load  # tools/serve_load.py: the same load client for both servers
    t0 = time.monotonic()
    if ctx.left() - RESERVE_S < 60:
        raise Deadline()
    out, extra, err = {}, {}, ""
    with open(log_path, "w") as log, PeakVram() as pv:
        try:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            return {}, {}, f"cannot start {cmd[0]}: {e}", 0.0, None
        try:
            if not wait_health(port, p, min(300, ctx.left() - RESERVE_S - 30)):
                if p.poll() is None and ctx.left() - RESERVE_S < 40:
                    raise Deadline()
                return {}, {}, f"the server did not come up: {tail(log_path)}", time.monotonic() - t0, pv.used()
            a = argparse.Namespace(requests=cl.SERVE["requests"], max_tokens=cl.SERVE["max_tokens"],
                                   openai_compat=openai_compat, model_name="default", key="", request_timeout=300)
            serve_load.stream_one("127.0.0.1", port, {"messages": [{"role": "user", "content": "warm up"}],
                                                      "max_tokens": 8, "stream": True, "model": "default"},
                                  "", 300)
            values, ttft = {}, {}
            for _ in range(ctx.a.reps):
                for w in sorted(wls, key=lambda w: w.clients):
                    if ctx.left() - RESERVE_S < 20:
                        raise Deadline()
                    r = serve_load.run_level("127.0.0.1", port, a, w.clients)
                    if r["failed"]:
                        err = f"{r['failed']} of {r['requests']} requests failed at {w.clients} clients: " + \
                              "; ".join(r["errors"])[:400]
                    values.setdefault(w.name, []).append(r["decode_tps"] or 0.0)
                    ttft.setdefault(w.name, []).append(r["ttft_p50_s"])
            out = {k: en.stats(v) for k, v in values.items()}
            extra = {k: {"ttft_p50_s": en.stats(v)} for k, v in ttft.items()}
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    return out, extra, err, time.monotonic() - t0, pv.used()


# ------------------------------------------------------------------ files
def ensure_file(ctx, recipe, needed_recipes):
    """The generated file of a recipe (gen when absent; older files of recipes
    this call no longer needs are deleted when the disk runs short)."""
    fdir = os.path.join(ctx.a.work, "files")
    os.makedirs(fdir, exist_ok=True)
    path = os.path.join(fdir, recipe.file_name)
    if os.path.exists(path):
        return path
    if ctx.left() - RESERVE_S < DEFAULT_SECONDS["gen"]:
        raise Deadline()
    keep = {r.file_name for r in needed_recipes}
    # The real model's file at this quantization is at most ~65 GB (gpt-oss-120b);
    # the generated ones are a fraction of that. Keep 30 GB free before a gen.
    for old in sorted(os.listdir(fdir), key=lambda f: os.path.getmtime(os.path.join(fdir, f))):
        if shutil.disk_usage(fdir).free > 30e9:
            break
        if old not in keep or old.endswith(".part"):
            os.remove(os.path.join(fdir, old))
    cmd = [ctx.a.moestream, "gen"] + recipe.gen_args() + ["-t", str(ctx.a.threads), "-q", "-o", path + ".part"]
    ctx.log(f"gen: {en.command_text(cmd)}")
    rc, _, _, _ = run_proc(ctx, cmd, os.path.join(ctx.a.work, "gen.log"), 600)
    if rc != 0:
        raise RuntimeError(f"gen failed (rc {rc}): {tail(os.path.join(ctx.a.work, 'gen.log'))}")
    os.replace(path + ".part", path)
    return path


def inspect(ctx, path):
    cmd = [ctx.a.moestream, "inspect", "--json", "--ctx", "1024", path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"inspect failed: {r.stderr[-400:]}")
    return json.loads(r.stdout)


# ------------------------------------------------------------------ groups
def group_plan(ctx, cells_of_group, insp, dry=False):
    """Both engines' commands and the budget arithmetic of one group."""
    c0 = cells_of_group[0]
    arch = cl.ARCHS[c0.arch]
    wls = [c.workload for c in cells_of_group]
    w0 = wls[0]
    frac = cl.budget_fraction(c0.budget)
    full = frac is None
    ctx_tokens = bud.ctx_of(w0)
    model = os.path.join(ctx.a.work, "files", c0.recipe.file_name)
    lb = os.path.join(ctx.a.llama_bin, "llama-bench")
    ls = os.path.join(ctx.a.llama_bin, "llama-server")
    if dry:
        b = None if full else f"<{c0.budget} of the real model at ctx {ctx_tokens}, from inspect>"
        n = 0 if full else "<N>"
        p = {"ok": True, "budget": b}
    else:
        p = bud.plan(insp, frac, ctx_tokens, c0.recipe.layers, arch.full_layers)
        if not p["ok"]:
            return p, None
        b = p["budget"]
        n, est = bud.ncmoe(insp, b, ctx_tokens)
        p.update(ncmoe=n, llama_vram_est=est, llama_over_budget=(b is not None and est > b))
    out_json = os.path.join(ctx.a.work, "ms_bench.json")
    if w0.kind == "serve":
        # (a port each: the first server's may linger in TIME_WAIT)
        port, lport = (free_port(), free_port()) if not dry else (0, 0)
        cmds = {"moestream": en.ms_serve_cmd(ctx.a.moestream, model, b, ctx.a.threads, port),
                "llama": en.llama_serve_cmd(ls, model, n, ctx.a.threads, lport), "port": port, "lport": lport}
    else:
        cmds = {"moestream": en.ms_bench_cmd(ctx.a.moestream, model, wls, b, ctx.a.threads, ctx.a.reps, out_json),
                "llama": en.llama_bench_cmd(lb, model, wls, n, full, ctx.a.threads, ctx.a.reps), "out_json": out_json}
    return p, cmds


def run_group(ctx, cells_of_group, insp):
    """Runs one group; returns {cell id: entry} (nothing when the deadline stopped it)."""
    c0 = cells_of_group[0]
    wls = [c.workload for c in cells_of_group]
    p, cmds = group_plan(ctx, cells_of_group, insp)
    base = {"machine": ctx.machine, "ms_commit": ctx.ms_commit, "llama_commit": ctx.llama_commit,
            "recipe": c0.recipe.key, "group": c0.workload.group, "budget": c0.budget, "reps": ctx.a.reps,
            "layers": c0.recipe.layers, "full_layers": cl.ARCHS[c0.arch].full_layers,
            "plan": {k: v for k, v in p.items() if k != "why"}}
    if not p["ok"]:
        return {c.id: dict(base, cell=c.id, status="skipped", error=p["why"]) for c in cells_of_group}
    t0 = time.monotonic()
    w = ctx.a.work
    errs, ms, ll, ms_extra, ll_extra, peaks = [], {}, {}, {}, {}, {}
    if c0.workload.kind == "serve":
        ms, ms_extra, e, _, peaks["moestream"] = run_server(ctx, cmds["moestream"], cmds["port"], wls, False,
                                                             os.path.join(w, "ms_serve.log"))
        if e:
            errs.append("moestream: " + e)
        ll, ll_extra, e, _, peaks["llama"] = run_server(ctx, cmds["llama"], cmds["lport"], wls, True,
                                                         os.path.join(w, "llama_serve.log"))
        if e:
            errs.append("llama.cpp: " + e)
    else:
        if os.path.exists(cmds["out_json"]):
            os.remove(cmds["out_json"])
        rc, _, _, peaks["moestream"] = run_proc(ctx, cmds["moestream"], os.path.join(w, "ms.log"), 540)
        try:
            ms, info = en.parse_ms_bench(open(cmds["out_json"]).read(), wls) if rc == 0 else ({}, {})
            ms_extra = {"experts": en.experts_summary(info.get("experts"))} if info else {}
        except (OSError, ValueError, KeyError) as e:
            rc, ms = rc or 1, {}
            errs.append(f"moestream: unreadable output ({e})")
        if rc != 0:
            errs.append(f"moestream rc {rc}: {tail(os.path.join(w, 'ms.log'))}")
        rc, out, _, peaks["llama"] = run_proc(ctx, cmds["llama"], os.path.join(w, "llama.log"), 540)
        try:
            ll, _ = en.parse_llama_bench(out, wls) if rc == 0 else ({}, {})
        except (ValueError, KeyError) as e:
            rc, ll = rc or 1, {}
            errs.append(f"llama.cpp: unreadable output ({e})")
        if rc != 0:
            errs.append(f"llama-bench rc {rc}: {tail(os.path.join(w, 'llama.log'))}")
    secs = time.monotonic() - t0
    base.update(group_seconds=secs, vram_peak_mib=peaks,
                commands={"moestream": en.command_text(cmds["moestream"]), "llama": en.command_text(cmds["llama"])})
    out = {}
    for c in cells_of_group:
        m, l = ms.get(c.workload.name), ll.get(c.workload.name)
        e = dict(base, cell=c.id, metric="decode tok/s (aggregate)" if c.workload.kind == "serve" else "tok/s",
                 moestream=m, llama=l)
        if c.workload.kind == "serve":
            e["ttft"] = {"moestream": ms_extra.get(c.workload.name), "llama": ll_extra.get(c.workload.name)}
        elif ms_extra.get("experts"):
            e["experts"] = ms_extra["experts"]
        if m and l and l["mean"] > 0 and m["mean"] > 0:
            e.update(status="ok", ratio=m["mean"] / l["mean"])
        else:
            e.update(status="failed", error="; ".join(errs) or "no result for this workload")
        out[c.id] = e
    return out


# ------------------------------------------------------------------ the call
def pending_cells(ctx, selected):
    out = []
    for c in selected:
        e = ctx.cache.get(ctx.key(c))
        if e is None or (ctx.a.retry_failed and e.get("status") == "failed"):
            out.append(c)
    return out


def plan_call(ctx, all_cells, selected):
    """[(recipe, [group cells...]), ...]: the groups to run, by file, files on disk first."""
    pend = pending_cells(ctx, selected)
    gs = cl.groups(all_cells)
    want = []
    for c in pend:
        if c.group_key not in want:
            want.append(c.group_key)
    by_recipe = {}
    for k in want:
        cells = gs[k]
        by_recipe.setdefault(cells[0].recipe, []).append(cells)
    fdir = os.path.join(ctx.a.work, "files")
    order = sorted(by_recipe, key=lambda r: not os.path.exists(os.path.join(fdir, r.file_name)))
    return [(r, by_recipe[r]) for r in order], pend


def run_call(ctx, all_cells, selected, on_progress):
    plan, pend = plan_call(ctx, all_cells, selected)
    n_groups = sum(len(g) for _, g in plan)
    ctx.log(f"matrix: {len(selected)} cells selected, {len(pend)} to measure in {n_groups} groups over "
            f"{len(plan)} files; {ctx.a.max_seconds:.0f} s for this call")
    done_groups = skipped = 0
    stopped = None
    needed = [r for r, _ in plan]
    try:
        for i, (recipe, glist) in enumerate(plan):
            try:
                path = ensure_file(ctx, recipe, needed[i:])
                insp = inspect(ctx, path)
            except RuntimeError as e:
                ctx.log(f"matrix: {recipe.key}: {e}")
                for g in glist:
                    for c in g:
                        ctx.cache.put(ctx.key(c), {"cell": c.id, "machine": ctx.machine, "ms_commit": ctx.ms_commit,
                                                   "llama_commit": ctx.llama_commit, "recipe": recipe.key,
                                                   "group": c.workload.group, "budget": c.budget, "status": "failed",
                                                   "error": str(e)})
                on_progress()
                continue
            for g in glist:
                if ctx.left() - RESERVE_S < estimate(ctx, g):
                    skipped += 1  # a shorter group after it may still fit
                    continue
                ctx.log(f"matrix: group {g[0].recipe.key} | {g[0].budget} | {g[0].workload.group} "
                        f"({', '.join(c.workload.name for c in g)}), {ctx.left():.0f} s left")
                res = run_group(ctx, g, insp)
                for c in g:
                    ctx.cache.put(ctx.key(c), res[c.id])
                done_groups += 1
                on_progress()
    except Deadline:
        stopped = f"stopped before the time limit ({ctx.left():.0f} s left of --max-seconds {ctx.a.max_seconds:.0f})"
    if skipped and not stopped:
        stopped = f"{skipped} groups did not fit in the time left"
    left = len(pending_cells(ctx, selected))
    ctx.log(f"matrix: {done_groups} of {n_groups} groups measured; {left} cells left"
            + (f"; {stopped}: run the same command again" if stopped and left else ""))
    return left
