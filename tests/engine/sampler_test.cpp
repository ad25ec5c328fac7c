// The sampler: greedy, each filter on its own, the repetition penalty, and
// determinism for a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <random>
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

// best_ids against a partial sort of every index by (value descending, lower
// index first; NaN as -inf): lengths around the 16- and 64-value blocks, every
// k, many ties, infinities, NaNs and signed zeros; and a vocabulary's size.
TEST(Sampler, BestIdsMatchPartialSort) {
  std::mt19937 rng(5);
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3.0f};
  auto reference = [](const std::vector<float>& x, int32_t k) {
    auto key = [](float v) { return std::isnan(v) ? -INFINITY : v; };
    std::vector<int32_t> ids(x.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return key(x[a]) > key(x[b]) || (key(x[a]) == key(x[b]) && a < b);
    });
    ids.resize(static_cast<size_t>(k));
    return ids;
  };
  std::vector<int32_t> got;
  for (int n = 1; n <= 200; n += (n < 140 ? 1 : 7)) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = trial % 2 ? static_cast<float>(rng() % 7) - 3.0f : std::normal_distribution<float>()(rng);
      for (int s = 0; s < trial % 4; ++s) x[rng() % n] = specials[rng() % 6];
      for (int32_t k = 1; k <= n; ++k) {
        best_ids(x.data(), n, k, got);
        ASSERT_EQ(got, reference(x, k)) << "n " << n << " k " << k << " trial " << trial;
      }
    }
  }
  std::vector<float> big(151936);
  for (auto& v : big) v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
  for (int i = 0; i < 64; ++i) big[rng() % big.size()] = 12.5f;  // ties at the top
  for (const int32_t k : {1, 40, 64, 256, 4096}) {
    best_ids(big.data(), static_cast<int32_t>(big.size()), k, got);
    ASSERT_EQ(got, reference(big, k)) << "k " << k;
  }
}

