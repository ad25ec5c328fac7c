// `moestream bench`: prompt processing (ppN) and generation (tgN) speed of a
// model on a backend, llama-bench style: every test repeated -r times,
// reported as mean ± sample standard deviation of tokens/s, with the device,
// the build and the model in the header. The one tool performance claims are
// made with; keep its output formats stable.
//
//   moestream bench [-m FILE] [-p 512[,8192..]] [-n 128[,..]] [-d 0[,32768..]] [-r 3] [--backend cpu|cuda] [-t N]
//                   [--kv-type f16|f32|q8_0]
//                   [--vram B[,B..]] [--svg FILE] [--json] [-o FILE]
//
// pp: a synthetic prompt of p tokens into an empty cache, one forward call
//     (batched prefill), logits of the last token copied back.
// tg: after a short (untimed) prompt of 8 tokens, n decode steps of random
//     tokens (a new sequence each run), logits copied back each step.
// --seqs 1,4,8: tg of N sequences decoding together (after the 8-token
//     prompt each, untimed): every step one Backend::forward_seqs of one
//     random token per sequence; rows read `tg128 x8 seqs`, t/s the aggregate
//     (N x n tokens / time). The CUDA backend is built with N sequence states.
// -d N (llama-bench's depth): each pp and tg test starts from a cache that
//     already holds N tokens (filled untimed; for tg it replaces the 8-token
//     prompt); rows read `pp512 @ d8192`. Lists run every combination, in
//     llama-bench's order: per depth, the pp tests, then the tg tests.
// --spec oracle:0.8,ngram: generation of n tokens (the first -n count, after
//     the 8-token prompt, greedy) through the speculative verify loop
//     (docs/speculative.md), one row per drafter (`tg128 spec oracle:0.8`),
//     beside the same generation without speculation (`tg128 greedy`): the
//     baseline they share tokens with, where plain tg feeds random tokens.
//     An oracle's reference is one untimed plain run. --draft-max,
//     --spec-fixed, --spec-rollback as `run` has them.
// The floor beside tg is active bytes per token / memory bandwidth (the GPU's
// device-to-device copy rate, or the host's read rate for --backend cpu).
// --vram A,B,..: the whole bench once per budget, each on a backend built
// for it and released before the next, then a summary table (and --svg
// chart) of tokens/s per budget beside that budget's decode floor
// (experts/floor.h: what streaming and CPU experts cost at best).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/bench_report.h"
#include "cli/commands.h"
#include "cli/model_path.h"
#include "cpu/bandwidth.h"
#include "cpu/thread_pool.h"
#include "engine/loaded_model.h"
#include "engine/route_recorder.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "cli/draft_setup.h"
#include "engine/speculative_dflash.h"
#include "engine/speculative_mtp.h"
#include "experts/budget_sweep.h"
#include "util/error.h"
#include "util/process_memory.h"
#ifdef MOESTREAM_HAVE_CUDA
#include "cuda/device.h"
#endif

#ifdef MOESTREAM_HAVE_CUDA
#include "cuda/backend/cuda_backend.h"
#include "cuda/device.h"
#endif

namespace ms::cli {
namespace {

// A result row with no timings yet.
Stat bench_stat(std::string test, int n_tokens, int depth = 0) {
  Stat s;
  s.test = std::move(test);
  s.n_tokens = n_tokens;
  s.depth = depth;
  return s;
}

// --spec and its options (beside BenchArgs, as --seqs is).
struct SpecBench {
  std::vector<std::string> choices;  // ngram, draft, oracle:ALPHA
  DraftSetup draft;                  // draft: -md, --device-draft, --draft-p-min
  SpecControllerOptions control;
  bool fixed = false;
  std::string rollback = "states";
  std::vector<int> trees = {0};  // --spec-tree: a row per drafter and node budget (0: chains)
};

std::vector<int32_t> bench_prompt(int n, int64_t n_vocab, uint64_t seed) {
  // Fixed pseudo-random ids, the same for every run and backend.
  std::vector<int32_t> ids;
  uint64_t s = seed;
  const int64_t n_text = n_vocab > 3 ? n_vocab - 3 : n_vocab;
  for (int i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(n_text)));
  }
  return ids;
}

