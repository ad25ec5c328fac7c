// The CPU forward pass against the plain reference of ref_model.h on tiny
// synthetic models of every architecture, batched prefill against token by
// token, the expert layouts against each other, and the error paths.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"
#include "engine/synthetic_model.h"
#include "kv_test_util.h"
#include "ref_model.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

// Tiny models, generated once per test binary run into a temp directory.
class Models {
 public:
  static Models& get() {
    static Models m;
    return m;
  }
  const std::string& path(const std::string& arch, const std::string& quant, const std::string& layout = "stacked",
                          double skew = 0.0) {
    const std::string key = arch + "-" + quant + "-" + layout + "-" + std::to_string(skew);
    auto it = paths_.find(key);
    if (it != paths_.end()) return it->second;
    GenOptions o;
    o.arch = arch;
    o.preset = "tiny";
    o.quant = quant;
    o.layout = layout;
    o.router_skew = skew;
    o.seed = 7;
    const std::string p = (dir_ / (key + ".gguf")).string();
    generate_model(o, p, pool_);
    return paths_[key] = p;
  }
  ~Models() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

 private:
  Models() : dir_(fs::temp_directory_path() / ("moestream_engine_test_" + std::to_string(::getpid()))), pool_(2) {
    fs::create_directories(dir_);
  }
  fs::path dir_;
  ThreadPool pool_;
  std::map<std::string, std::string> paths_;
};

struct Diff {
  double rel_rms = 0, max_abs = 0;
};

Diff compare(const float* a, const std::vector<double>& ref) {
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    mx = std::max(mx, std::fabs(d));
  }
  return {std::sqrt(num / den), mx};
}

const std::vector<int32_t> kPrompt = {5, 77, 300, 12, 41, 41, 200, 3, 499, 150, 64, 9};

// Runs the prompt token by token through the engine and the reference and
// returns the relative RMS error of each token's logits, sorted.
std::vector<double> errors_vs_reference(const std::string& path) {
  auto m = LoadedModel::open(path);
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  KvCache kv = be.make_cache(64);
  testref::RefModel ref(*m->file);
  ref.renorm = m->weights.cfg.router_renorm;
  std::vector<float> logits;
  std::vector<double> errors;
  for (int32_t t : kPrompt) {
    be.forward(kv, std::span<const int32_t>(&t, 1), logits);
    const std::vector<double> r = ref.step(t);
    errors.push_back(compare(logits.data(), r).rel_rms);
  }
  std::sort(errors.begin(), errors.end());
  return errors;
}

// F32 weights keep activations in f32: only the F16 KV cache differs, so
// every token is close.
double worst_error_vs_reference(const std::string& path) { return errors_vs_reference(path).back(); }

// Quantized weights take 8-bit quantized activations: about 1% per token, and
// now and then a near-tie in the router flips an expert and a token's logits
// move more (a property of quantization, not a bug). The median is the check.
double median_error_vs_reference(const std::string& path) {
  const auto e = errors_vs_reference(path);
  return e[e.size() / 2];
}

TEST(Forward, Qwen3MoeF32MatchesReference) {
  EXPECT_LT(worst_error_vs_reference(Models::get().path("qwen3moe", "f32")), 2e-3);
}

TEST(Forward, Qwen3MoeQ4KMMatchesReference) {
  EXPECT_LT(median_error_vs_reference(Models::get().path("qwen3moe", "q4_k_m")), 2e-2);
}

TEST(Forward, MixtralMatchesReference) {
  EXPECT_LT(worst_error_vs_reference(Models::get().path("mixtral", "f32")), 2e-3);
  EXPECT_LT(median_error_vs_reference(Models::get().path("mixtral", "q8_0")), 2e-2);
}

TEST(Forward, DenseArchitecturesMatchReference) {
  for (const char* arch : {"qwen3", "qwen2", "llama"})
    EXPECT_LT(worst_error_vs_reference(Models::get().path(arch, "f32")), 2e-3) << arch;
}

