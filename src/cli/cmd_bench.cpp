// `moestream bench`: prompt processing (ppN) and generation (tgN) speed of a
// model on a backend, llama-bench style: every test repeated -r times,
// reported as mean ± sample standard deviation of tokens/s, with the device,
// the build and the model in the header. The one tool performance claims are
// made with; keep its output formats stable.
//
//   moestream bench [-m FILE] [-p 512] [-n 128] [-r 3] [--backend cpu|cuda] [-t N] [--kv-type f16|f32]
//                   [--json] [-o FILE]
//
// pp: a synthetic prompt of p tokens into an empty cache, one forward call
//     (batched prefill), logits of the last token copied back.
// tg: after a short (untimed) prompt of 8 tokens, n decode steps of random
//     tokens (a new sequence each run), logits copied back each step.
// The floor beside tg is active bytes per token / memory bandwidth (the GPU's
// device-to-device copy rate, or the host's read rate for --backend cpu).
#include <algorithm>
#include <chrono>
#include <random>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cpu/bandwidth.h"
#include "cpu/thread_pool.h"
#include "engine/loaded_model.h"
#include "engine/route_recorder.h"
#include "engine/sampler.h"
#include "format/gguf.h"
#include "util/bytes.h"
#include "util/error.h"

#ifdef MOESTREAM_HAVE_CUDA
#include "cuda/backend/cuda_backend.h"
#include "cuda/device.h"
#endif

#ifndef MOESTREAM_VERSION
#define MOESTREAM_VERSION "0.1.0"
#endif
#ifndef MOESTREAM_GIT_HASH
#define MOESTREAM_GIT_HASH "unknown"
#endif