// Memory bandwidth the floor is computed against, in bytes/s, and how it was had.
double floor_bandwidth(const Backend& be, ThreadPool& pool, std::string* how) {
  if (const ExpertTelemetry t = be.expert_telemetry(); t.hybrid) {
    // Within a VRAM budget: no 2 GiB probe; the backend measured it at start-up.
    *how = "device copy, measured by the hybrid step at start-up";
    return t.gpu_gbps * 1e9;
  }
#ifdef MOESTREAM_HAVE_CUDA
  if (be.name() == "cuda") {
    // Device-to-device copy of 1 GiB: bytes read + bytes written per second.
    const size_t bytes = size_t{1} << 30;
    cuda::DeviceBuffer a(bytes, "bandwidth probe"), b(bytes, "bandwidth probe");
    cuda::Stream s;
    cuda::Event t0, t1;
    MS_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
    float best = 1e30f;
    for (int i = 0; i < 5; ++i) {
      t0.record(s);
      MS_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
      t1.record(s);
      t1.synchronize();
      best = std::min(best, t1.ms_since(t0));
    }
    *how = "device copy (read + write), best of 5";
    return 2.0 * bytes / (best * 1e-3);
  }
#else
  (void)be;
#endif
  *how = "host read, " + std::to_string(pool.size()) + " threads";
  return measure_read_bandwidth(pool);
}

// Host memory read bandwidth (GB/s) with all the pool's threads, once per
// process: the decode floor's term for the cold experts, which the copy
// engine and the CPU both read from host memory (experts/floor.h).
double host_memory_gbps(ThreadPool& pool) {
  static double gbps = 0;
  if (gbps == 0) gbps = measure_read_bandwidth(pool) / 1e9;
  return gbps;
}