TEST(Forward, ExpertLayoutsGiveIdenticalLogits) {
  std::vector<std::vector<float>> results;
  for (const char* layout : {"stacked", "merged", "per-expert"}) {
    auto m = LoadedModel::open(Models::get().path("qwen3moe", "q4_k_m", layout));
    EXPECT_EQ(m->weights.layers[0].experts.layout, layout);
    ThreadPool pool(2);
    CpuBackend be(m->weights, pool);
    KvCache kv = be.make_cache(32);
    std::vector<float> logits;
    be.forward(kv, kPrompt, logits);
    results.push_back(logits);
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(Forward, BatchedPrefillEqualsTokenByToken) {
  for (const char* arch : {"qwen3moe", "mixtral"}) {
    auto m = LoadedModel::open(Models::get().path(arch, "q4_k_m"));
    kvtest::expect_batched_prefill_equals_token_by_token(m->weights, KvType::F16, arch);
  }
}

TEST(Forward, MultiSequenceDecodeEqualsEachSequenceAlone) {
  for (const char* arch : {"qwen3moe", "mixtral"}) {
    auto m = LoadedModel::open(Models::get().path(arch, "q4_k_m"));
    ThreadPool pool(2);
    CpuBackend be(m->weights, pool);
    // Three sequences at different positions (prompts of 5, 11 and 1 tokens).
    std::vector<KvCache> alone, together;
    std::mt19937 rng(9);
    std::vector<float> logits;
    for (int len : {5, 11, 1}) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < len; ++i) prompt.push_back(static_cast<int32_t>(rng() % 509));
      alone.push_back(be.make_cache(32));
      together.push_back(be.make_cache(32));
      be.forward(alone.back(), prompt, logits);
      be.forward(together.back(), prompt, logits);
    }
    const std::vector<int32_t> next = {17, 3, 250};
    for (int step = 0; step < 3; ++step) {
      std::vector<KvCache*> kvs = {&together[0], &together[1], &together[2]};
      std::vector<float> multi;
      be.forward_multi(kvs, next, multi);
      const size_t V = static_cast<size_t>(m->weights.cfg.n_vocab);
      ASSERT_EQ(multi.size(), 3 * V);
      for (size_t i = 0; i < 3; ++i) {
        be.forward(alone[i], std::span<const int32_t>(&next[i], 1), logits);
        double worst = 0;
        for (size_t j = 0; j < V; ++j) worst = std::max(worst, static_cast<double>(std::fabs(logits[j] - multi[i * V + j])));
        EXPECT_LT(worst, 1e-4) << arch << " sequence " << i << " step " << step;
        EXPECT_EQ(alone[i].n_past(), together[i].n_past());
      }
    }
    std::vector<KvCache*> twice = {&together[0], &together[0]};
    EXPECT_THROW(be.forward_multi(twice, std::vector<int32_t>{1, 2}, logits), Error);
  }
}

TEST(Forward, GenerationIsDeterministicForASeed) {
  auto m = LoadedModel::open(Models::get().path("qwen3moe", "q4_k_m"));
  auto run = [&](uint64_t seed, int threads) {
    ThreadPool pool(threads);
    CpuBackend be(m->weights, pool);
    KvCache kv = be.make_cache(64);
    SamplerParams sp;
    sp.temperature = 1.0f;
    sp.seed = seed;
    Sampler s(sp);
    GenerateParams gp;
    gp.n_predict = 24;
    gp.stop_at_eog = false;
    std::vector<int32_t> out;
    generate(be, kv, s, m->tokenizer.get(), kPrompt, gp, [&](int32_t id) {
      out.push_back(id);
      return true;
    });
    return out;
  };
  const auto a = run(3, 2);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(a, run(3, 2));
  EXPECT_EQ(a, run(3, 1));  // thread count does not change results
  EXPECT_NE(a, run(4, 2));
}

