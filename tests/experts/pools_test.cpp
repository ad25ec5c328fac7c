// The experts-side pieces the replay rests on: slot pools by capacity kind
// and slot class, pooled caches against a direct policy, trace statistics.
// (The replay itself, simulate(), drives the engine's step: tests/engine/sim_test.cpp.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "experts/pools.h"
#include "experts/synthetic_trace.h"
#include "experts/trace_stats.h"
#include "util/error.h"

namespace ms {
namespace {

SyntheticTraceOptions small(double skew, double locality = 0, uint64_t seed = 1) {
  SyntheticTraceOptions o;
  o.n_layer = 12;
  o.n_expert = 64;
  o.k = 6;
  o.tokens = 700;
  o.prompt_tokens = 64;
  o.prompt_batch = 64;
  o.skew = skew;
  o.locality = locality;
  o.seed = seed;
  return o;
}

TEST(Pools, CapacityKindsAndSlotClasses) {
  TraceHeader h;
  h.n_layer = 4;
  h.n_expert = 10;
  h.k = 2;
  h.expert_bytes = {0, 100, 100, 300};  // two slot classes, one dense layer
  CapacitySpec c;
  c.kind = CapacitySpec::Kind::Fraction;
  c.value = 0.5;
  PoolLayout g = make_pool_layout(h, c);
  ASSERT_EQ(g.pools.size(), 2u);
  EXPECT_EQ(g.total_slots(), 15u);
  EXPECT_EQ(g.pools[0].slots, 10u);  // 20 experts of 100 B
  EXPECT_EQ(g.pools[1].slots, 5u);
  EXPECT_EQ(g.pool_of_layer[0], -1);
  c.per_layer = true;
  PoolLayout pl = make_pool_layout(h, c);
  EXPECT_EQ(pl.pools.size(), 3u);
  EXPECT_EQ(pl.total_slots(), 15u);
  // Bytes: 2000 B of budget, 500 of dense -> 1500 B shared by bytes: 2000:3000 of expert bytes.
  c = CapacitySpec{CapacitySpec::Kind::Bytes, 2000, 500, false};
  PoolLayout b = make_pool_layout(h, c);
  EXPECT_LE(b.total_bytes(), 1500u);
  EXPECT_GE(b.total_bytes(), 1500u - 300u);
  EXPECT_EQ(b.pools[0].slots, 6u);  // 600 B
  EXPECT_EQ(b.pools[1].slots, 3u);  // 900 B
  c.dense_bytes = 3000;
  EXPECT_THROW(make_pool_layout(h, c), Error);
  c = CapacitySpec{CapacitySpec::Kind::Slots, 1000, 0, false};
  EXPECT_EQ(make_pool_layout(h, c).total_slots(), 30u);  // capped at all experts
  c = CapacitySpec{CapacitySpec::Kind::Fraction, 1.5, 0, false};
  EXPECT_THROW(make_pool_layout(h, c), Error);
}

TEST(TraceStats, SeesSkewLocalityAndPredictions) {
  SyntheticTraceOptions o = small(0.0);
  const TraceStats uniform = compute_trace_stats(make_synthetic_trace(o));
  o.skew = 1.2;
  o.locality = 0.5;
  o.predict_accuracy = 0.7;
  const TraceStats skewed = compute_trace_stats(make_synthetic_trace(o));
  EXPECT_GT(uniform.overall.norm_entropy, 0.98);
  EXPECT_LT(skewed.overall.norm_entropy, uniform.overall.norm_entropy - 0.05);
  EXPECT_GT(skewed.overall.top10_share, uniform.overall.top10_share + 0.1);
  EXPECT_NEAR(uniform.overall.repeat_prob, uniform.overall.repeat_prob_independent, 0.03);
  EXPECT_GT(skewed.overall.repeat_prob, skewed.overall.repeat_prob_independent + 0.2);
  EXPECT_NEAR(skewed.overall.prediction_recall, 0.7, 0.05);
  EXPECT_LT(uniform.overall.prediction_recall, 0);  // no predictions
  EXPECT_EQ(skewed.layers.size(), 12u);
  EXPECT_EQ(skewed.decode_tokens, 700u - 64u);
  const auto j = trace_stats_json(skewed);
  EXPECT_TRUE(j["overall"].contains("reuse_distance_mean"));
  EXPECT_NE(trace_stats_text(skewed).find("all"), std::string::npos);
}

TEST(Pools, PooledCacheMatchesADirectPolicyAndKeepsKeysGlobal) {
  TraceHeader h;
  h.n_layer = 3;
  h.n_expert = 8;
  h.k = 2;
  h.expert_bytes = {0, 100, 100};
  CapacitySpec c{CapacitySpec::Kind::Slots, 4, 0, false};
  const PoolLayout layout = make_pool_layout(h, c);
  PolicyOptions o;
  o.n_keys = 24;
  PooledCache pooled(layout, 8, "lru", o);
  auto direct = make_policy("lru", 4, o);
  AccessResult a, b;
  const std::vector<std::vector<ExpertKey>> steps = {{8, 9}, {16, 17}, {8, 20}, {10, 11}, {16, 23}};
  for (size_t i = 0; i < steps.size(); ++i) {
    pooled.access(i, steps[i], {}, a);
    direct->access(i, steps[i], {}, b);
    EXPECT_EQ(a.hits, b.hits);
    EXPECT_EQ(a.evicted, b.evicted);
  }
  EXPECT_EQ(pooled.resident(), direct->resident());
  for (ExpertKey k : pooled.resident()) EXPECT_GE(k, 8u);  // global keys (layer 0 is dense)
  // Per-layer quotas: 2 slots each; pinned keys land in their own layer's pool.
  c.per_layer = true;
  o.pinned = {17, 9};
  o.pin_fraction = 0.5;
  PooledCache quota(make_pool_layout(h, c), 8, "pinned+lru", o);
  const ExpertKey l1[2] = {9, 10}, l2[2] = {16, 17};
  quota.access(0, l1, {}, a);
  quota.access(1, l2, {}, a);
  EXPECT_EQ(quota.resident(), (std::vector<ExpertKey>{9, 10, 16, 17}));
  const ExpertKey l1b[2] = {11, 12};
  quota.access(2, l1b, {}, a);  // 9 is pinned: only the dynamic slot of layer 1 turns over
  EXPECT_TRUE(quota.contains(9));
  EXPECT_TRUE(quota.contains(16) && quota.contains(17));
  EXPECT_EQ(a.evicted, std::vector<ExpertKey>{10});
  std::vector<ExpertKey> ev;
  const ExpertKey protect[1] = {11};
  EXPECT_FALSE(quota.prefetch(3, 13, 1.0f, protect, ev));  // the only dynamic slot holds 11, in use
  EXPECT_TRUE(quota.prefetch(3, 13, 1.0f, {}, ev));
  EXPECT_EQ(ev, std::vector<ExpertKey>{11});
}

}  // namespace
}  // namespace ms