// logit_bias is added before everything else: it moves greedy's pick, bans a
// token under sampling, and takes part in logprobs; bad values are refused.
TEST(Sampler, LogitBiasMovesThePick) {
  const float logits[5] = {0.1f, 2.0f, -1.0f, 1.5f, 1.0f};
  SamplerParams p = plain(0.0f);
  p.logit_bias = {{3, 1.0f}, {99, 100.0f}};  // an id past the vocabulary is skipped
  Sampler greedy(p);
  EXPECT_EQ(greedy.sample(logits, 5), 3);
  SamplerParams q = plain(1.0f, 7);
  q.logit_bias = {{1, -100.0f}};
  Sampler sampled(q);
  for (int i = 0; i < 200; ++i) EXPECT_NE(sampled.sample(logits, 5), 1);
  StepLogprobs lp;
  SampleOptions opt;
  opt.logprobs = &lp;
  opt.top_logprobs = 1;
  Sampler with_logprobs(p);
  EXPECT_EQ(with_logprobs.sample(logits, 5, opt), 3);
  ASSERT_EQ(lp.top.size(), 1u);
  EXPECT_EQ(lp.top[0].token, 3);
  for (const auto& bad : {std::vector<std::pair<int32_t, float>>{{-1, 1.0f}},
                          std::vector<std::pair<int32_t, float>>{{0, 101.0f}},
                          std::vector<std::pair<int32_t, float>>{{0, NAN}}}) {
    SamplerParams r = plain(0.0f);
    r.logit_bias = bad;
    EXPECT_THROW(r.validate(), Error);
  }
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

namespace ms {
namespace {

// A filter over a fixed mask that counts what it is asked.
struct CountingFilter final : TokenFilter {
  const std::vector<uint8_t>& flags;
  int asked = 0, masks = 0;
  explicit CountingFilter(const std::vector<uint8_t>& f) : flags(f) {}
  bool allows(int32_t id) override {
    ++asked;
    return flags[static_cast<size_t>(id)] != 0;
  }
  const uint8_t* mask() override {
    ++masks;
    return flags.data();
  }
};

// The lazy filter must be invisible: for every sampling setting, the same
// token as the whole mask and the same generator state after (the next
// draws agree too), over allowed sets from one token to all of them.
TEST(Sampler, LazyFilterPicksWhatTheWholeMaskPicks) {
  std::mt19937 rng(5);
  const int32_t n = 3000;
  std::vector<SamplerParams> settings;
  for (float temp : {0.0f, 0.7f, 1.3f})
    for (int top_k : {0, 1, 7, 40})
      for (float top_p : {1.0f, 0.9f}) {
        SamplerParams p;
        p.temperature = temp;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = top_k == 7 ? 0.1f : 0.0f;
        p.repeat_penalty = top_k == 40 ? 1.3f : 1.0f;
        p.seed = static_cast<uint64_t>(settings.size()) + 11;
        settings.push_back(p);
      }
  int lazy_decided = 0;
  for (double density : {1.0, 0.9, 0.3, 0.02, 0.0005}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> logits(n);
      std::normal_distribution<float> g(0.0f, 3.0f);
      for (float& l : logits) l = std::round(g(rng) * 4) / 4;  // ties on purpose
      std::vector<uint8_t> flags(n, 0);
      std::uniform_real_distribution<double> u(0, 1);
      for (uint8_t& f : flags) f = u(rng) < density;
      flags[rng() % n] = 1;  // at least one
      for (const SamplerParams& p : settings) {
        Sampler whole(p), lazy(p);
        for (int32_t t : {1, 2, 3}) whole.accept(t), lazy.accept(t);
        for (int step = 0; step < 3; ++step) {
          SampleOptions wo, lo;
          wo.allowed = flags.data();
          CountingFilter f(flags);
          lo.filter = &f;
          const int32_t a = whole.sample(logits.data(), n, wo), b = lazy.sample(logits.data(), n, lo);
          ASSERT_EQ(a, b) << "density " << density << " " << p.describe() << " step " << step;
          ASSERT_TRUE(flags[static_cast<size_t>(a)]);
          if (f.masks == 0) {
            ++lazy_decided;
            // Decided from the best tokens: never more than the refusals
            // allowed plus the candidates needed.
            EXPECT_LE(f.asked, Sampler::kLazyRefusals + std::max(1, p.top_k) + 1);
          }
        }
        EXPECT_EQ(whole.uniform(), lazy.uniform()) << "the generators drifted apart: " << p.describe();
      }
    }
  }
  EXPECT_GT(lazy_decided, 0);
}

TEST(Sampler, LazyFilterAsksFewTokensWhereMostAreAllowedAndTheMaskWhereItMust) {
  const int32_t n = 100000;
  std::vector<float> logits(n);
  for (int32_t i = 0; i < n; ++i) logits[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 1000) / 100.0f;
  std::vector<uint8_t> flags(n, 1);
  for (int32_t i = 0; i < n; i += 10) flags[static_cast<size_t>(i)] = 0;  // 90% allowed
  SamplerParams greedy;
  greedy.temperature = 0;
  CountingFilter f(flags);
  SampleOptions o;
  o.filter = &f;
  Sampler(greedy).sample(logits.data(), n, o);
  EXPECT_EQ(f.masks, 0);
  EXPECT_LT(f.asked, 20);
  SamplerParams topk;  // the defaults: top-k 40
  CountingFilter f2(flags);
  o.filter = &f2;
  Sampler(topk).sample(logits.data(), n, o);
  EXPECT_EQ(f2.masks, 0);
  EXPECT_LT(f2.asked, 80);
  // Logprobs need every allowed token's logit: the whole mask.
  CountingFilter f3(flags);
  o.filter = &f3;
  StepLogprobs lp;
  o.logprobs = &lp;
  Sampler(topk).sample(logits.data(), n, o);
  EXPECT_EQ(f3.masks, 1);
  // No top-k: every allowed token is a candidate.
  SamplerParams open = topk;
  open.top_k = 0;
  CountingFilter f4(flags);
  o.filter = &f4;
  o.logprobs = nullptr;
  Sampler(open).sample(logits.data(), n, o);
  EXPECT_EQ(f4.masks, 1);
  // A top-k past kLazyTopK: the mask too (asking that many one by one costs as much).
  SamplerParams wide = topk;
  wide.top_k = Sampler::kLazyTopK + 1;
  CountingFilter f6(flags);
  o.filter = &f6;
  Sampler(wide).sample(logits.data(), n, o);
  EXPECT_EQ(f6.masks, 1);
  EXPECT_EQ(f6.asked, 0);
  // The best tokens refused: the mask after kLazyRefusals refusals.
  std::vector<uint8_t> rare(n, 0);
  rare[12345] = 1;
  CountingFilter f5(rare);
  o.filter = &f5;
  EXPECT_EQ(Sampler(greedy).sample(logits.data(), n, o), 12345);
  EXPECT_EQ(f5.masks, 1);
  EXPECT_LE(f5.asked, Sampler::kLazyRefusals + 1);
}

}  // namespace
}  // namespace ms