TEST(Forward, ContextOverflowIsReported) {
  auto m = LoadedModel::open(Models::get().path("qwen3moe", "q4_k_m"));
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  KvCache kv = be.make_cache(8);
  std::vector<float> logits;
  be.forward(kv, std::span<const int32_t>(kPrompt.data(), 6), logits);
  try {
    be.forward(kv, std::span<const int32_t>(kPrompt.data(), 3), logits);
    FAIL() << "overflow accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context full (8 tokens)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kv.n_past(), 6);
  // generate() stops at a full context instead of wrapping.
  SamplerParams sp;
  sp.temperature = 0;
  Sampler s(sp);
  KvCache kv2 = be.make_cache(16);
  GenerateParams gp;
  gp.n_predict = 100;
  gp.stop_at_eog = false;
  const GenerateStats st = generate(be, kv2, s, nullptr, kPrompt, gp, [](int32_t) { return true; });
  EXPECT_EQ(st.stop_reason, "context full (16 tokens)");
  EXPECT_EQ(kv2.n_past(), 16);
  EXPECT_EQ(st.n_generated, 5);  // 12 prompt + 4 fed back fill 16; the 5th comes from the last logits
  EXPECT_THROW(be.forward(kv2, std::span<const int32_t>(kPrompt.data(), 1), logits), Error);
}

TEST(Forward, BadTokenIdIsAnError) {
  auto m = LoadedModel::open(Models::get().path("qwen3moe", "q4_k_m"));
  ThreadPool pool(1);
  CpuBackend be(m->weights, pool);
  KvCache kv = be.make_cache(8);
  std::vector<float> logits;
  const int32_t bad = 512;
  EXPECT_THROW(be.forward(kv, std::span<const int32_t>(&bad, 1), logits), Error);
  EXPECT_EQ(kv.n_past(), 0);
}

TEST(ExpertExecutor, MatchesReferencePerPair) {
  auto m = LoadedModel::open(Models::get().path("qwen3moe", "q4_k_m"));
  ThreadPool pool(2);
  CpuExpertExecutor ex(m->weights, pool);
  const int64_t D = m->weights.cfg.n_embd;
  const int n = 5, k = 2;
  std::vector<float> x(n * D);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (float& v : x) v = dist(rng);
  const int32_t ids[n * k] = {0, 3, 3, 7, 1, 0, 7, 6, 2, 3};
  const auto work = group_by_expert(ids, n, k, 8);
  ASSERT_EQ(work.size(), 6u);  // experts 0 1 2 3 6 7
  EXPECT_EQ(work[3].expert, 3);
  EXPECT_EQ(work[3].tokens, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(work[3].slots, (std::vector<int32_t>{1, 2, 9}));
  std::vector<float> y(n * k * D, NAN), ref(D);
  ex.compute(1, x.data(), n, work, y.data());
  for (int p = 0; p < n * k; ++p) {
    expert_ffn_ref(expert_ffn_weights(m->weights.layers[1].experts), ids[p], x.data() + (p / k) * D, ref.data());
    double num = 0, den = 0;
    for (int64_t i = 0; i < D; ++i) {
      num += (y[p * D + i] - ref[i]) * (y[p * D + i] - ref[i]);
      den += ref[i] * ref[i];
    }
    EXPECT_LT(std::sqrt(num / den), 3e-2) << "pair " << p;
  }
}

TEST(SyntheticModel, RouterSkewConcentratesRouting) {
  auto popularity = [&](double skew) {
    auto m = LoadedModel::open(Models::get().path("qwen3moe", "q4_k_m", "stacked", skew));
    ThreadPool pool(2);
    CpuBackend be(m->weights, pool);
    KvCache kv = be.make_cache(256);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 200; ++i) prompt.push_back((i * 37) % 509);
    std::vector<float> logits;
    be.forward(kv, prompt, logits);
    // Mean over layers of the top expert's share.
    double share = 0;
    const int E = m->weights.cfg.n_expert;
    for (int il = 0; il < m->weights.cfg.n_layer; ++il) {
      uint64_t mx = 0, total = 0;
      for (int e = 0; e < E; ++e) {
        mx = std::max(mx, be.expert_counts()[il * E + e]);
        total += be.expert_counts()[il * E + e];
      }
      share += static_cast<double>(mx) / total;
    }
    return share / m->weights.cfg.n_layer;
  };
  const double uniform = popularity(0.0), skewed = popularity(2.0);
  EXPECT_LT(uniform, 0.3);  // 8 experts, top-2: 0.125 if perfectly even
  EXPECT_GT(skewed, uniform + 0.1);
}

}  // namespace
}  // namespace ms