// Builds the backend for one budget, runs pp and tg on it, and releases it
// (with its VRAM) before returning, so the next budget starts on an empty device.
BudgetRun measure(const BenchArgs& a, const std::vector<int>& seqs, const SpecBench& spec, const std::string& vram,
                  bool sweep, const LoadedModel& model, const ModelInfo& mi, ThreadPool& pool) {
  const ModelWeights& w = model.weights;
  const ModelConfig& c = w.cfg;
  constexpr int kTgPrompt = 8;
  const int64_t ctx = bench_ctx(a, kTgPrompt);
  BackendSetup bs;
  bs.requested = a.backend;
  bs.ctx = ctx;
  bs.max_batch = a.batch;  // 0: the CUDA backend chooses (batch_help); the CPU's takes the whole prompt
  bs.cpu_max_batch = std::clamp(largest(a.n_prompt), 1, kMaxBatch);
  // A verify (its token and drafts, or a tree's nodes) runs as one batch, as
  // in `run`: a batch bound below it would split it into passes (with -p 0,
  // into single tokens) and price every verify as that many decode steps.
  if (!spec.choices.empty()) {
    const int widest_tree = *std::max_element(spec.trees.begin(), spec.trees.end());
    bs.cpu_max_batch = std::max({bs.cpu_max_batch, spec.control.draft_max + 1, widest_tree + 1});
  }
  bs.kv_type = a.kv_type;
  bs.n_seq = std::max(1, largest(seqs));
  bs.vram = a.vram;
  bs.vram.budget = vram;
  reset_peak_rss();  // the budget's own peak, not an earlier budget's or probe's
  std::unique_ptr<Backend> be = make_backend(bs, w, pool);
  if (sweep && be->name() != "cuda")  // make_backend said why on stderr
    throw Error("--vram " + a.vram.budget + ": a list of budgets needs the CUDA backend, which cannot run here");
  BudgetRun r;
  r.vram = vram;
  r.backend = be->name();
  r.device = backend_device(*be, pool);

  using clock = std::chrono::steady_clock;
  const std::vector<int32_t> tg_prompt = bench_prompt(kTgPrompt, c.n_vocab, 777);
  std::vector<float> logits;
  // The untimed context of a test at depth d (llama-bench's -d): d tokens of
  // a fixed prompt in a fresh cache, in the backend's own prompt passes.
  auto fill = [&](KvCache& kv, int depth) {
    if (depth > 0) be->forward(kv, bench_prompt(depth, c.n_vocab, 4242), logits);
  };
  auto run_pp = [&](const std::vector<int32_t>& prompt, int depth) {
    KvCache kv = be->make_cache(ctx, a.kv_type);
    fill(kv, depth);
    const auto t0 = clock::now();
    be->forward(kv, prompt, logits);
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Decode feeds random tokens, a new sequence per run (as llama-bench does):
  // greedy decoding of a random-weight model soon loops, and a loop's experts
  // would all be cached by the second run, which no real text allows. At
  // depth 0 a short prompt comes first; at depth d the d tokens are the prompt.
  uint32_t tg_run = 0;
  auto run_tg = [&](int n, int depth) {
    KvCache kv = be->make_cache(ctx, a.kv_type);
    if (depth > 0) fill(kv, depth);
    else be->forward(kv, tg_prompt, logits);
    std::mt19937 rng(1000 + tg_run++);
    const auto vocab = static_cast<uint32_t>(c.n_vocab);
    const auto t0 = clock::now();
    for (int j = 0; j < n; ++j) {
      const auto tok = static_cast<int32_t>(rng() % vocab);
      be->forward(kv, std::span<const int32_t>(&tok, 1), logits);
    }
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // --seqs: N sequences decoding together, one forward_seqs per step.
  auto run_tg_seqs = [&](int n, int n_seqs) {
    std::vector<KvCache> kvs;
    kvs.reserve(static_cast<size_t>(n_seqs));
    for (int i = 0; i < n_seqs; ++i) {
      kvs.push_back(be->make_cache(ctx, a.kv_type));
      be->forward(kvs.back(), tg_prompt, logits);
    }
    std::mt19937 rng(5000 + tg_run++);
    const auto vocab = static_cast<uint32_t>(c.n_vocab);
    std::vector<int32_t> toks(static_cast<size_t>(n_seqs));
    std::vector<SeqTokens> step(static_cast<size_t>(n_seqs));
    const auto t0 = clock::now();
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n_seqs; ++i) {
        toks[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % vocab);
        step[static_cast<size_t>(i)] = {&kvs[static_cast<size_t>(i)],
                                        std::span<const int32_t>(&toks[static_cast<size_t>(i)], 1), true};
      }
      be->forward_seqs(step, logits);
    }
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  if (const int most = largest(seqs); be->max_sequences() > 0 && most > be->max_sequences())
    throw Error("--seqs " + std::to_string(most) + ": the " + be->name() + " backend holds " +
                std::to_string(be->max_sequences()) + " sequences");
  // Warm-up: pages in the weights, spins up the pool, captures the decode graph.
  const int first_p = first_nonzero(a.n_prompt), first_n = first_nonzero(a.n_gen);
  if (first_p > 0) run_pp(bench_prompt(first_p, c.n_vocab, 12345), 0);
  if (first_n > 0) run_tg(std::min(first_n, 8), 0);

  // llama-bench's order: for each depth, every pp test, then every tg test.
  for (int depth : a.n_depth) {
    for (int np : a.n_prompt) {
      if (np <= 0) continue;
      const std::vector<int32_t> prompt = bench_prompt(np, c.n_vocab, 12345);
      Stat s = bench_stat(bench_test_name('p', np, depth), np, depth);
      for (int i = 0; i < a.reps; ++i) s.tps.push_back(np / run_pp(prompt, depth));
      r.stats.push_back(s);
    }
    for (int ng : a.n_gen) {
      if (ng <= 0) continue;
      Stat s = bench_stat(bench_test_name('t', ng, depth), ng, depth);
      for (int i = 0; i < a.reps; ++i) s.tps.push_back(ng / run_tg(ng, depth));
      r.stats.push_back(s);
    }
  }
  for (int ns : seqs) {
    const int ng = first_nonzero(a.n_gen);
    if (ng <= 0) break;
    run_tg_seqs(std::min(ng, 4), ns);  // warm-up of this batch size
    Stat s = bench_stat(bench_test_name('t', ng, 0) + " x" + std::to_string(ns) + " seqs", ng * ns);
    for (int i = 0; i < a.reps; ++i) s.tps.push_back(double(ng) * ns / run_tg_seqs(ng, ns));
    r.stats.push_back(s);
  }
  if (!spec.choices.empty()) {
    // Greedy generation of ng tokens after the tg prompt, timed from the
    // prompt's end (ng + 1 tokens: the first comes from the prompt's logits).
    const int ng = first_nonzero(a.n_gen);
    SamplerParams sp;
    sp.temperature = 0;
    // mtp, dflash: drafters that watch this cache's forwards, made with it.
    auto generate_run = [&](Drafter* d, std::vector<int32_t>* out, GenerateStats* st, bool mtp = false,
                            const DFlashWeights* dflash = nullptr, int tree = 0) {
      KvCache kv = be->make_cache(ctx, a.kv_type);
      std::unique_ptr<Drafter> mtp_drafter;
      if (mtp) {
        mtp_drafter = std::make_unique<MtpDrafter>(*be, kv, a.kv_type);
        d = mtp_drafter.get();
      } else if (dflash) {
        mtp_drafter = std::make_unique<DFlashDrafter>(*be, kv, *dflash, model.weights, pool);
        d = mtp_drafter.get();
      }
      Sampler sampler(sp);
      GenerateParams gp;
      gp.n_predict = ng + 1;
      gp.stop_at_eog = false;
      gp.spec.drafter = d;
      gp.spec.control = spec.control;
      gp.spec.control.adaptive = !spec.fixed;
      gp.spec.rollback =
          spec.rollback == "replay" ? SpecDecoding::Rollback::Replay : SpecDecoding::Rollback::TokenStates;
      gp.spec.tree_budget = tree;
      if (tree > 0 && d && out == nullptr) {
        const std::string why = spec_tree_refusal(*be, kv, *d);
        if (!why.empty()) std::fprintf(stderr, "moestream: --spec-tree: drafts verified as chains: %s\n", why.c_str());
      }
      *st = generate(*be, kv, sampler, nullptr, tg_prompt, gp, [&](int32_t id) {
        if (out) out->push_back(id);
        return true;
      });
      return st->decode_seconds;
    };
    std::vector<int32_t> reference;
    GenerateStats st;
    generate_run(nullptr, &reference, &st);  // warm-up, and the oracle's reference
    Stat base = bench_stat(bench_test_name('t', ng, 0) + " greedy", ng);
    for (int i = 0; i < a.reps; ++i) base.tps.push_back(ng / generate_run(nullptr, nullptr, &st));
    r.stats.push_back(base);
    for (const std::string& text : spec.choices)
      for (const int tree : spec.trees) {
        const DraftChoice choice = parse_draft_choice(text);
        Stat s = bench_stat(bench_test_name('t', ng, 0) + " spec " + choice.describe() +
                                (tree > 0 ? " tree" + std::to_string(tree) : ""),
                            ng);
        s.has_spec = true;
        OpenDraft draft;  // the draft model, opened once for the repetitions
        if (choice.kind == DraftChoice::Kind::Model) draft = open_draft(spec.draft, model, be->name(), pool, ctx, sp, true);
        OpenDFlash dflash;
        if (choice.kind == DraftChoice::Kind::DFlash) dflash = open_dflash(spec.draft, model, true);
        for (int i = 0; i < a.reps; ++i) {
          std::unique_ptr<Drafter> d;
          const bool mtp = choice.kind == DraftChoice::Kind::Mtp;
          if (choice.kind == DraftChoice::Kind::Ngram)
            d = std::make_unique<NgramDrafter>();
          else if (choice.kind == DraftChoice::Kind::Model)
            d = std::make_unique<ModelDrafter>(*draft.backend, ModelDrafter::Options{sp, spec.draft.p_min, ctx});
          else if (!mtp && choice.kind != DraftChoice::Kind::DFlash)
            d = std::make_unique<OracleDrafter>(reference, tg_prompt.size(), choice.alpha, c.n_vocab, 1 + i);
          s.tps.push_back(ng / generate_run(d.get(), nullptr, &st, mtp, dflash.weights.get(), tree));
          s.spec.add(st.spec);
          std::fprintf(stderr, "moestream: %s (run %d): %s\n", s.test.c_str(), i + 1, st.spec.describe().c_str());
        }
        r.stats.push_back(s);
      }
  }
  if (!a.record_routes.empty()) {
    // Untimed: the first pp prompt, then the first tg count of greedy decode
    // tokens, in one context.
    const std::vector<int32_t> prompt = bench_prompt(std::max(first_p, 0), c.n_vocab, 12345);
    RouteRecorder rec(a.record_routes, w, static_cast<uint32_t>(prompt.size()));
    rec.attach(*be);
    KvCache kv = be->make_cache(static_cast<int64_t>(prompt.size()) + first_n + 1, a.kv_type);
    if (!prompt.empty()) be->forward(kv, prompt, logits);
    int32_t tok = prompt.empty() ? 0 : argmax(logits.data(), static_cast<int32_t>(c.n_vocab));
    for (int j = 0; j < first_n; ++j) {
      be->forward(kv, std::span<const int32_t>(&tok, 1), logits);
      tok = argmax(logits.data(), static_cast<int32_t>(c.n_vocab));
    }
    rec.finish(be.get());
  }
  r.host = host_memory();  // before the bandwidth probe's buffers
#ifdef MOESTREAM_HAVE_CUDA
  if (r.backend == "cuda") {
    const cuda::DeviceInfo d = cuda::device_info(0);  // the backend's device (bench has no --device)
    r.vram_used = d.total_bytes - d.free_bytes;
  }
#endif
  r.bw = a.bandwidth_gbs > 0 ? a.bandwidth_gbs * 1e9 : floor_bandwidth(*be, pool, &r.bw_how);
  if (a.bandwidth_gbs > 0) r.bw_how = "given with --bandwidth";
  r.floor_tps = r.bw / mi.active;
  r.tel = be->expert_telemetry();
  if (r.tel.hybrid) r.tel.host_gbps = host_memory_gbps(pool);
  r.row = budget_row(r, mi, a.bandwidth_gbs);
  return r;
}

void write_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream f(path);
  f << text;
  if (!f) throw Error(path + ": cannot write the " + what);
}

