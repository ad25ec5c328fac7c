// `moestream serve`: an OpenAI-compatible HTTP server (src/server) over one
// engine. Without -m it serves the built-in tiny model. Stops cleanly on
// SIGINT/SIGTERM: open requests end, the port is released, no thread is left;
// what has not ended after a grace period (a long prompt chunk, a template
// render) is abandoned, and a second signal exits at once.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/draft_setup.h"
#include "cpu/thread_pool.h"
#include "cli/model_path.h"
#include "engine/loaded_model.h"
#include "server/chat.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/spec_drafters.h"
#include "util/error.h"

namespace ms::cli {
namespace {

struct ServeArgs {
  std::string model;
  bool model_given = false;  // -m appeared (so `-m ""` is an error, not the tiny model)
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string backend;
  std::string chat_template;
  std::string model_name;
  VramSetup vram;  // --vram and the tiered-expert options (CUDA backend)
  int64_t ctx = 0;
  int64_t ctx_per_request = 0;
  int parallel = 1;
  int threads = 0;
  int batch = 0;  // 0: chosen (batch_help)
  int64_t max_body = 8 << 20;  // signed: "--max-body -1" must be an error, not 2^64-1
  KvType kv_type = KvType::F16;
  bool quiet = false;
  int64_t max_connections = 1024;
  int64_t max_requests = 128;
  int read_timeout = 10;
  std::vector<std::string> cors_origins;
  SpecFlags specf;  // --spec and its controller flags (shared with `run`: cli/draft_setup.h)
};

// The least context per slot that --ctx 0 accepts for --parallel > 1 slots
// (or the model's, if smaller): below it the error says how many slots fit.
constexpr int64_t kMinAutoSlotCtx = 512;

// Seconds open requests get to end after SIGINT/SIGTERM before the process
// exits without them.
constexpr int kShutdownGraceSeconds = 5;

// The default prompt tokens per serve step on an all-resident backend, whose
// own passes are longer (prompt throughput alone): a step's prompt work, which
// every decoding stream waits for, stays a fraction of a second.
constexpr int kServePromptChunk = 2048;

// The most --parallel slots: each is decoded in every step, so past some
// dozens per core a slot's tokens come too slowly to be worth having (and
// each holds a KV cache).
int max_parallel() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::clamp<unsigned>(32 * cores, 64, 512));
}

