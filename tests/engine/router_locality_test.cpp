// `gen --router-locality P` (engine/router_locality.h): a synthetic model run
// by the CPU backend routes its decode tokens so that P of a token's experts
// were chosen by the previous token too (within 5 points), measured the way
// `trace stats` measures a recorded trace; the design's own model of the
// top-k overlap; bad values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/route_recorder.h"
#include "engine/router_locality.h"
#include "engine/synthetic_model.h"
#include "experts/trace.h"
#include "experts/trace_stats.h"
#include "format/gguf.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name, const std::string& ext) {
  return (fs::temp_directory_path() / (name + std::to_string(::getpid()) + ext)).string();
}

// A small model with 32 experts, k = 4 (the tiny preset's 8 experts, k = 2,
// leave little room between chance and certainty), q8_0 so that gen is fast.
// Four layers and 500 decode tokens: the context drifts over tens of tokens,
// so a run measures only a few independent stretches of it. Over model seeds
// 5..12 this measured 0.275..0.315 for P = 0.3 and 0.545..0.608 for 0.6.
GenOptions small_model(double locality, uint64_t seed, const std::string& arch = "qwen3moe") {
  GenOptions g;
  g.arch = arch;
  g.preset = "tiny";
  g.n_layer = 4;
  g.n_expert = 32;
  g.n_expert_used = 4;
  g.quant = "q8_0";
  g.pure = true;
  g.router_locality = locality;
  g.seed = seed;
  return g;
}

// Runs n_prompt random tokens as one batch, then n_decode random tokens one
// at a time (decode steps), recording the routes; returns trace stats.
TraceStats run_and_measure(const GenOptions& g, int n_prompt, int n_decode, uint64_t token_seed) {
  ThreadPool pool(2);
  const std::string model_path = tmp_path("locality_model", ".gguf");
  const std::string trace_path = tmp_path("locality", ".trace");
  generate_model(g, model_path, pool);
  TraceStats st;
  {
    auto model = LoadedModel::open(model_path);
    CpuBackend be(model->weights, pool);
    KvCache kv = be.make_cache(n_prompt + n_decode + 1);
    RouteRecorder rec(trace_path, model->weights, static_cast<uint32_t>(n_prompt));
    rec.attach(be);
    uint64_t s = token_seed * 0x9e3779b97f4a7c15ull + 1;
    const auto next_token = [&] {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      return static_cast<int32_t>(3 + s % static_cast<uint64_t>(model->weights.cfg.n_vocab - 3));
    };
    std::vector<int32_t> prompt;
    for (int i = 0; i < n_prompt; ++i) prompt.push_back(next_token());
    std::vector<float> logits;
    be.forward(kv, prompt, logits);
    for (int i = 0; i < n_decode; ++i) {
      const int32_t t = next_token();
      be.forward(kv, std::span<const int32_t>(&t, 1), logits);
    }
    rec.finish(&be);
    st = compute_trace_stats(read_trace(trace_path));
  }
  fs::remove(model_path);
  fs::remove(trace_path);
  return st;
}

TEST(RouterLocality, DecodeRepeatsThePreviousTokensExpertsAtTheAskedRate) {
  // 256 prompt tokens fill the context's window; 500 decode tokens are measured.
  for (const double P : {0.3, 0.6}) {
    const TraceStats st = run_and_measure(small_model(P, 7), 256, 500, 1);
    const LayerTraceStats& o = st.overall;
    std::printf("locality %.2f: previous token %.3f, last 8 %.3f, LRU 40%% %.3f, experts for 90%% %.2f\n", P,
                o.repeat_prob, o.repeat_within_8, o.lru40_hit_rate, o.experts_for_90_share);
    EXPECT_NEAR(o.repeat_prob, P, 0.05);
    // The window spans tens of tokens: the last 8 tokens hold more of a
    // token's experts than the previous one does, and an LRU cache of 40% of
    // the experts hits more than the share of experts it holds.
    EXPECT_GT(o.repeat_within_8, o.repeat_prob + 0.1);
    EXPECT_GT(o.lru40_hit_rate, 0.6);
  }
}

