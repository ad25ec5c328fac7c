// The server's host work per step, without a model: a Scheduler over a
// backend whose forward_seqs only writes the step's logits (Qwen3's vocabulary
// size, 151936; the synthetic vocabulary of `moestream gen`), S slots each
// generating 128 tokens while a client thread per job takes its text as the
// HTTP thread does. What the step costs beyond the forward pass (picking the
// tokens, detokenizing, stop strings, posting, the scheduler's bookkeeping)
// is time a GPU idles between two forward passes. Reported per step:
//   host_us    wall time of the steps less the fake forward passes;
//   fwd_us     the fake forward pass (writing S rows of logits).
// Samplers: greedy (what tools/serve_load.py asks) and the server's default
// (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).
//
// Usage: serve_step_bench [google benchmark flags]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/synthetic_vocab.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace ms;
using Clock = std::chrono::steady_clock;

constexpr int32_t kVocab = 151936;

// Logits shaped like a model's: a smooth spread, the best token moving with
// the sequence's length so the text changes every step.
class LogitsOnlyBackend final : public Backend {
 public:
  LogitsOnlyBackend() : base_(kVocab) {
    cfg_.n_vocab = kVocab;
    uint32_t x = 12345;
    for (float& v : base_) {
      x = x * 1664525u + 1013904223u;
      v = static_cast<float>(x >> 8) * (8.0f / 16777216.0f);
    }
  }
  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool) override {
    SeqTokens s{&kv, tokens, true};
    forward_seqs(std::span<const SeqTokens>(&s, 1), logits);
  }
  void forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) override {
    const auto t0 = Clock::now();
    size_t rows = 0;
    for (const SeqTokens& s : seqs) rows += s.want_logits ? 1 : 0;
    logits.resize(rows * kVocab);
    size_t r = 0;
    for (const SeqTokens& s : seqs) {
      s.kv->advance(static_cast<int64_t>(s.tokens.size()));
      if (!s.want_logits) continue;
      float* row = logits.data() + r++ * kVocab;
      std::memcpy(row, base_.data(), kVocab * sizeof(float));
      row[(300 + 7919 * s.kv->n_past()) % (kVocab - 3)] = 20.0f;  // the pick: an ordinary token
    }
    forward_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    ++steps_;
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return KvCache(1, 1, 8, ctx, type); }
  const ModelConfig& config() const override { return cfg_; }
  std::string name() const override { return "logits-only"; }
  void set_route_hook(RouteHook, bool = false) override {}

  int64_t forward_ns_ = 0, steps_ = 0;

 private:
  ModelConfig cfg_;
  std::vector<float> base_;
};

void BM_ServeStep(benchmark::State& state) {
  const int slots = static_cast<int>(state.range(0));
  const bool greedy = state.range(1) == 0;
  static const Tokenizer tok(make_synthetic_vocab(kVocab));
  LogitsOnlyBackend be;
  server::Scheduler::Options so;
  so.parallel = slots;
  so.ctx = 1024;
  server::Scheduler sched(be, tok, so);
  const std::vector<int32_t> prompt = tok.encode("Tell me a story about experts.", false);
  int64_t wall_ns = 0;
  for (auto _ : state) {
    be.forward_ns_ = be.steps_ = 0;
    const auto t0 = Clock::now();
    std::vector<std::thread> clients;
    for (int i = 0; i < slots; ++i)
      clients.emplace_back([&, i] {
        server::Job j;
        j.prompt = prompt;
        j.prompt.push_back(static_cast<int32_t>(300 + i));  // every prompt different
        if (greedy) j.sampling.temperature = 0;
        j.sampling.seed = static_cast<uint64_t>(i);
        j.gen.n_predict = 128;
        j.gen.stop_at_eog = false;
        auto req = sched.submit(std::move(j));
        while (!req->take(std::chrono::milliseconds(1000)).done) {
        }
      });
    for (auto& c : clients) c.join();
    wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    state.counters["steps"] = static_cast<double>(be.steps_);
    state.counters["host_us"] = 1e-3 * static_cast<double>(wall_ns - be.forward_ns_) / static_cast<double>(be.steps_);
    state.counters["fwd_us"] = 1e-3 * static_cast<double>(be.forward_ns_) / static_cast<double>(be.steps_);
  }
}
BENCHMARK(BM_ServeStep)->ArgsProduct({{1, 4, 8, 16}, {0, 1}})->ArgNames({"slots", "sampled"})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
