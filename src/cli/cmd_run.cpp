// `moestream run`: generate text from a prompt, streaming it as it is made,
// and end with a summary (prompt and decode tokens/s, peak RSS). The backend
// is CUDA where a device is found, else the CPU (--backend picks).
// Without -m it runs the built-in tiny model (random weights), so the first
// command of the README works on a fresh machine.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/model_path.h"
#include "cpu/bandwidth.h"
#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "model/rope_scaling.h"
#include "engine/route_recorder.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "cli/draft_setup.h"
#include "engine/speculative_dflash.h"
#include "engine/speculative_mtp.h"
#include "tokenizer/stream_decoder.h"
#include "util/bytes.h"
#include "util/error.h"

namespace ms::cli {
namespace {

struct RunArgs {
  std::string model, prompt = "Once upon a time";
  std::string backend;  // --backend: "", cpu, cuda
  VramSetup vram;       // --vram and the tiered-expert options
  int n_predict = 64;
  bool chat = false;
  int threads = 0;
  int64_t ctx = 0;
  int batch = 0;  // 0: chosen (batch_help)
  int prompt_tokens = 0;  // > 0: a synthetic prompt of exactly this many tokens (benchmarks)
  bool ignore_eos = false;
  bool routing_stats = false;
  std::string record_routes;   // --record-routes FILE: routing trace (docs/traces.md)
  bool record_predictions = false;
  bool quiet = false;
  bool bench = false;
  bool no_mmap = false;
  int reps = 3;
  bool model_given = false;  // -m appeared (so `-m ""` is an error, not the tiny model)
  std::string chat_template;  // --chat-template: a built-in format instead of the file's
  KvType kv_type = KvType::F16;
  SamplerParams sp;
  // --spec (docs/speculative.md), its controller and draft model flags (cli/draft_setup.h)
  SpecFlags specf;
  std::string spec_rollback = "states";  // --spec-rollback states|replay
  int spec_tree = 0;  // --spec-tree N: draft trees of N nodes (0: chains)
};

uint64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

// Per layer: share of the most popular expert, and the fitted Zipf exponent
// (slope of log share vs log rank over the experts that were chosen).
void print_routing_stats(const CpuBackend& be) {
  const ModelConfig& c = be.config();
  if (!c.is_moe()) return;
  std::fprintf(stderr, "routing: layer  top1-share  top8-share  zipf-fit  used-experts\n");
  double slope_sum = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    std::vector<double> n(be.expert_counts().begin() + static_cast<int64_t>(il) * c.n_expert,
                          be.expert_counts().begin() + static_cast<int64_t>(il + 1) * c.n_expert);
    std::sort(n.rbegin(), n.rend());
    const double total = std::accumulate(n.begin(), n.end(), 0.0);
    if (total == 0) continue;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int m = 0;
    for (size_t r = 0; r < n.size(); ++r)
      if (n[r] > 0) {
        const double x = std::log(r + 1.0), y = std::log(n[r] / total);
        sx += x, sy += y, sxx += x * x, sxy += x * y, ++m;
      }
    const double slope = m > 1 ? (m * sxy - sx * sy) / (m * sxx - sx * sx) : 0;
    slope_sum += -slope;
    double top8 = 0;
    for (size_t r = 0; r < std::min<size_t>(8, n.size()); ++r) top8 += n[r];
    std::fprintf(stderr, "routing: %5d  %9.3f  %10.3f  %8.2f  %d/%d\n", il, n[0] / total, top8 / total, -slope, m,
                 c.n_expert);
  }
  std::fprintf(stderr, "routing: mean zipf-fit exponent %.2f\n", slope_sum / c.n_layer);
}

// "12.34 tok/s", or "n/a" where nothing was timed (-n 0, or one token: the
// first comes out of the prompt pass, so decode has none to count).
std::string rate_text(int tokens, double seconds) {
  if (tokens <= 0 || !(seconds > 0)) return "n/a";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f tok/s", tokens / seconds);
  return buf;
}

// At most this many --bench repetitions (-n and --prompt-tokens are bounded
// by kMaxCtx): beyond them a run only seems to hang.
constexpr int kMaxReps = 1000;

// Checks the run's own numbers (the sampling and size flags are checked as
// the server checks them). Throws ms::Error naming the flag.
void check_run_flags(const RunArgs& r) {
  r.sp.validate();
  GenerateParams gp;
  gp.n_predict = r.n_predict;
  gp.validate();
  if (r.n_predict > kMaxCtx)
    throw Error("-n " + std::to_string(r.n_predict) + ": at most " + std::to_string(kMaxCtx) + " tokens");
  check_size_flags(r.ctx, r.threads, r.batch);
  if (r.prompt_tokens < 0 || r.prompt_tokens > kMaxCtx)
    throw Error("--prompt-tokens " + std::to_string(r.prompt_tokens) + ": must be in 0.." + std::to_string(kMaxCtx) +
                " (0: the -p text)");
  if (r.reps < 1 || r.reps > kMaxReps)
    throw Error("--reps " + std::to_string(r.reps) + ": must be in 1.." + std::to_string(kMaxReps));
  if (r.sp.repeat_last_n > kMaxCtx)
    throw Error("--repeat-last-n " + std::to_string(r.sp.repeat_last_n) + ": at most " + std::to_string(kMaxCtx));
  check_vram_options(r.vram);
  check_spec_tree_flag(r.spec_tree);
  if (check_spec_flags(r.specf, "--draft-max, --draft-min, --spec-fixed, --spec-rollback and --spec-tree") && r.bench)
    throw Error("--spec with --bench: `moestream bench --spec` measures speculative decoding");
}

// The KV cache of `ctx` tokens must fit this machine's RAM: a context grown
// from a huge -n or --ctx would otherwise be allocated (and zeroed) until the
// kernel kills the process. (Recurrent layers keep no K/V: an upper bound.)
void check_kv_fits(const ModelConfig& c, int64_t ctx, KvType type) {
  check_kv_head_dim(type, c.head_dim);
  const double bytes = 2.0 * c.n_layer * c.n_head_kv * static_cast<double>(kv_row_bytes(type, c.head_dim)) *
                       static_cast<double>(ctx);
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (ram > 0 && bytes > ram)
    throw Error("the KV cache for " + std::to_string(ctx) + " tokens would take " +
                format_bytes(static_cast<uint64_t>(bytes)) + ", more than this machine's RAM (" +
                format_bytes(static_cast<uint64_t>(ram)) + "); use a smaller --ctx or -n");
}

std::vector<int32_t> synthetic_prompt(int n, int32_t n_vocab) {
  // A fixed pseudo-random prompt: the same ids for every run and model size.
  std::vector<int32_t> ids;
  uint64_t s = 12345;
  const int32_t n_text = n_vocab > 3 ? n_vocab - 3 : n_vocab;
  for (int i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(n_text)));
  }
  return ids;
}