RegisterCommand reg("serve", [](CLI::App& app) {
  auto* sub = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics");
  auto a = std::make_shared<ServeArgs>();
  sub->add_option("-m,--model", a->model, "GGUF model file (default: the built-in tiny model)")
      ->each([a](const std::string&) { a->model_given = true; });
  sub->add_option("--host", a->host, "address to listen on (0.0.0.0: every interface)")->capture_default_str();
  sub->add_option("--port", a->port, "TCP port (0: a free one, printed at start)")->capture_default_str();
  sub->add_option("--api-key", a->api_key,
                  "require 'Authorization: Bearer KEY' on every route but /health (default: $MOESTREAM_API_KEY, "
                  "else none)");
  sub->add_option("-c,--ctx", a->ctx,
                  "KV cache tokens: on the CPU backend shared by all slots (pages; 0: the model's trained context "
                  "where it fits, else the largest that does); on the CUDA backend per slot, as before");
  sub->add_option("--ctx-per-request", a->ctx_per_request,
                  "CPU backend: the most tokens one request may hold, prompt and answer (0: all of --ctx)")
      ->capture_default_str();
  sub->add_option("--parallel", a->parallel,
                  "request slots, decoded together in one forward pass with prompt chunks beside them (each has "
                  "its own KV cache, counted by the --ctx / --vram planning; both backends)")
      ->capture_default_str();
  sub->add_option("-t,--threads", a->threads, "CPU threads (0: all cores)");
  sub->add_option("-b,--batch", a->batch, batch_help())->capture_default_str();
  sub->add_option("--backend", a->backend, backend_help())->check(CLI::IsMember({"cpu", "cuda"}));
  add_kv_type_option(*sub, &a->kv_type);
  add_vram_options(*sub, &a->vram, true);
  sub->add_option("--chat-template", a->chat_template,
                  "a built-in chat format instead of the model's Jinja template (chatml, llama3, mistral-v3, ...)");
  sub->add_option("--model-name", a->model_name, "the model id /v1/models lists (default: the file's name)");
  sub->add_option("--max-body", a->max_body, "request body limit in bytes")->capture_default_str();
  sub->add_option("--max-connections", a->max_connections,
                  "connections held open at once (idle or slow ones cost memory, not threads); more get 503 at "
                  "once (/health and /metrics are still answered)")
      ->capture_default_str();
  sub->add_option("--max-requests", a->max_requests,
                  "generation requests answered at once (one thread each, queued or running); more get 503 at once")
      ->capture_default_str();
  sub->add_option("--read-timeout", a->read_timeout,
                  "seconds a request's headers and body may take to arrive (slower clients are cut off)")
      ->capture_default_str();
  sub->add_option("--cors-origin", a->cors_origins,
                  "allow browser requests from this origin (repeatable; * for any): answers CORS preflight and "
                  "sets Access-Control-Allow-Origin (default: no CORS)");
  add_spec_options(*sub, &a->specf,
                   "speculative decoding in every slot (docs/speculative.md): ngram (drafts from earlier text of "
                   "the prompt and output), mtp (the model's own MTP block: Qwen3.5/3.6 files that carry it) or "
                   "oracle:ALPHA (benchmarks: a plain run of each request first, then its own tokens drafted right "
                   "with probability ALPHA), draft (a smaller model of the same vocabulary, -md FILE) or dflash (a "
                   "DFlash block drafter, -md FILE; CPU backend); greedy and seeded answers are plain decoding's "
                   "(a sampling draft model's: its distribution)");
  sub->add_flag("-q,--quiet", a->quiet, "no start-up lines and no access log");
  return [a]() -> int {
    ServeArgs& r = *a;
    if (r.parallel < 1) throw Error("--parallel must be >= 1");
    if (r.parallel > max_parallel())
      throw Error("--parallel " + std::to_string(r.parallel) + " is more than this machine's maximum of " +
                  std::to_string(max_parallel()) + " slots (32 per core, at least 64, at most 512)");
    if (r.max_connections < 1 || r.max_connections > static_cast<int64_t>(server::kMaxConnectionsLimit))
      throw Error("--max-connections must be in 1.." + std::to_string(server::kMaxConnectionsLimit) + ", got " +
                  std::to_string(r.max_connections));
    if (r.max_requests < 1 || r.max_requests > static_cast<int64_t>(server::kMaxRequestsLimit))
      throw Error("--max-requests must be in 1.." + std::to_string(server::kMaxRequestsLimit) + ", got " +
                  std::to_string(r.max_requests));
    if (r.read_timeout < 1 || r.read_timeout > 3600)
      throw Error("--read-timeout must be in 1..3600 seconds, got " + std::to_string(r.read_timeout));
    for (const std::string& o : r.cors_origins)
      if (o.empty() || o.find_first_of(" \t\r\n,") != std::string::npos)
        throw Error("--cors-origin '" + o + "': give one origin per flag, e.g. https://example.com, or *");
    check_size_flags(r.ctx, r.threads, r.batch);
    const std::optional<DraftChoice> spec = check_spec_flags(r.specf, "--draft-max, --draft-min and --spec-fixed");
    if (r.port < 0 || r.port > 65535) throw Error("--port must be in 0..65535");
    if (r.max_body < 1) throw Error("--max-body must be at least 1 byte, got " + std::to_string(r.max_body));
    // Before the model is opened: a typo in the budget is reported at once.
    bool vram_full = false;
    check_vram_devices(r.vram);
    parse_vram(r.vram.budget, &vram_full);
    if (r.api_key.empty())
      if (const char* k = std::getenv("MOESTREAM_API_KEY")) r.api_key = k;

    // SIGINT/SIGTERM go to one thread that shuts down (blocked here, before
    // any thread exists, so every later thread inherits the mask); a client
    // that vanishes must not kill the process with SIGPIPE.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    const std::string path = model_path_or_default(r.model, r.model_given, r.quiet);
    auto model = LoadedModel::open(path);
    const ModelConfig& c = model->weights.cfg;
    if (spec && spec->kind == DraftChoice::Kind::Mtp && model->weights.mtp.empty())
      throw Error(path + ": " + kNoMtpBlock);
    ThreadPool pool(r.threads, r.vram.spin_us);
    BackendSetup bs;
    bs.requested = r.backend;
    bs.max_batch = r.batch;
    bs.quiet = r.quiet;
    bs.kv_type = r.kv_type;
    bs.vram = r.vram;
    // The CPU backend pages its KV (Backend::paged_kv): --ctx is one pool all
    // slots share, planned as one context. The CUDA backend (until its
    // kernels read pages) reserves --ctx per slot: --ctx 0 is the model's
    // context where the --parallel slots' KV caches fit beside the weights.
    const bool shared_kv = !will_use_cuda(bs);
    bs.n_seq = r.parallel;
    const int64_t ctx = plan_context(bs, model->weights, r.ctx, 0, shared_kv ? 1 : r.parallel).ctx;
    if (!shared_kv && r.ctx == 0 && r.parallel > 1) {
      // The slots' caches left so little context per slot that --parallel is
      // the problem: the explicit check's error names how many slots fit.
      const int64_t floor = std::min<int64_t>(kMinAutoSlotCtx, std::max<int64_t>(c.n_ctx_train, 2));
      if (ctx < floor) {
        BackendSetup probe = bs;
        probe.quiet = true;
        plan_context(probe, model->weights, floor, 0, r.parallel);
      }
    }
    const std::unique_ptr<Backend> be = make_backend(bs, model->weights, pool);
    server::Metrics metrics;
    server::ChatRenderer chat(*model->tokenizer, r.chat_template);
    server::Scheduler::Options so;
    so.parallel = r.parallel;  // the scheduler caps it at be->max_sequences() (CUDA: n_seq, = --parallel)
    so.ctx = ctx;
    so.ctx_per_request = r.ctx_per_request;
    so.kv_type = r.kv_type;
    // A step's prompt chunk also bounds how long the other streams wait for
    // their next token. An all-resident backend's pass is long for prompt
    // throughput alone (experts/pass_size.h), so serve keeps its chunks to
    // kServePromptChunk there; a tiered pass keeps its size (each pass
    // streams the cold experts once).
    so.prefill_chunk = r.batch > 0 ? r.batch : backend_max_batch(*be);
    if (r.batch == 0 && !be->expert_telemetry().hybrid) so.prefill_chunk = std::min(so.prefill_chunk, kServePromptChunk);
    so.max_kv_bytes = available_ram() / 10 * 9;  // the slots' KV caches must fit in memory
    // The drafter files (-md), kept as long as the scheduler.
    OpenDraft draft;
    OpenDFlash dflash;
    if (spec) {
      so.spec.control = r.specf.controller();
      switch (spec->kind) {
        case DraftChoice::Kind::Ngram: so.spec.make_drafter = server::ngram_drafters(); break;
        case DraftChoice::Kind::Mtp: so.spec.make_drafter = server::mtp_drafters(*be, r.kv_type); break;
        case DraftChoice::Kind::Oracle:
          so.spec.make_drafter = server::oracle_drafters(*be, *model->tokenizer, ctx, r.kv_type, spec->alpha);
          break;
        case DraftChoice::Kind::Model: {
          // One draft cache per slot: a device draft holds --parallel
          // sequence states; a paged (CPU) one a pool sized as the model's,
          // with room for each slot's drafts.
          const int64_t slot_ctx = shared_kv && r.ctx_per_request > 0 ? r.ctx_per_request : ctx;
          draft = open_draft_model(r.specf.draft, *model, be->name(), pool, slot_ctx, r.parallel, r.quiet);
          const int64_t pool_tokens =
              ctx + int64_t{r.parallel} * (r.specf.control.draft_max + 2 * so.kv_page_tokens);
          so.spec.make_drafter = server::model_drafters(*draft.backend, r.specf.draft.p_min, pool_tokens);
          break;
        }
        case DraftChoice::Kind::DFlash:
          // The drafter reads layer inputs (Backend::set_hidden_layers): the CPU backend's only.
          if (be->name() != "cpu")
            throw Error("serve --spec dflash: the DFlash drafter runs with the CPU backend only (it reads the "
                        "model's layer inputs, which the " + be->name() +
                        " backend does not hand out; docs/speculative.md); use --backend cpu, or --spec mtp|draft|ngram");
          dflash = open_dflash(r.specf.draft, *model, r.quiet);
          so.spec.make_drafter = server::dflash_drafters(*be, *dflash.weights, model->weights, pool, KvType::F16);
          break;
      }
    }
    server::Scheduler sched(*be, *model->tokenizer, so, &metrics);
    const int parallel = sched.parallel();  // --parallel, or the backend's max_sequences() if fewer
    const std::string capped =
        parallel < r.parallel ? " (--parallel " + std::to_string(r.parallel) + " capped: the " + be->name() +
                                    " backend holds " + std::to_string(parallel) + (parallel == 1 ? " sequence)" : " sequences)")
                              : "";
    server::HttpOptions ho;
    ho.host = r.host;
    ho.port = r.port;
    ho.api_key = r.api_key;
    ho.max_body = static_cast<size_t>(r.max_body);
    ho.model_name = r.model_name.empty() ? std::filesystem::path(path).stem().string() : r.model_name;
    ho.max_connections = static_cast<size_t>(r.max_connections);
    ho.max_requests = static_cast<size_t>(r.max_requests);
    ho.request_timeout_s = r.read_timeout;
    ho.cors_origins = r.cors_origins;
    ho.access_log = !r.quiet;
    server::HttpServer http(sched, *model->tokenizer, chat, metrics, ho);
    const int port = http.bind();
    if (!r.quiet)
      std::fprintf(stderr, "moestream: %s\n",
                   context_cost_line(model->weights, r.kv_type, ctx, sched.kv_pages() ? 1 : parallel).c_str());
    if (!r.quiet)
      std::fprintf(stderr, "moestream: %s | %s: %s | ctx %lld %s %d slots%s | chat template: %s%s\n",
                   c.describe().c_str(), be->name().c_str(), backend_device(*be, pool).c_str(),
                   static_cast<long long>(ctx), sched.kv_pages() ? "shared by" : "x", parallel, capped.c_str(),
                   chat.description().c_str(),
                   r.api_key.empty() ? "" : " | API key required");
    if (!r.quiet && spec)
      std::fprintf(stderr, "moestream: speculative decoding: %s (K <= %d%s) in every slot\n",
                   spec->describe().c_str(), r.specf.control.draft_max, r.specf.fixed ? ", fixed" : "");
    // The line tests and scripts wait for (stable format).
    std::fprintf(stderr, "moestream: listening on http://%s:%d\n", r.host.c_str(), port);
    std::fflush(stderr);

    std::atomic<bool> done{false};
    std::thread sig_thread([&, stop_signals] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      if (done) return;  // woken by the main thread after listen() ended on its own
      if (!r.quiet) std::fprintf(stderr, "moestream: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      // What follows waits for open requests; whatever has not ended after the
      // grace period (or at a second signal) is abandoned.
      const bool quiet = r.quiet;
      std::thread([stop_signals, quiet] {
        const timespec grace{kShutdownGraceSeconds, 0};
        siginfo_t info;
        const bool again = sigtimedwait(&stop_signals, &info, &grace) > 0;
        if (!quiet)
          std::fprintf(stderr, "moestream: %s; exiting without the requests still open\n",
                       again ? "a second signal" : "open requests did not end in time");
        std::fflush(stderr);
        std::_Exit(again ? 1 : 0);
      }).detach();
      http.stop();   // no new connections; template renders in flight are cancelled
      sched.stop();  // open requests end (cancelled), so their HTTP threads finish
      while (!done) {
        http.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    // The signal thread must be joined however listen() ends.
    auto join_signal_thread = [&] {
      done = true;
      pthread_kill(sig_thread.native_handle(), SIGTERM);
      sig_thread.join();
    };
    try {
      http.listen();
    } catch (...) {
      join_signal_thread();
      throw;
    }
    join_signal_thread();
    sched.stop();
    if (!r.quiet) std::fprintf(stderr, "moestream: stopped\n");
    return 0;
  };
});

}  // namespace
}  // namespace ms::cli