// The other MoE architectures: the context head in the first layer with
// softmax attention over a long window (a hybrid's first attention layer,
// gpt-oss's first full layer of the tiny preset), its q and k from the q/k
// norms, a weight on the constant channel (Mixtral: no norms) or the biases
// (gpt-oss, whose YaRN turns the window's frequencies). Routers before that
// layer have no context: the hybrid's three linear layers of four route
// independently, so its rate is the mix (1 P, 3 chance) -- the tiny preset's
// layers, not the real model's 1 in 4 with 40 layers.
TEST(RouterLocality, EveryMoeArchitectureRepeatsAtTheAskedRate) {
  struct Case {
    const char* arch;
    size_t context_layer;  // the first layer whose router reads the context
  };
  for (const Case c : {Case{"mixtral", 0}, Case{"gpt-oss", 1}, Case{"qwen35moe", 3}}) {
    for (const double P : {0.3, 0.6}) {
      const TraceStats st = run_and_measure(small_model(P, 7, c.arch), 256, 500, 1);
      ASSERT_EQ(st.layers.size(), 4u) << c.arch;
      double with_context = 0;
      for (size_t l = 0; l < st.layers.size(); ++l) {
        const double r = st.layers[l].repeat_prob;
        std::printf("%s locality %.2f, layer %zu: previous token %.3f\n", c.arch, P, l, r);
        if (l < c.context_layer) EXPECT_NEAR(r, 4.0 / 32, 0.04) << c.arch << " layer " << l << ": by chance";
        else with_context += r;
      }
      with_context /= static_cast<double>(st.layers.size() - c.context_layer);
      EXPECT_NEAR(with_context, P, 0.05) << c.arch << " at " << P;
    }
  }
}

TEST(RouterLocality, WithoutItTokensRouteIndependently) {
  const TraceStats st = run_and_measure(small_model(0.0, 7), 64, 500, 1);
  // k / n_expert = 4 / 32 by chance.
  EXPECT_NEAR(st.overall.repeat_prob, 0.125, 0.04);
}

TEST(RouterLocality, OverlapModelMatchesKnownPoints) {
  // r = 0: two independent top-k draws of uniform experts share k/E.
  EXPECT_NEAR(topk_repeat_fraction(0.0, 32, 4, 0.0), 4.0 / 32, 0.01);
  EXPECT_NEAR(topk_repeat_fraction(0.0, 128, 8, 0.0), 8.0 / 128, 0.01);
  // r = 1: the same logits, the same experts.
  EXPECT_NEAR(topk_repeat_fraction(1.0, 32, 4, 0.0), 1.0, 1e-9);
  // More correlation, more overlap; skew alone raises the overlap by chance.
  EXPECT_LT(topk_repeat_fraction(0.3, 32, 4, 0.0), topk_repeat_fraction(0.6, 32, 4, 0.0));
  EXPECT_GT(topk_repeat_fraction(0.0, 32, 4, 1.0), topk_repeat_fraction(0.0, 32, 4, 0.0) + 0.05);
}

TEST(RouterLocality, DesignAndBadValues) {
  LocalityShape s;
  s.n_expert = 128;
  s.k = 8;
  s.head_dim = 128;
  s.n_rot = 128;
  s.rope_base = 1e6;
  s.n_embd = 2048;
  const LocalityDesign d = design_router_locality(0.45, s);
  EXPECT_GT(d.rho, 0.0);
  EXPECT_LT(d.rho, 1.0);
  EXPECT_FALSE(d.rope_dims.empty());
  EXPECT_GT(d.max_locality, 0.45);
  EXPECT_GT(design_router_locality(0.6, s).rho, d.rho);
  EXPECT_THROW(design_router_locality(1.0, s), Error);   // above what the window reaches
  EXPECT_THROW(design_router_locality(0.05, s), Error);  // below chance (8 / 128)
  EXPECT_THROW(design_router_locality(-0.1, s), Error);
  s.rope_base = 10.0;  // no frequency in the window's band
  EXPECT_THROW(design_router_locality(0.45, s), Error);

  ThreadPool pool(1);
  const std::string p = tmp_path("locality_bad", ".gguf");
  GenOptions g = small_model(1.5, 1);
  EXPECT_THROW(generate_model(g, p, pool), Error);
  g = small_model(0.45, 1);
  g.arch = "qwen3";  // dense: no routers
  EXPECT_THROW(generate_model(g, p, pool), Error);
  EXPECT_FALSE(fs::exists(p));
  s.n_embd = 60;  // under 4 x 16 channels for the context and the token
  s.rope_base = 1e6;
  EXPECT_THROW(design_router_locality(0.45, s), Error);
  // The file says what it was made with.
  generate_model(small_model(0.45, 1), p, pool);
  auto f = GgufFile::open(p);
  EXPECT_NEAR(f->get_float("moestream.synthetic.router_locality"), 0.45, 1e-6);
  f.reset();
  fs::remove(p);
}

}  // namespace
}  // namespace ms