// The flags' bounds, checked before the model is opened; each error names its flag.
void check_bench_flags(const BenchArgs& a) {
  check_bench_lists(a);  // -p, -n, -d (bench_report.h)
  if (a.reps < 1 || a.reps > 1000) throw Error("-r " + std::to_string(a.reps) + ": repetitions must be in 1..1000");
  if (a.batch < 0 || a.batch > kMaxBatch)
    throw Error("-b " + std::to_string(a.batch) + ": must be in 0.." + std::to_string(kMaxBatch) + " (0: chosen)");
  if (!(a.bandwidth_gbs >= 0) || !std::isfinite(a.bandwidth_gbs))
    throw Error("--bandwidth must be a number of GB/s >= 0 (0: measured)");
  check_threads_flag(a.threads);
  for (const std::string& b : parse_vram_list(a.vram.budget)) {
    VramSetup one = a.vram;
    one.budget = b;
    check_vram_options(one);
  }
}

int run(const BenchArgs& a, const std::vector<int>& seqs, const SpecBench& spec) {
  check_bench_flags(a);
  // The drafter file (-md) is read by draft or dflash (one of them per run).
  std::optional<DraftChoice> file_choice;
  for (const std::string& c : spec.choices) {
    const DraftChoice dc = parse_draft_choice(c);
    if (!dc.needs_file()) continue;
    if (file_choice && file_choice->kind != dc.kind)
      throw Error("--spec: draft and dflash both read -md FILE; bench one of them at a time");
    file_choice = dc;
  }
  check_draft_flags(spec.draft, file_choice ? &*file_choice : nullptr);
  spec.control.validate();
  for (int t : spec.trees) check_spec_tree_flag(t);
  if (spec.trees.empty()) throw Error("--spec-tree: give at least one node budget (0: chains)");
  if (!spec.choices.empty() && first_nonzero(a.n_gen) <= 0) throw Error("--spec needs a tg test (-n N, N > 0)");
  for (int ns : seqs)
    if (ns < 1 || ns > 4096) throw Error("--seqs " + std::to_string(ns) + ": sequences must be in 1..4096");
  if (!seqs.empty() && first_nonzero(a.n_gen) <= 0) throw Error("--seqs needs a tg test (-n N, N > 0)");
  const std::string path = model_path_or_default(a.model, a.model_given, false);
  const std::vector<std::string> budgets = parse_vram_list(a.vram.budget);
  const bool sweep = budgets.size() > 1;
  if (sweep && a.backend == "cpu")
    throw Error("--vram " + a.vram.budget + ": a list of budgets sweeps the CUDA backend's VRAM budget; the CPU "
                "backend has none (give one budget, or --backend cuda)");
  if (sweep && !cuda_built())
    throw Error("--vram " + a.vram.budget + ": a list of budgets needs the CUDA backend; this build has none");
  if (sweep && !a.record_routes.empty())
    throw Error("--record-routes takes one --vram budget (the routes are the same at every budget)");
  auto model = LoadedModel::open(path);
  for (const std::string& c : spec.choices)
    if (parse_draft_choice(c).kind == DraftChoice::Kind::Mtp && model->weights.mtp.empty())
      throw Error(path + ": " + kNoMtpBlock);
  const ModelInfo mi = model_info(path, *model);
  ThreadPool pool(a.threads, a.vram.spin_us);
  report_thread_shortfall(pool, false);
  std::vector<BudgetRun> runs;
  for (size_t i = 0; i < budgets.size(); ++i) {
    if (sweep) std::fprintf(stderr, "moestream: bench --vram %s (%zu of %zu)\n", budgets[i].c_str(), i + 1, budgets.size());
    runs.push_back(measure(a, seqs, spec, budgets[i], sweep, *model, mi, pool));
  }
  const std::string out = a.json ? bench_json(a, *model, mi, pool.size(), runs) : bench_text(a, *model, mi, runs);
  std::fputs(out.c_str(), stdout);
  if (!a.output.empty()) write_file(a.output, out, "bench results");
  if (!a.svg.empty()) {
    std::vector<BudgetRow> rows;
    for (const BudgetRun& r : runs) rows.push_back(r.row);
    write_file(a.svg, budget_svg(rows, "moestream bench: " + (mi.name.empty() ? mi.path : mi.name),
                                first_nonzero(a.n_prompt), first_nonzero(a.n_gen)),
               "chart");
  }
  return 0;
}