namespace ms::cli {
namespace {

struct BenchArgs {
  std::string model, backend, output;
  std::string record_routes;  // after the timed runs: one prompt + decode run recorded as a routing trace
  int n_prompt = 512, n_gen = 128, reps = 3, threads = 0, batch = 0;
  bool json = false;
  double bandwidth_gbs = 0;  // > 0: use this instead of measuring
  KvType kv_type = KvType::F16;
  VramSetup vram;
};

struct Stat {
  std::string test;
  int n_tokens = 0;
  std::vector<double> tps;
  double mean() const {
    double s = 0;
    for (double v : tps) s += v;
    return tps.empty() ? 0 : s / tps.size();
  }
  double sd() const {
    if (tps.size() < 2) return 0;
    const double m = mean();
    double s = 0;
    for (double v : tps) s += (v - m) * (v - m);
    return std::sqrt(s / (tps.size() - 1));
  }
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

// "q4_K 15.2 GiB, q6_K 0.6 GiB, f32 0.1 GiB": tensor bytes by type, largest first.
std::string quant_mix(const GgufFile& f) {
  std::map<std::string, uint64_t> by;
  for (const GgufTensorInfo& t : f.tensors()) by[type_name(t.type)] += t.nbytes;
  std::vector<std::pair<uint64_t, std::string>> v;
  for (auto& [k, b] : by) v.emplace_back(b, k);
  std::sort(v.rbegin(), v.rend());
  std::string s;
  for (auto& [b, k] : v) s += (s.empty() ? "" : ", ") + k + " " + format_bytes(b);
  return s;
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

int run(const BenchArgs& a) {
  std::string path = a.model;
  if (path.empty()) {
    bool generated = false;
    path = default_model_path(&generated);
    std::fprintf(stderr, "moestream: %s the built-in tiny model (random weights) at %s\n",
                 generated ? "generated" : "using", path.c_str());
  }
  if (a.n_prompt < 0 || a.n_gen < 0 || a.reps < 1) throw Error("bench: -p and -n must be >= 0 and -r >= 1");
  if (a.n_prompt == 0 && a.n_gen == 0) throw Error("bench: nothing to measure (-p 0 -n 0)");
  auto model = LoadedModel::open(path);
  const ModelWeights& w = model->weights;
  const ModelConfig& c = w.cfg;
  ThreadPool pool(a.threads);
  constexpr int kTgPrompt = 8;
  const int64_t ctx = std::max<int64_t>(a.n_prompt, kTgPrompt + a.n_gen) + 1;
  BackendSetup bs;
  bs.requested = a.backend;
  bs.ctx = ctx;
  bs.max_batch = a.batch > 0 ? a.batch : std::max(a.n_prompt, 1);
  bs.kv_type = a.kv_type;
  bs.vram = a.vram;
  std::unique_ptr<Backend> be = make_backend(bs, w, pool);
  const std::string device = backend_device(*be, pool);

  using clock = std::chrono::steady_clock;
  const std::vector<int32_t> prompt = bench_prompt(a.n_prompt, c.n_vocab, 12345);
  const std::vector<int32_t> tg_prompt = bench_prompt(kTgPrompt, c.n_vocab, 777);
  std::vector<float> logits;
  auto run_pp = [&]() {
    KvCache kv = be->make_cache(ctx, a.kv_type);
    const auto t0 = clock::now();
    be->forward(kv, prompt, logits);
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Decode feeds random tokens, a new sequence per run (as llama-bench does):
  // greedy decoding of a random-weight model soon loops, and a loop's experts
  // would all be cached by the second run, which no real text allows.
  uint32_t tg_run = 0;
  auto run_tg = [&](int n) {
    KvCache kv = be->make_cache(ctx, a.kv_type);
    be->forward(kv, tg_prompt, logits);
    std::mt19937 rng(1000 + tg_run++);
    const auto vocab = static_cast<uint32_t>(c.n_vocab);
    const auto t0 = clock::now();
    for (int j = 0; j < n; ++j) {
      const auto tok = static_cast<int32_t>(rng() % vocab);
      be->forward(kv, std::span<const int32_t>(&tok, 1), logits);
    }
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Warm-up: pages in the weights, spins up the pool, captures the decode graph.
  if (a.n_prompt > 0) run_pp();
  if (a.n_gen > 0) run_tg(std::min(a.n_gen, 8));

  std::vector<Stat> stats;
  if (a.n_prompt > 0) {
    Stat s{"pp" + std::to_string(a.n_prompt), a.n_prompt, {}};
    for (int i = 0; i < a.reps; ++i) s.tps.push_back(a.n_prompt / run_pp());
    stats.push_back(s);
  }
  if (a.n_gen > 0) {
    Stat s{"tg" + std::to_string(a.n_gen), a.n_gen, {}};
    for (int i = 0; i < a.reps; ++i) s.tps.push_back(a.n_gen / run_tg(a.n_gen));
    stats.push_back(s);
  }
  if (!a.record_routes.empty()) {
    // Untimed: the pp prompt, then n_gen greedy decode tokens, in one context.
    RouteRecorder rec(a.record_routes, w, static_cast<uint32_t>(prompt.size()));
    rec.attach(*be);
    KvCache kv = be->make_cache(static_cast<int64_t>(prompt.size()) + a.n_gen + 1, a.kv_type);
    if (!prompt.empty()) be->forward(kv, prompt, logits);
    int32_t tok = prompt.empty() ? 0 : argmax(logits.data(), static_cast<int32_t>(c.n_vocab));
    for (int j = 0; j < a.n_gen; ++j) {
      be->forward(kv, std::span<const int32_t>(&tok, 1), logits);
      tok = argmax(logits.data(), static_cast<int32_t>(c.n_vocab));
    }
    rec.finish(be.get());
  }
  std::string bw_how;
  const double bw = a.bandwidth_gbs > 0 ? a.bandwidth_gbs * 1e9 : floor_bandwidth(*be, pool, &bw_how);
  if (a.bandwidth_gbs > 0) bw_how = "given with --bandwidth";
  const double active = static_cast<double>(w.active_bytes_per_token());
  const double floor_tps = bw / active;

  const ExpertTelemetry tel = be->expert_telemetry();
  const std::string model_name = model->file->get_string("general.name", "");
  const std::string size = format_bytes(model->file->file_size());
  const std::string mix = quant_mix(*model->file);
  std::string out;
  if (a.json) {
    nlohmann::json j;
    j["build"] = {{"version", MOESTREAM_VERSION}, {"git", MOESTREAM_GIT_HASH}, {"cuda", cuda_built()}};
    j["backend"] = be->name();
    j["device"] = device;
    j["threads"] = pool.size();
    j["kv_type"] = kv_type_name(a.kv_type);
    j["model"] = {{"path", path},         {"name", model_name},        {"arch", c.arch_name},
                  {"describe", c.describe()}, {"file_bytes", model->file->file_size()}, {"quant", mix},
                  {"active_bytes_per_token", w.active_bytes_per_token()}};
    j["bandwidth"] = {{"bytes_per_s", bw}, {"how", bw_how}};
    j["floor_tps"] = floor_tps;
    nlohmann::json rs = nlohmann::json::array();
    for (const Stat& s : stats)
      rs.push_back({{"test", s.test}, {"n_tokens", s.n_tokens}, {"reps", a.reps}, {"tps_mean", s.mean()},
                    {"tps_sd", s.sd()}, {"tps", s.tps}});
    j["results"] = rs;
    j["experts"] = tel.to_json();
    if (tel.hybrid) j["vram_budget_bytes"] = tel.budget_bytes;
    out = j.dump(2) + "\n";
  } else {
    char buf[1024];
    // The KV type only when not the default, so default headers stay as they were.
    out += "moestream bench | build " MOESTREAM_VERSION " (git " MOESTREAM_GIT_HASH ") | backend " + be->name() +
           (a.kv_type == KvType::F32 ? " | kv f32" : "") + " | device: " + device + "\n";
    out += "model: " + (model_name.empty() ? path : model_name) + " | " + c.describe() + " | " + size + " | " + mix +
           "\n";
    std::snprintf(buf, sizeof buf, "floor: %s active bytes/token at %.1f GB/s (%s) = %.1f tok/s\n\n",
                  format_bytes(static_cast<uint64_t>(active)).c_str(), bw / 1e9, bw_how.c_str(), floor_tps);
    out += buf;
    if (tel.hybrid) {
      const TierCounts pairs = tel.all();
      std::snprintf(buf, sizeof buf,
                    "vram: budget %s, %llu expert slots (%.1f%% of experts); hit rate %.1f%%, CPU share %.1f%%, H2D "
                    "%.1f GB/s; policy %s; host %s\n\n",
                    format_bytes(tel.budget_bytes).c_str(), static_cast<unsigned long long>(tel.cache_slots),
                    tel.experts_total ? 100.0 * tel.cache_slots / tel.experts_total : 0.0, 100.0 * pairs.hit_rate(),
                    pairs.total() ? 100.0 * pairs.host / pairs.total() : 0.0, tel.h2d_gbps(), tel.policy.c_str(),
                    tel.host_pin.c_str());
      out += buf;
    }
    out += "| model | size | backend | test | t/s | of floor |\n|---|---|---|---|---:|---:|\n";
    for (const Stat& s : stats) {
      const bool tg = s.test[0] == 't';
      std::snprintf(buf, sizeof buf, "| %s | %s | %s | %s | %.2f ± %.2f | %s |\n", c.arch_name.c_str(), size.c_str(),
                    be->name().c_str(), s.test.c_str(), s.mean(), s.sd(),
                    tg ? (std::to_string(static_cast<int>(std::lround(100.0 * s.mean() / floor_tps))) + "%").c_str()
                       : "");
      out += buf;
    }
  }
  std::fputs(out.c_str(), stdout);
  if (!a.output.empty()) {
    std::ofstream f(a.output);
    f << out;
    if (!f) throw Error(a.output + ": cannot write the bench results");
  }
  return 0;
}

RegisterCommand reg("bench", [](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Measure prompt (pp) and generation (tg) tokens/s, llama-bench style");
  sub->add_option("-m,--model", a->model, "GGUF model file (default: the built-in tiny model)");
  sub->add_option("-p,--n-prompt", a->n_prompt, "prompt tokens of the pp test (0: skip)")->capture_default_str();
  sub->add_option("-n,--n-gen", a->n_gen, "generated tokens of the tg test (0: skip)")->capture_default_str();
  sub->add_option("-r,--repetitions", a->reps, "repetitions of each test")->capture_default_str();
  sub->add_option("--backend", a->backend, backend_help())->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("-t,--threads", a->threads, "CPU threads (0: all cores)");
  sub->add_option("-b,--batch", a->batch, "prompt tokens per forward batch (0: the whole prompt)");
  sub->add_option("--bandwidth", a->bandwidth_gbs, "memory bandwidth in GB/s for the floor (default: measured)");
  sub->add_flag("--json", a->json, "print JSON instead of the markdown table");
  sub->add_option("-o,--output", a->output, "also write the output to this file");
  sub->add_option("--record-routes", a->record_routes,
                  "after the timed runs, record one prompt + decode run's expert choices to FILE (routing trace)");
  add_kv_type_option(*sub, &a->kv_type);
  add_vram_options(*sub, &a->vram, false);
  return [a]() -> int { return run(*a); };
});

}  // namespace
}  // namespace ms::cli
