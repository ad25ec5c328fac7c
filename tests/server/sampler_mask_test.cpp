// The sampler's grammar mask and log-probabilities (engine/sampler.h),
// against a direct computation on random logits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/sampler.h"
#include "util/error.h"

namespace ms {
namespace {

std::vector<float> random_logits(std::mt19937& rng, int n) {
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

TEST(SamplerMask, NeverPicksAMaskedToken) {
  std::mt19937 rng(3);
  for (int round = 0; round < 40; ++round) {
    const int n = 17 + round * 13;
    const std::vector<float> logits = random_logits(rng, n);
    std::vector<uint8_t> allowed(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) allowed[static_cast<size_t>(i)] = rng() % 5 == 0;
    allowed[static_cast<size_t>(rng() % n)] = 1;
    SampleOptions opt;
    opt.allowed = allowed.data();
    // Greedy: the best allowed token.
    SamplerParams greedy;
    greedy.temperature = 0;
    Sampler g(greedy);
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (allowed[static_cast<size_t>(i)] && (best < 0 || logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)])) best = i;
    EXPECT_EQ(g.sample(logits.data(), n, opt), best);
    // Sampling, with and without the narrowing filters.
    for (SamplerParams p : {SamplerParams{}, SamplerParams{1.5f, 0, 1.0f, 0.0f}}) {
      p.seed = static_cast<uint64_t>(round);
      Sampler s(p);
      for (int k = 0; k < 200; ++k) {
        const int32_t id = s.sample(logits.data(), n, opt);
        ASSERT_TRUE(allowed[static_cast<size_t>(id)]) << "picked masked token " << id;
      }
    }
  }
}

TEST(SamplerMask, AllMaskedIsAnError) {
  const std::vector<float> logits = {1, 2, 3};
  const std::vector<uint8_t> none = {0, 0, 0};
  SampleOptions opt;
  opt.allowed = none.data();
  Sampler s(SamplerParams{});
  EXPECT_THROW(s.sample(logits.data(), 3, opt), Error);
}

TEST(SamplerLogprobs, AreTheLogSoftmaxOverAllowedTokens) {
  std::mt19937 rng(11);
  for (int round = 0; round < 30; ++round) {
    const int n = 30 + round * 7;
    const std::vector<float> logits = random_logits(rng, n);
    std::vector<uint8_t> allowed(static_cast<size_t>(n), 1);
    if (round % 2)
      for (int i = 0; i < n; ++i) allowed[static_cast<size_t>(i)] = rng() % 3 != 0;
    allowed[0] = 1;
    double z = 0;
    for (int i = 0; i < n; ++i)
      if (allowed[static_cast<size_t>(i)]) z += std::exp(static_cast<double>(logits[static_cast<size_t>(i)]));
    StepLogprobs lp;
    SampleOptions opt;
    opt.allowed = allowed.data();
    opt.logprobs = &lp;
    opt.top_logprobs = round % 21;
    SamplerParams p;
    p.seed = static_cast<uint64_t>(round);
    Sampler s(p);
    const int32_t id = s.sample(logits.data(), n, opt);
    EXPECT_EQ(lp.sampled.token, id);
    EXPECT_NEAR(lp.sampled.logprob, logits[static_cast<size_t>(id)] - std::log(z), 1e-4);
    EXPECT_LE(lp.sampled.logprob, 0.0f);
    EXPECT_LE(static_cast<int>(lp.top.size()), opt.top_logprobs);
    double mass = 0;
    for (size_t i = 0; i < lp.top.size(); ++i) {
      EXPECT_TRUE(allowed[static_cast<size_t>(lp.top[i].token)]);
      EXPECT_NEAR(lp.top[i].logprob, logits[static_cast<size_t>(lp.top[i].token)] - std::log(z), 1e-4);
      if (i) EXPECT_GE(lp.top[i - 1].logprob, lp.top[i].logprob);
      mass += std::exp(static_cast<double>(lp.top[i].logprob));
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
    // The top list holds exactly the best allowed tokens.
    if (!lp.top.empty()) {
      const float worst = lp.top.back().logprob;
      int better = 0;
      for (int i = 0; i < n; ++i)
        if (allowed[static_cast<size_t>(i)] && logits[static_cast<size_t>(i)] - std::log(z) > worst + 1e-5) ++better;
      EXPECT_LE(better, static_cast<int>(lp.top.size()));
    }
  }
}

}  // namespace
}  // namespace ms
