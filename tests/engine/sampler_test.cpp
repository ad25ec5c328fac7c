// The sampler: greedy, each filter on its own, the repetition penalty, and
// determinism for a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "util/error.h"

namespace ms {
namespace {

SamplerParams plain(float temp, uint64_t seed = 1) {
  SamplerParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f));
  const float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(s.sample(logits, 5), 1);
  EXPECT_EQ(argmax(logits, 5), 1);
}

// argmax against the plain one-pass loop: every length around the vector
// width, maxima at every position, ties, NaNs (never picked unless first),
// infinities and signed zeros.
TEST(Sampler, ArgmaxMatchesOnePassLoop) {
  auto plain_argmax = [](const std::vector<float>& x) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(x.size()); ++i)
      if (x[i] > x[best]) best = i;
    return best;
  };
  uint32_t st = 12345;
  auto next = [&] {
    st = st * 1664525u + 1013904223u;
    return st >> 8;
  };
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3.0f};
  for (int n = 1; n <= 70; ++n) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = static_cast<float>(next() % 7) - 3.0f;  // many ties
      const int n_special = trial % 4;
      for (int k = 0; k < n_special; ++k) x[next() % n] = specials[next() % 6];
      ASSERT_EQ(argmax(x.data(), n), plain_argmax(x)) << "n " << n << " trial " << trial;
    }
  }
  std::vector<float> big(151936);
  for (auto& v : big) v = static_cast<float>(next() % 100000) * 1e-3f;
  big[151935] = 1000.0f;
  EXPECT_EQ(argmax(big.data(), 151936), 151935);
  big[77] = 1000.0f;
  EXPECT_EQ(argmax(big.data(), 151936), 77);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  const float logits[3] = {3.0f, 2.0f, -1.0f};
  s.accept(0);
  EXPECT_EQ(s.sample(logits, 3), 1);  // 3/2 = 1.5 < 2
  s.reset();
  EXPECT_EQ(s.sample(logits, 3), 0);  // history forgotten
  const float neg[2] = {-1.0f, -1.5f};
  s.accept(0);
  EXPECT_EQ(s.sample(neg, 2), 1);  // -1*2 = -2 < -1.5
}

TEST(Sampler, RepetitionWindowForgetsOldTokens) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 10.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  const float logits[3] = {3.0f, 2.0f, 0.0f};
  s.accept(0);
  s.accept(2);
  s.accept(2);  // token 0 falls out of the window
  EXPECT_EQ(s.sample(logits, 3), 0);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplerParams p = plain(5.0f);
  p.top_k = 1;
  Sampler s(p);
  const float logits[4] = {0.f, 0.5f, 0.4f, 0.3f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits, 4), 1);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
  // probabilities ~ 0.5, 0.3, 0.2 (temperature 1): top_p 0.6 keeps the first two.
  SamplerParams p = plain(1.0f, 7);
  p.top_p = 0.6f;
  Sampler s(p);
  const float logits[3] = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::map<int, int> count;
  for (int i = 0; i < 2000; ++i) ++count[s.sample(logits, 3)];
  EXPECT_EQ(count[2], 0);
  EXPECT_NEAR(count[0] / 2000.0, 0.5 / 0.8, 0.05);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplerParams p = plain(1.0f, 9);
  p.min_p = 0.5f;
  Sampler s(p);
  const float logits[3] = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};  // 0.2 < 0.5*0.5
  std::map<int, int> count;
  for (int i = 0; i < 2000; ++i) ++count[s.sample(logits, 3)];
  EXPECT_EQ(count[2], 0);
  EXPECT_GT(count[1], 0);
}

TEST(Sampler, TemperatureFollowsSoftmax) {
  Sampler s(plain(2.0f, 11));
  const float logits[2] = {2.0f, 0.0f};  // at T=2: p0 = 1/(1+e^-1) = 0.731
  int n0 = 0;
  for (int i = 0; i < 4000; ++i) n0 += s.sample(logits, 2) == 0;
  EXPECT_NEAR(n0 / 4000.0, 1.0 / (1.0 + std::exp(-1.0)), 0.03);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 1.7f);
  auto run = [&](uint64_t seed) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.top_k = 50;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.repeat_penalty = 1.1f;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      out.push_back(s.sample(logits.data(), 100));
      s.accept(out.back());
    }
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, UniformIsInUnitInterval) {
  Sampler s(plain(1.0f, 3));
  double mn = 1, mx = 0, sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = s.uniform();
    mn = std::min(mn, u), mx = std::max(mx, u), sum += u;
  }
  EXPECT_GE(mn, 0.0);
  EXPECT_LT(mx, 1.0);
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(Sampler, RejectsBadParameters) {
  SamplerParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.min_p = 2.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.repeat_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.temperature = -1.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.top_k = -1;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.top_p = 1.5f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.presence_penalty = 2.5f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.frequency_penalty = -3.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.temperature = 0.0f;  // greedy is valid
  EXPECT_NO_THROW(Sampler{p});
}

TEST(GenerateParams, NPredictMinusOneMeansUntilEndOfText) {
  GenerateParams g;
  g.n_predict = -1;
  EXPECT_NO_THROW(g.validate());
  g.n_predict = 0;
  EXPECT_NO_THROW(g.validate());
  g.n_predict = -5;
  EXPECT_THROW(g.validate(), Error);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesLowerSeenTokens) {
  SamplerParams p;
  p.temperature = 0;
  p.frequency_penalty = 1.0f;
  Sampler s(p);
  const float logits[3] = {3.0f, 2.5f, 0.0f};
  EXPECT_EQ(s.sample(logits, 3), 0);
  s.accept(0);  // token 0 seen once: 3 - 1 = 2 < 2.5
  EXPECT_EQ(s.sample(logits, 3), 1);
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.4f;  // 3 - 0.4 = 2.6 > 2.5, however often it was seen
  Sampler q(p);
  q.accept(0);
  q.accept(0);
  EXPECT_EQ(q.sample(logits, 3), 0);
}

}  // namespace
}  // namespace ms