RegisterCommand reg("bench", [](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto seqs = std::make_shared<std::vector<int>>();
  auto spec = std::make_shared<SpecBench>();
  auto* sub = app.add_subcommand("bench", "Measure prompt (pp) and generation (tg) tokens/s, llama-bench style");
  sub->add_option("-m,--model", a->model, "GGUF model file (default: the built-in tiny model)")
      ->each([a](const std::string&) { a->model_given = true; });
  sub->add_option("-p,--n-prompt", a->n_prompt, "prompt tokens of the pp tests, a comma list (0: skip)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("-n,--n-gen", a->n_gen, "generated tokens of the tg tests, a comma list (0: skip)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("-d,--n-depth", a->n_depth,
                  "tokens of context already in the cache when each pp/tg test starts (llama-bench's -d; filling it is "
                  "not timed), a comma list")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("-r,--repetitions", a->reps, "repetitions of each test")->capture_default_str();
  sub->add_option("--backend", a->backend, backend_help())->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("-t,--threads", a->threads, "CPU threads (0: all cores)");
  sub->add_option("-b,--batch", a->batch, batch_help() + "; the CPU backend: 0 is the whole prompt");
  sub->add_option("--bandwidth", a->bandwidth_gbs, "memory bandwidth in GB/s for the floor (default: measured)");
  sub->add_flag("--json", a->json, "print JSON instead of the markdown table");
  sub->add_option("-o,--output", a->output, "also write the output to this file");
  sub->add_option("--record-routes", a->record_routes,
                  "after the timed runs, record one prompt + decode run's expert choices to FILE (routing trace)");
  sub->add_option("--seqs", *seqs,
                  "also tg of N sequences decoding together (one forward_seqs per step; t/s is the aggregate), a "
                  "comma list: 1,4,8,16 (the first -n count of tokens each)")
      ->delimiter(',');
  sub->add_option("--spec", spec->choices,
                  "also greedy generation through speculative decoding, a comma list of drafters (ngram, "
                  "mtp: the model's MTP block, draft: the -md model, dflash: the -md DFlash drafter, oracle:ALPHA: right with probability ALPHA), "
                  "each a row `tgN spec ...` beside `tgN greedy`")
      ->delimiter(',');
  add_draft_options(*sub, &spec->draft);
  sub->add_option("--draft-max", spec->control.draft_max, "with --spec: drafts per verify at most")
      ->capture_default_str();
  sub->add_flag("--spec-fixed", spec->fixed, "with --spec: always verify --draft-max drafts (no controller)");
  sub->add_option("--spec-rollback", spec->rollback, "with --spec, hybrid models: states or replay (as for run)")
      ->check(CLI::IsMember({"states", "replay"}))
      ->capture_default_str();
  sub->add_option("--spec-tree", spec->trees,
                  "with --spec: draft trees of up to N drafts (as for run), a comma list of budgets, a row each per "
                  "drafter (`tgN spec ALPHA tree16`; 0: chains, the plain `tgN spec` row)")
      ->delimiter(',');
  add_kv_type_option(*sub, &a->kv_type);
  add_vram_options(*sub, &a->vram, false);
  sub->get_option("--vram")->description(
      "VRAM budget for the CUDA backend: 8G, 8000M, full (every expert resident), or a comma list of them "
      "(1.5G,8G,full) to bench each in turn and end with a table of tokens/s per budget beside its decode floor; "
      "default: free device memory less 512 MiB")
      ->option_text("BYTES|full[,...]");
  sub->add_option("--svg", a->svg, "also write a chart of tokens/s against the --vram budget(s), with the floor, to FILE")
      ->option_text("FILE");
  return [a, seqs, spec]() -> int { return run(*a, *seqs, *spec); };
});

}  // namespace
}  // namespace ms::cli