// llama-bench style: prompt processing of N tokens (ppN) and generation of M
// tokens from an empty context (tgM), each the mean of `reps` runs, beside
// the floor: active bytes per token / measured read bandwidth.
int run_bench(const RunArgs& r, const std::string& path) {
  auto model = LoadedModel::open(path, r.no_mmap);
  const ModelWeights& w = model->weights;
  ThreadPool pool(r.threads, r.vram.spin_us);
  report_thread_shortfall(pool, r.quiet);
  CpuBackend::Options bo;
  if (r.batch > 0) bo.max_batch = r.batch;
  CpuBackend be(w, pool, bo);
  const int pp = r.prompt_tokens > 0 ? r.prompt_tokens : 128;
  const int tg = r.n_predict > 0 ? r.n_predict : 64;
  check_kv_fits(w.cfg, pp + tg + 1, r.kv_type);
  const int reps = std::max(1, r.reps);
  const std::vector<int32_t> prompt = synthetic_prompt(pp, model->tokenizer->n_tokens());
  std::vector<float> logits;
  using clock = std::chrono::steady_clock;
  {  // warm-up: pages in the weights, spins up the pool
    KvCache kv = be.make_cache(pp + tg + 1, r.kv_type);
    be.forward(kv, prompt, logits);
  }
  double pp_s = 0, tg_s = 0;
  for (int i = 0; i < reps; ++i) {
    KvCache kv = be.make_cache(pp + 1, r.kv_type);
    const auto t0 = clock::now();
    be.forward(kv, prompt, logits);
    pp_s += std::chrono::duration<double>(clock::now() - t0).count();
  }
  for (int i = 0; i < reps; ++i) {
    KvCache kv = be.make_cache(tg + 1, r.kv_type);
    int32_t tok = prompt[0];
    const auto t0 = clock::now();
    for (int j = 0; j < tg; ++j) {
      be.forward(kv, std::span<const int32_t>(&tok, 1), logits);
      tok = argmax(logits.data(), static_cast<int32_t>(w.cfg.n_vocab));
    }
    tg_s += std::chrono::duration<double>(clock::now() - t0).count();
  }
  const double pp_tps = pp * reps / pp_s, tg_tps = tg * reps / tg_s;
  const double bw = measure_read_bandwidth(pool);
  const double active = static_cast<double>(w.active_bytes_per_token());
  const double floor_tps = bw / active;
  std::printf("| model | file | threads | test | tok/s | floor tok/s | of floor |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  const std::string name = w.cfg.describe();
  const std::string size = format_bytes(model->file->file_size());
  std::printf("| %s | %s | %d | pp%d | %.2f | | |\n", name.c_str(), size.c_str(), pool.size(), pp, pp_tps);
  std::printf("| %s | %s | %d | tg%d | %.2f | %.2f | %.0f%% |\n", name.c_str(), size.c_str(), pool.size(), tg, tg_tps,
              floor_tps, 100.0 * tg_tps / floor_tps);
  std::printf("\nactive bytes per token: %s; read bandwidth: %.1f GB/s (%d threads); peak RSS %s\n",
              format_bytes(static_cast<uint64_t>(active)).c_str(), bw / 1e9, pool.size(),
              format_bytes(peak_rss_bytes()).c_str());
  return 0;
}

RegisterCommand reg("run", [](CLI::App& app) {
  auto* sub = app.add_subcommand(
      "run", "Generate text from a prompt, on the GPU where one is found, else the CPU (no -m: the built-in tiny model)");
  auto a = std::make_shared<RunArgs>();
  a->sp.seed = 1;
  sub->add_option("-m,--model", a->model, "GGUF model file (default: the built-in tiny model)")
      ->each([a](const std::string&) { a->model_given = true; });
  sub->add_option("-p,--prompt", a->prompt, "prompt text")->capture_default_str();
  sub->add_option("-n,--n-predict", a->n_predict, "tokens to generate (-1: until end of text)")->capture_default_str();
  sub->add_flag("--chat", a->chat,
                "wrap the prompt in the model's chat template (one user turn), as `serve` renders it");
  sub->add_option("--chat-template", a->chat_template,
                  "with --chat: a built-in chat format instead of the model's Jinja template (chatml, llama3, ...)");
  sub->add_option("-t,--threads", a->threads,
                  "CPU threads (0: all cores; at most " + std::to_string(kMaxThreadsPerCore) + " per core)");
  sub->add_option("--backend", a->backend, backend_help())->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("-c,--ctx", a->ctx, "context size in tokens (0: the model's trained context where memory allows, else the largest that fits)");
  sub->add_option("-b,--batch", a->batch, batch_help())->capture_default_str();
  sub->add_option("--prompt-tokens", a->prompt_tokens, "benchmark: use a synthetic prompt of exactly N tokens");
  sub->add_flag("--ignore-eos", a->ignore_eos, "do not stop at end-of-text tokens (benchmarks)");
  sub->add_flag("--routing-stats", a->routing_stats, "print per-layer expert popularity at the end");
  sub->add_option("--record-routes", a->record_routes,
                  "write every token's expert choices to FILE (a routing trace for `moestream sim`/`trace stats`)");
  sub->add_flag("--record-predictions", a->record_predictions,
                "with --record-routes: also store router L+1's top-k on layer L's state (next-layer prediction)");
  sub->add_flag("-q,--quiet", a->quiet, "print only the generated text");
  sub->add_flag("--bench", a->bench,
                "benchmark on the CPU backend: pp (--prompt-tokens, default 128) and tg (-n, default 64) tok/s "
                "beside the bandwidth floor, as a markdown table (`moestream bench` measures either backend)");
  sub->add_flag("--no-mmap", a->no_mmap,
                "copy the weights into RAM (huge pages where available) instead of reading the file mapping");
  sub->add_option("--reps", a->reps, "benchmark repetitions")->capture_default_str();
  add_kv_type_option(*sub, &a->kv_type);
  add_vram_options(*sub, &a->vram, true);
  sub->add_option("--temp", a->sp.temperature, "temperature (0: greedy)")->capture_default_str();
  sub->add_option("--top-k", a->sp.top_k, "top-k (0: off)")->capture_default_str();
  sub->add_option("--top-p", a->sp.top_p, "top-p (1: off)")->capture_default_str();
  sub->add_option("--min-p", a->sp.min_p, "min-p (0: off)")->capture_default_str();
  sub->add_option("--repeat-penalty", a->sp.repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  sub->add_option("--repeat-last-n", a->sp.repeat_last_n, "tokens the penalty looks back")->capture_default_str();
  sub->add_option("--seed", a->sp.seed, "sampling seed")->capture_default_str();
  add_spec_options(*sub, &a->specf,
                   "speculative decoding (docs/speculative.md): ngram (drafts from earlier text of the prompt and "
                   "output), mtp (the model's own MTP block: Qwen3.5/3.6 files that carry it), draft (a draft "
                   "model, -md FILE), dflash (a DFlash block drafter, -md FILE; CPU backend) or oracle:ALPHA (benchmarks: a plain run first, then its own tokens drafted "
                   "right with probability ALPHA); the output is plain decoding's (greedy: the same tokens; sampled: "
                   "the same distribution)");
  auto mark = [a](const std::string&) { a->specf.control_given = true; };
  sub->add_option("--spec-rollback", a->spec_rollback,
                  "with --spec, hybrid models: states (keep each verified token's recurrent state) or replay (run "
                  "the kept tokens again from a checkpoint after a rejection)")
      ->check(CLI::IsMember({"states", "replay"}))
      ->capture_default_str()
      ->each(mark);
  sub->add_option("--spec-tree", a->spec_tree,
                  "with --spec draft|dflash|oracle:ALPHA: verify a tree of up to N drafts (best-first from the "
                  "drafter's top candidates per position, --draft-max deep) instead of a chain; 0: chains. "
                  "CPU backend; elsewhere chains")
      ->capture_default_str()
      ->each(mark);
  return [a]() -> int {
    RunArgs& r = *a;
    // The same checks the server applies to a request's values, and bounds.
    check_run_flags(r);
    if (!r.chat_template.empty() && !r.chat) throw Error("--chat-template applies with --chat");
    const std::string path = model_path_or_default(r.model, r.model_given, r.quiet);
    if (r.bench) return run_bench(r, path);
    auto model = LoadedModel::open(path, r.no_mmap);
    const ModelConfig& c = model->weights.cfg;
    if (r.specf.spec == "mtp" && model->weights.mtp.empty()) throw Error(path + ": " + kNoMtpBlock);
    ThreadPool pool(r.threads, r.vram.spin_us);
    report_thread_shortfall(pool, r.quiet);
    const Tokenizer& tok = *model->tokenizer;

    std::vector<int32_t> prompt;
    if (r.prompt_tokens > 0) {
      prompt = synthetic_prompt(r.prompt_tokens, tok.n_tokens());
    } else {
      std::string text = r.prompt;
      if (r.chat) text = chat_prompt(tok, r.prompt, r.chat_template);
      prompt = tok.encode(text, true, true);
      if (prompt.empty()) throw Error("the prompt is empty after tokenization; give some text with -p");
    }
    BackendSetup bs;
    bs.requested = r.backend;
    bs.quiet = r.quiet;
    bs.kv_type = r.kv_type;
    bs.vram = r.vram;
    // --ctx 0: the model's context where memory allows (and at least the
    // prompt plus -n; with a bounded -n at a tiered budget, just that);
    // an explicit --ctx that does not fit is an error.
    const int64_t needed = static_cast<int64_t>(prompt.size()) + std::max(r.n_predict, 0);
    const int64_t ctx = plan_context(bs, model->weights, r.ctx, needed, 1, r.n_predict >= 0).ctx;
    if (static_cast<int64_t>(prompt.size()) > ctx)
      throw Error("context full (" + std::to_string(ctx) + " tokens): the prompt has " + std::to_string(prompt.size()) +
                  " tokens; use a larger --ctx or a shorter prompt");
    check_kv_fits(c, ctx, r.kv_type);
    // A batch longer than the context is never filled (the scratch is sized for it).
    bs.max_batch = static_cast<int>(std::min<int64_t>(r.batch, ctx));
    const std::unique_ptr<Backend> be = make_backend(bs, model->weights, pool);
    // --spec oracle:ALPHA is given the model's own continuation: a plain run
    // first, with the same sampler and seed (so exactly what speculation
    // will emit), in a cache of its own that is gone before the real one.
    std::unique_ptr<Drafter> drafter;
    OpenDraft draft;  // --spec draft: the model, its backend and the drafter
    OpenDFlash dflash;  // --spec dflash: the drafter's file and weights
    Drafter* active_drafter = nullptr;
    const DraftChoice choice = r.specf.spec.empty() ? DraftChoice{} : parse_draft_choice(r.specf.spec);
    if (!r.specf.spec.empty()) {
      if (choice.kind == DraftChoice::Kind::Ngram) {
        drafter = std::make_unique<NgramDrafter>();
      } else if (choice.kind == DraftChoice::Kind::Model) {
        draft = open_draft(r.specf.draft, *model, be->name(), pool, ctx, r.sp, r.quiet);
      } else if (choice.kind == DraftChoice::Kind::Mtp) {
        // Made with the sequence's cache below: it watches that cache's forwards.
      } else if (choice.kind == DraftChoice::Kind::DFlash) {
        dflash = open_dflash(r.specf.draft, *model, r.quiet);  // the drafter too is made with the cache
      } else {
        std::vector<int32_t> reference;
        {
          KvCache ref_kv = be->make_cache(ctx, r.kv_type);
          Sampler ref_sampler(r.sp);
          GenerateParams ref_gp;
          ref_gp.n_predict = r.n_predict;
          ref_gp.stop_at_eog = !r.ignore_eos;
          generate(*be, ref_kv, ref_sampler, &tok, prompt, ref_gp, [&](int32_t id) {
            reference.push_back(id);
            return true;
          });
        }
        if (!r.quiet)
          std::fprintf(stderr, "moestream: %s: the reference is a plain run of %zu tokens\n", r.specf.spec.c_str(),
                       reference.size());
        drafter = std::make_unique<OracleDrafter>(std::move(reference), prompt.size(), choice.alpha, c.n_vocab,
                                                  r.sp.seed);
      }
    }
    KvCache kv = be->make_cache(ctx, r.kv_type);
    if (!r.specf.spec.empty() && choice.kind == DraftChoice::Kind::Mtp) drafter = std::make_unique<MtpDrafter>(*be, kv, r.kv_type);
    if (!r.specf.spec.empty() && choice.kind == DraftChoice::Kind::DFlash)
      drafter = std::make_unique<DFlashDrafter>(*be, kv, *dflash.weights, model->weights, pool);
    active_drafter = draft.drafter ? draft.drafter.get() : drafter.get();
    Sampler sampler(r.sp);
    if (!r.quiet)
      std::fprintf(stderr, "moestream: %s | %s: %s | ctx %lld%s | %s\n", c.describe().c_str(), be->name().c_str(),
                   backend_device(*be, pool).c_str(), static_cast<long long>(ctx),
                   r.kv_type == KvType::F16 ? "" : (std::string(" (kv ") + kv_type_name(r.kv_type) + ")").c_str(),
                   r.sp.describe().c_str());
    if (!r.quiet) std::fprintf(stderr, "moestream: %s\n", context_cost_line(model->weights, r.kv_type, ctx, 1).c_str());
    if (!r.quiet && !c.rope_scaling.is_identity())
      std::fprintf(stderr, "moestream: RoPE scaling %s\n", describe_rope_scaling(c.rope_scaling).c_str());

    // --chat with a gpt-oss (harmony) model: answer, reasoning and tool calls apart.
    ReplyDecoder dec(tok, r.chat);
    if (!r.quiet && r.prompt_tokens <= 0 && !r.chat) {
      std::fputs(r.prompt.c_str(), stdout);
      std::fflush(stdout);
    }
    GenerateParams gp;
    gp.n_predict = r.n_predict;
    gp.stop_at_eog = !r.ignore_eos;
    gp.spec.drafter = active_drafter;
    gp.spec.control = r.specf.controller();
    gp.spec.rollback =
        r.spec_rollback == "replay" ? SpecDecoding::Rollback::Replay : SpecDecoding::Rollback::TokenStates;
    gp.spec.tree_budget = r.spec_tree;
    if (active_drafter && r.spec_tree > 0 && !r.quiet) {
      const std::string why = spec_tree_refusal(*be, kv, *active_drafter);
      if (!why.empty()) std::fprintf(stderr, "moestream: --spec-tree: drafts verified as chains: %s\n", why.c_str());
    }
    std::unique_ptr<RouteRecorder> recorder;
    if (!r.record_routes.empty()) {
      RouteRecorder::Options ro;
      ro.predictions = r.record_predictions;
      recorder = std::make_unique<RouteRecorder>(r.record_routes, model->weights,
                                                 static_cast<uint32_t>(prompt.size()), ro);
      recorder->attach(*be);
    }
    GenerateStats st = generate(*be, kv, sampler, &tok, prompt, gp, [&](int32_t id) {
      if (gp.stop_at_eog && tok.is_eog(id)) return true;
      print_reply(dec.push(id), r.quiet);
      return true;
    });
    print_reply(dec.flush(), r.quiet);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (!r.quiet) {
      std::fprintf(stderr,
                   "\nmoestream: prompt %d tokens in %.3f s (%s) | decode %d tokens in %.3f s (%s) | "
                   "stop: %s | peak RSS %s\n",
                   st.n_prompt, st.prompt_seconds, rate_text(st.n_prompt, st.prompt_seconds).c_str(), st.n_generated,
                   st.decode_seconds, rate_text(st.n_generated - 1, st.decode_seconds).c_str(),
                   st.stop_reason.c_str(), format_bytes(peak_rss_bytes()).c_str());
      if (active_drafter)
        std::fprintf(stderr, "moestream: spec %s (K <= %d%s%s) | %s | decode %s\n", active_drafter->name().c_str(),
                     r.specf.control.draft_max, r.specf.fixed ? ", fixed" : "",
                     r.spec_tree > 0 ? (", tree " + std::to_string(r.spec_tree)).c_str() : "", st.spec.describe().c_str(),
                     rate_text(st.n_generated - 1, st.decode_seconds).c_str());
      if (st.stop_reason.rfind("context full", 0) == 0)
        std::fprintf(stderr, "moestream: stopped: %s; use a larger --ctx\n", st.stop_reason.c_str());
      std::fputs(be->expert_telemetry().summary().c_str(), stderr);
    }
    if (recorder) {
      recorder->finish(be.get());
      if (!r.quiet)
        std::fprintf(stderr, "moestream: wrote %llu routing records (%u forward passes) to %s\n",
                     static_cast<unsigned long long>(recorder->records_written()), recorder->steps(),
                     r.record_routes.c_str());
    }
    if (r.routing_stats) {
      if (const auto* cpu = dynamic_cast<const CpuBackend*>(be.get()))
        print_routing_stats(*cpu);
      else
        std::fprintf(stderr, "moestream: --routing-stats is counted by the CPU backend only (use --backend cpu)\n");
    }
    return 0;
  };
});

}  // namespace
}  // namespace ms::cli
