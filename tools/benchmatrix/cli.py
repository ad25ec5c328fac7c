"""Command line of tools/matrix.py."""
import argparse
import os
import shutil
import sys

from benchmatrix import cells as cl
from benchmatrix import engines as en
from benchmatrix import report
from benchmatrix import runner
from benchmatrix.cache import Cache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

USAGE = """tools/matrix.py [--only REGEX] [--max-seconds N] [--dry-run] [--moestream BIN] [--llama-bin DIR] ...

moestream against llama.cpp (llama-bench, llama-server) on the same generated
file, cell by cell, in the same call (issue #43). Results are cached in
bench/results/matrix.json by machine, both commits, file recipe and cell, so a
call resumes where the last one stopped; bench/results/matrix.md is rewritten
after every group, worst moestream/llama.cpp ratio first.

On the GPU machine (carry .llb, made here by tools/llama_bench_local.sh):
  eval "$(tools/llb_unpack.sh /tmp/lb)"
  python3 tools/matrix.py --moestream ./bin/moestream --llama-bin /tmp/lb/bin --max-seconds 540 --mirror "$OUT"
Cell ids are ARCH/QUANT/BUDGET/WORKLOAD/ROUTER, e.g. qwen3-30b/q4_k_m/65%%/tg128/uniform.
"""


def parse(argv):
    ap = argparse.ArgumentParser(usage=USAGE)
    ap.add_argument("--only", help="only the cells whose id matches this regular expression (re.search)")
    ap.add_argument("--max-seconds", type=float, default=540,
                    help="stop cleanly before this many seconds (no group starts that would not fit; default 540)")
    ap.add_argument("--dry-run", action="store_true", help="print the cells and commands; run nothing")
    ap.add_argument("--list", action="store_true", help="print the selected cell ids and exit")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the report from the cache (the newest machine and commits) and exit")
    ap.add_argument("--moestream", default=os.path.join(REPO, "build-cuda", "moestream"))
    ap.add_argument("--llama-bin", default="/tmp/lb/bin", help="folder holding llama-bench and llama-server")
    ap.add_argument("--work", default="/tmp/matrix", help="generated files and logs (kept between calls)")
    ap.add_argument("--cache", default=os.path.join(REPO, "bench", "results", "matrix.json"))
    ap.add_argument("--report", default=None, help="default: matrix.md beside the cache")
    ap.add_argument("--mirror", help="also copy the cache and the report here after every group (the device's $OUT)")
    ap.add_argument("--estimate", default="",
                    help="seconds a step takes before the cache has timed one, e.g. gen=60,depth=200 (steps: "
                         + ", ".join(f"{k} {v}" for k, v in runner.DEFAULT_SECONDS.items()) + ")")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads of both engines")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of every test (default 2)")
    ap.add_argument("--retry-failed", action="store_true", help="run cells again whose cached entry failed")
    ap.add_argument("--full-depth", action="store_true", help="generate every layer of the real models (other files)")
    ap.add_argument("--ms-commit", help="moestream's commit (default: what its bench --json reports)")
    ap.add_argument("--llama-commit", help="llama.cpp's commit (default: .llb/llama-src.version)")
    ap.add_argument("--machine", help="the machine's name in the cache key (default: nvidia-smi's GPU name)")
    a = ap.parse_args(argv)
    if a.max_seconds <= 0 or a.reps < 1 or a.threads < 1:
        ap.error("--max-seconds, --reps and --threads must be positive")
    try:
        for item in filter(None, a.estimate.split(",")):
            k, v = item.split("=")
            if k not in runner.DEFAULT_SECONDS or float(v) <= 0:
                raise ValueError(item)
            runner.DEFAULT_SECONDS[k] = float(v)
            runner.EXPLICIT.add(k)
    except ValueError as e:
        ap.error(f"--estimate: '{e}' is not STEP=SECONDS with a step of {', '.join(runner.DEFAULT_SECONDS)}")
    a.report = a.report or os.path.join(os.path.dirname(os.path.abspath(a.cache)), "matrix.md")
    return a


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    all_cells = cl.expand(a.full_depth)
    selected = cl.select(all_cells, a.only)
    if a.list:
        print("\n".join(c.id for c in selected))
        return 0
    cache = Cache(a.cache)
    if a.report_only:
        c = cache.latest_context() or ("none yet", "-", "-")
        report.write(a.report, cache, c, all_cells)
        print(f"matrix: wrote {a.report}")
        return 0
    ctx = runner.Ctx(a, cache, log=lambda s: print(s, flush=True))
    ctx.machine = a.machine or runner.gpu_name()
    ctx.ms_commit = a.ms_commit or runner.ms_commit_of(a.moestream)
    ctx.llama_commit = a.llama_commit or runner.llama_commit_of(a.llama_bin, REPO)
    print(f"matrix: machine {ctx.machine}; moestream {ctx.ms_commit}; llama.cpp {ctx.llama_commit}")
    if a.dry_run:
        return dry_run(ctx, all_cells, selected)
    os.makedirs(a.work, exist_ok=True)

    def progress():
        cache.save()
        report.write(a.report, cache, (ctx.machine, ctx.ms_commit, ctx.llama_commit), all_cells, os.cpu_count())
        if a.mirror:
            os.makedirs(a.mirror, exist_ok=True)
            for p in (a.cache, a.report):
                shutil.copy(p, a.mirror)

    left = runner.run_call(ctx, all_cells, selected, progress)
    progress()
    print(f"matrix: wrote {a.report} and {a.cache}")
    return 0 if left == 0 else 3


def dry_run(ctx, all_cells, selected):
    plan, pend = runner.plan_call(ctx, all_cells, selected)
    n_groups = sum(len(g) for _, g in plan)
    print(f"matrix: {len(all_cells)} cells in the matrix, {len(selected)} selected, {len(pend)} not cached; "
          f"{n_groups} groups over {len(plan)} files (dry run: budgets and -ncmoe come from inspect of each file)")
    est = 0
    for recipe, glist in plan:
        print(f"\nfile {recipe.file_name}: {ctx.a.moestream} gen {' '.join(recipe.gen_args())} "
              f"-t {ctx.a.threads} -q -o {ctx.a.work}/files/{recipe.file_name}")
        est += runner.DEFAULT_SECONDS["gen"]
        for g in glist:
            _, cmds = runner.group_plan(ctx, g, None, dry=True)
            est += runner.estimate(ctx, g)
            print(f"  group {g[0].budget} {g[0].workload.group}: {', '.join(c.id for c in g)}")
            print(f"    moestream: {en.command_text(cmds['moestream'])}")
            print(f"    llama.cpp: {en.command_text(cmds['llama'])}")
    print(f"\nmatrix: about {est / 60:.0f} minutes of device time at the default estimates "
          f"({-(-est // ctx.a.max_seconds):.0f} calls of --max-seconds {ctx.a.max_seconds:.0f})")
    return 0
