"""Tests of tools/matrix.py without a GPU: the cells, the budget arithmetic,
and whole calls against fake engines (tests/fake: a moestream, llama-bench,
llama-server and nvidia-smi that print what the real ones print, at fixed
speeds), for the cache, resume, --only, --max-seconds and the report.

    python3 -m unittest discover -s tools/benchmatrix/tests -t tools
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, TOOLS)

from benchmatrix import budget as bud  # noqa: E402
from benchmatrix import cells as cl  # noqa: E402
from benchmatrix import report  # noqa: E402
from benchmatrix.cache import key  # noqa: E402

FAKE = os.path.join(TOOLS, "benchmatrix", "tests", "fake")
MIB = 1 << 20


def fake_inspect(layers, dense_per_layer=10 * MIB, experts_per_layer=1024 * MIB, extra_layers=0):
    ls = [{"layer": i, "dense_bytes": dense_per_layer, "expert_bytes": experts_per_layer}
          for i in range(layers + extra_layers)]
    dense = 50 * MIB + dense_per_layer * len(ls)
    return {"hparams": {"n_vocab": 1000}, "tensors": [{"name": "token_embd.weight", "bytes": 20 * MIB}],
            "split": {"layers": ls, "dense_bytes": dense, "global_bytes": 50 * MIB},
            "vram": {"dense_bytes": dense, "reserve_bytes": 384 * MIB, "kv_bytes_per_1k_tokens": layers * MIB // 8,
                     "kv_fixed_bytes": 0}}


class CellsTest(unittest.TestCase):
    def test_ids_are_unique_and_name_every_part(self):
        cells = cl.expand()
        ids = [c.id for c in cells]
        self.assertEqual(len(ids), len(set(ids)))
        for c in cells:
            self.assertEqual(c.id.split("/"), [c.arch, c.quant, c.budget, c.workload.name, c.router])

    def test_core_and_quant_cells(self):
        cells = cl.expand()
        by_arch = {a: [c for c in cells if c.arch == a] for a in cl.ARCHS}
        for name, a in cl.ARCHS.items():
            core = [c for c in by_arch[name] if c.quant == a.quant and c.router == "uniform"]
            # every budget x every workload once
            self.assertEqual(len(core), len(cl.BUDGETS) * len(cl.workloads(a)), name)
        self.assertIn("mixtral-8x7b/q4_k_m/full/tg64@d16384/uniform", {c.id for c in cells})
        self.assertIn("gpt-oss-120b/mxfp4_moe/35%/serve8/uniform", {c.id for c in cells})
        quant = [c for c in cells if c.quant in cl.QUANT_TYPES]
        self.assertTrue(quant)
        self.assertTrue(all(c.arch == cl.QUANT_ARCH and c.workload.group == "short" for c in quant))
        self.assertEqual({c.quant for c in quant}, set(cl.QUANT_TYPES))

    def test_locality_router_only_for_tiered_cells(self):
        loc = [c for c in cl.expand() if c.router == "locality"]
        self.assertTrue(loc)
        for c in loc:
            self.assertTrue(cl.ARCHS[c.arch].locality)
            self.assertNotEqual(c.budget, "full")
            self.assertIn("--router-locality", c.recipe.gen_args())
        # every tiered uniform cell of every architecture has its locality twin
        ids = {c.id for c in cl.expand()}
        self.assertEqual({c.arch for c in loc}, set(cl.ARCHS))
        for c in cl.expand():
            if c.budget != "full" and c.router == "uniform" and c.quant == cl.ARCHS[c.arch].quant:
                self.assertIn(c.id.replace("/uniform", "/locality"), ids)

    def test_recipes_and_groups(self):
        cells = cl.expand()
        r = next(c for c in cells if c.id == "qwen3.6-35b/q4_k_m/65%/tg128/uniform").recipe
        self.assertEqual(r.gen_args(), ["--arch", "qwen35moe", "--preset", "qwen3.6-35b-a3b", "--quant", "q4_k_m",
                                        "--layers", "8"])
        full = cl.expand(full_depth=True)
        r = next(c for c in full if c.id == "qwen3-30b/q4_k_m/full/tg128/uniform").recipe
        self.assertNotIn("--layers", r.gen_args())
        g = cl.groups(cells)
        short = g[next(c for c in cells if c.id == "qwen3-30b/q4_k_m/65%/tg128/uniform").group_key]
        self.assertEqual(sorted(c.workload.name for c in short), ["pp512", "tg128"])
        serve = g[next(c for c in cells if c.id == "gpt-oss-20b/mxfp4_moe/full/serve1/uniform").group_key]
        self.assertEqual(sorted(c.workload.name for c in serve), ["serve1", "serve8"])

    def test_only(self):
        cells = cl.expand()
        sel = cl.select(cells, r"qwen3-30b/q4_k_m/(full|65%)/(tg128|pp512)/uniform")
        self.assertEqual(sorted(c.id for c in sel),
                         ["qwen3-30b/q4_k_m/65%/pp512/uniform", "qwen3-30b/q4_k_m/65%/tg128/uniform",
                          "qwen3-30b/q4_k_m/full/pp512/uniform", "qwen3-30b/q4_k_m/full/tg128/uniform"])
        self.assertEqual(len(cl.select(cells, None)), len(cells))
        self.assertEqual(cl.select(cells, "no-such-cell"), [])
        with self.assertRaises(SystemExit):
            cl.select(cells, "(")


class BudgetTest(unittest.TestCase):
    def test_full_depth_budget_is_the_fraction_of_the_file(self):
        insp = fake_inspect(8)
        p = bud.plan(insp, 0.5, 1024, 8, 8)
        self.assertTrue(p["ok"])
        self.assertEqual(p["budget"], int(0.5 * p["bytes_real"]))
        self.assertAlmostEqual(p["bytes_real"], p["file_bytes"])

    def test_fewer_layers_keep_the_real_models_expert_fraction(self):
        real = bud.plan(fake_inspect(48), 0.35, 4096, 48, 48)
        small = bud.plan(fake_inspect(12), 0.35, 4096, 12, 48)
        self.assertAlmostEqual(real["bytes_real"], small["bytes_real"])
        self.assertAlmostEqual(real["experts_frac"], small["experts_frac"], places=6)
        self.assertLess(small["budget"], real["budget"])
        # what moestream keeps beside the experts: the small file's dense, KV and reserve
        ins = fake_inspect(12)
        fixed = ins["vram"]["dense_bytes"] + bud.kv_bytes(ins, 4096) + ins["vram"]["reserve_bytes"]
        self.assertAlmostEqual(small["budget"], fixed + small["experts_frac"] * 12 * 1024 * MIB, delta=1)

    def test_an_extra_layer_is_counted_once(self):
        a = bud.plan(fake_inspect(8, extra_layers=1), 0.5, 1024, 8, 40)
        b = bud.plan(fake_inspect(8), 0.5, 1024, 8, 40)
        self.assertAlmostEqual(a["bytes_real"] - b["bytes_real"], (10 + 1024) * MIB)

    def test_below_the_minimum_is_not_run(self):
        p = bud.plan(fake_inspect(4, experts_per_layer=100 * MIB), 0.10, 1 << 20, 4, 4)  # KV of 1M tokens: 512 MiB
        self.assertFalse(p["ok"])
        self.assertIsNone(p["budget"])
        self.assertIn("holds no experts", p["why"])

    def test_full_is_no_budget(self):
        p = bud.plan(fake_inspect(4), None, 1024, 4, 4)
        self.assertTrue(p["ok"])
        self.assertIsNone(p["budget"])

    def test_ncmoe_fits_the_budget_with_the_fewest_cpu_layers(self):
        insp = fake_inspect(10, experts_per_layer=100 * MIB)
        over = bud.llama_overhead(insp, 1024)
        dense_gpu = insp["split"]["dense_bytes"] - 20 * MIB
        for k in range(0, 11):
            budget = dense_gpu + over + k * 100 * MIB + 50 * MIB  # room for k layers' experts, not k + 1
            n, est = bud.ncmoe(insp, budget, 1024)
            self.assertEqual(n, 10 - k)
            self.assertLessEqual(est, budget)
        self.assertEqual(bud.ncmoe(insp, None, 1024)[0], 0)
        self.assertEqual(bud.ncmoe(insp, 1, 1024)[0], 10)  # below llama.cpp's own minimum: every layer on the CPU

    def test_ctx_of_matches_moestream_bench(self):
        wl = {w.name: w for w in cl.workloads(cl.ARCHS["qwen3-30b"])}
        self.assertEqual(bud.ctx_of(wl["tg128"]), 513)
        self.assertEqual(bud.ctx_of(wl["pp8192"]), 8193)
        self.assertEqual(bud.ctx_of(wl["tg64@d32768"]), 32768 + 72 + 1)
        self.assertEqual(bud.ctx_of(wl["serve8"]), cl.SERVE["parallel"] * cl.SERVE["ctx"])


class ReportOrderTest(unittest.TestCase):
    def test_worst_first_then_the_rest(self):
        es = [{"cell": "b", "status": "ok", "ratio": 1.5}, {"cell": "a", "status": "ok", "ratio": 0.7},
              {"cell": "c", "status": "failed"}, {"cell": "d", "status": "ok", "ratio": 1.0}]
        ok, rest = report.ordered(es)
        self.assertEqual([e["cell"] for e in ok], ["a", "d", "b"])
        self.assertEqual([e["cell"] for e in rest], ["c"])


class HarnessCallTest(unittest.TestCase):
    """Whole calls of tools/matrix.py against the fake engines."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.cache = os.path.join(self.dir, "results", "matrix.json")
        self.md = os.path.join(self.dir, "results", "matrix.md")
        self.log = os.path.join(self.dir, "calls.jsonl")

    def tearDown(self):
        self.tmp.cleanup()

    def call(self, *args, env=None, ms_commit=None):
        e = dict(os.environ, PATH=FAKE + os.pathsep + os.environ.get("PATH", ""), FAKE_LOG=self.log)
        e.update(env or {})
        cmd = [sys.executable, os.path.join(TOOLS, "matrix.py"), "--moestream", os.path.join(FAKE, "moestream"),
               "--llama-bin", FAKE, "--work", os.path.join(self.dir, "work"), "--cache", self.cache,
               "--llama-commit", "fa1ce00", "--threads", "2"]
        if ms_commit:
            cmd += ["--ms-commit", ms_commit]
        r = subprocess.run(cmd + list(args), capture_output=True, text=True, env=e, timeout=240)
        return r

    def calls(self, what=None):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            out = [json.loads(l) for l in f]
        return [c for c in out if what is None or c[:2] == what]

    def entries(self):
        with open(self.cache) as f:
            return json.load(f)["entries"]

    ONLY = r"qwen3-30b/q4_k_m/(full|65%)/(tg128|pp512)/uniform"

    def test_cells_cached_by_commit_file_and_cell_and_resumed(self):
        r = self.call("--only", self.ONLY)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        es = self.entries()
        self.assertEqual(len(es), 4)
        for k, e in es.items():
            self.assertEqual(e["status"], "ok", e)
            self.assertEqual(k, key("Fake GPU 80GB, 81559 MiB", "fakems1", "fa1ce00", e["recipe"], e["cell"]))
            self.assertEqual(len(e["moestream"]["values"]), 2)
        tg = next(e for e in es.values() if e["cell"] == "qwen3-30b/q4_k_m/65%/tg128/uniform")
        self.assertAlmostEqual(tg["ratio"], 30.0 / 40.0)  # llama.cpp's better load mode (none) counts
        self.assertEqual(tg["llama"]["load_mode"], "none")
        self.assertIn("--vram", tg["commands"]["moestream"])
        self.assertIn("-ncmoe", tg["commands"]["llama"])
        self.assertEqual(len(self.calls(["moestream", "gen"])), 1)  # one file for both budgets
        benches = len(self.calls(["moestream", "bench"]))
        # again: nothing left, nothing run
        r = self.call("--only", self.ONLY)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("0 to measure", r.stdout)
        self.assertEqual(len(self.calls(["moestream", "bench"])), benches + 1)  # the commit probe only
        self.assertEqual(len(self.calls(["llama-bench", "-m"])), 2)
        # another moestream commit: other keys, measured again, the old entries kept
        r = self.call("--only", self.ONLY, env={"FAKE_MS_GIT": "fakems2"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.entries()), 8)
        self.assertEqual(len(self.calls(["llama-bench", "-m"])), 4)

    def test_only_runs_the_selected_groups(self):
        r = self.call("--only", r"qwen3-30b/q4_k_m/full/pp512/uniform")
        self.assertEqual(r.returncode, 0, r.stderr)
        # pp512 comes from the same bench call as tg128: both are cached
        self.assertEqual(sorted(e["cell"] for e in self.entries().values()),
                         ["qwen3-30b/q4_k_m/full/pp512/uniform", "qwen3-30b/q4_k_m/full/tg128/uniform"])
        self.assertEqual(len(self.calls(["llama-bench", "-m"])), 1)

    def test_report_worst_first_with_machine_commits_and_commands(self):
        r = self.call("--only", self.ONLY)
        self.assertEqual(r.returncode, 0, r.stderr)
        md = open(self.md).read()
        self.assertIn("Fake GPU 80GB", md)
        self.assertIn("moestream: fakems1; llama.cpp: fa1ce00", md)
        rows = [l for l in md.splitlines() if re.match(r"\| \d+ \| ", l)]
        self.assertEqual(len(rows), 4)
        ratios = [float(re.search(r"\| ([0-9.]+)x \|", l).group(1)) for l in rows]
        self.assertEqual(ratios, sorted(ratios))
        self.assertIn("qwen3-30b/q4_k_m/65%/tg128/uniform", rows[0])
        self.assertIn("30.0 ± 1.4", rows[0])
        self.assertIn("llama-bench -m", md)
        self.assertIn("moestream bench -m", md)
        self.assertIn("12 / 48", md)  # the files' layers beside the real model's
        # --report-only rewrites the same table from the cache alone
        os.remove(self.md)
        r = self.call("--report-only")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([l for l in open(self.md).read().splitlines() if re.match(r"\| \d+ \| ", l)], rows)

    def test_failures_are_cached_and_retried_on_request(self):
        r = self.call("--only", self.ONLY, env={"FAKE_MS_FAIL": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        es = {e["cell"]: e for e in self.entries().values()}
        self.assertEqual(es["qwen3-30b/q4_k_m/65%/tg128/uniform"]["status"], "failed")
        self.assertIn("fake failure at a budget", es["qwen3-30b/q4_k_m/65%/tg128/uniform"]["error"])
        self.assertEqual(es["qwen3-30b/q4_k_m/full/tg128/uniform"]["status"], "ok")
        self.assertIn("## Failed or skipped", open(self.md).read())
        r = self.call("--only", self.ONLY)
        self.assertIn("0 to measure", r.stdout)
        r = self.call("--only", self.ONLY, "--retry-failed")
        self.assertIn("2 to measure", r.stdout)
        es = {e["cell"]: e for e in self.entries().values()}
        self.assertEqual(es["qwen3-30b/q4_k_m/65%/tg128/uniform"]["status"], "ok")

    def test_max_seconds_stops_cleanly(self):
        # Too little time for even the gen: nothing runs, the cache is valid, exit 3 (cells left).
        r = self.call("--only", self.ONLY, "--max-seconds", "30")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("stopped before the time limit", r.stdout)
        self.assertEqual(self.entries(), {})
        self.assertEqual(self.calls(["moestream", "gen"]), [])

    def test_an_engine_past_the_deadline_is_stopped_and_not_cached(self):
        # 1-second estimates let the budget group start; its moestream bench then
        # sleeps past the call's end and is killed.
        r = self.call("--only", self.ONLY, "--max-seconds", "20", "--estimate", "gen=1,short=1",
                      env={"FAKE_MS_SLEEP": "60"})
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("stopped before the time limit", r.stdout)
        cells = sorted(e["cell"] for e in self.entries().values())
        self.assertEqual(cells, ["qwen3-30b/q4_k_m/full/pp512/uniform", "qwen3-30b/q4_k_m/full/tg128/uniform"])

    def test_a_group_that_does_not_fit_is_left_for_a_later_call_and_the_next_one_runs(self):
        only = r"qwen3-30b/q4_k_m/(full/serve\d|65%/(tg128|pp512))/uniform"
        r = self.call("--only", only, "--max-seconds", "100", "--estimate", "gen=1,short=1,serve=1000")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("1 groups did not fit", r.stdout)
        self.assertEqual(sorted(e["cell"] for e in self.entries().values()),
                         ["qwen3-30b/q4_k_m/65%/pp512/uniform", "qwen3-30b/q4_k_m/65%/tg128/uniform"])
        self.assertEqual(self.calls(["llama-server", "-m"]), [])

    def test_a_missing_engine_fails_its_cells_and_the_call_goes_on(self):
        r = self.call("--only", r"qwen3-30b/q4_k_m/full/(tg128|pp512|serve1)/uniform", "--reps", "1",
                      "--llama-bin", os.path.join(self.dir, "no-llama-here"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        es = {e["cell"]: e for e in self.entries().values()}
        self.assertEqual(len(es), 4)
        for e in es.values():
            self.assertEqual(e["status"], "failed")
            self.assertIn("cannot start", e["error"])
            self.assertGreater(e["moestream"]["mean"], 0)  # moestream's half is kept

    def test_dry_run_prints_commands_and_runs_nothing(self):
        r = self.call("--dry-run", "--only", self.ONLY)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k_m --layers 12", r.stdout)
        self.assertIn("llama-bench -m", r.stdout)
        self.assertIn("--vram full", r.stdout)
        self.assertEqual(self.calls(["moestream", "gen"]), [])
        self.assertFalse(os.path.exists(self.cache))

    def test_serving_cells_through_both_fake_servers(self):
        r = self.call("--only", r"qwen3-30b/q4_k_m/full/serve1/uniform", "--reps", "1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        es = {e["cell"]: e for e in self.entries().values()}
        self.assertEqual(sorted(es), ["qwen3-30b/q4_k_m/full/serve1/uniform", "qwen3-30b/q4_k_m/full/serve8/uniform"])
        for e in es.values():
            self.assertEqual(e["status"], "ok", e)
            self.assertEqual(e["metric"], "decode tok/s (aggregate)")
            self.assertIn("llama-server", e["commands"]["llama"])
        # the fake servers stream at 400 and 300 tok/s per request
        self.assertGreater(es["qwen3-30b/q4_k_m/full/serve1/uniform"]["ratio"], 1.0)
        self.assertGreater(es["qwen3-30b/q4_k_m/full/serve8/uniform"]["moestream"]["mean"],
                           es["qwen3-30b/q4_k_m/full/serve1/uniform"]["moestream"]["mean"])


if __name__ == "__main__":
    unittest.main()
