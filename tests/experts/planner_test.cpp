#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "experts/cost_model.h"
#include "experts/planner.h"
#include "experts/prefetch.h"
#include "util/error.h"

namespace ms {
namespace {

CostModel simple_cost() {
  CostModel c;
  c.pcie_gbps = 25;
  c.cpu_gbps = 40;
  c.copy_overhead_us = c.cpu_overhead_us = c.gpu_overhead_us = 0;
  return c;
}

TEST(CostModel, OverridesAndJson) {
  CostModel c;
  c.apply_overrides("pcie_gbps=55,cpu_gbps=92");
  EXPECT_EQ(c.pcie_gbps, 55);
  EXPECT_EQ(c.cpu_gbps, 92);
  EXPECT_THROW(c.apply_overrides("pcie=1"), Error);
  EXPECT_THROW(c.apply_overrides("pcie_gbps=fast"), Error);
  EXPECT_THROW(c.apply_overrides("pcie_gbps=0"), Error);
  CostModel d;
  d.apply_json(c.to_json());
  EXPECT_EQ(d.cpu_gbps, 92);
  EXPECT_NEAR(CostModel::for_quant("q8_0").flops_per_byte, 2.0 * 32 / 34, 1e-12);
  EXPECT_EQ(CostModel::for_quant("nonsense").flops_per_byte, CostModel().flops_per_byte);
}

// --cost parsed once (CostOverrides): the figures named, in order, applied
// as the string form applies them; bad items are errors naming them.
TEST(CostModel, OverridesParseOnce) {
  const CostOverrides o = CostOverrides::parse("pcie_gbps=55,,cpu_overhead_us=0");
  ASSERT_EQ(o.figures.size(), 2u);
  EXPECT_TRUE(o.sets(&CostModel::pcie_gbps));
  EXPECT_TRUE(o.sets(&CostModel::cpu_overhead_us));
  EXPECT_FALSE(o.sets(&CostModel::cpu_gflops));
  CostModel typed, text;
  typed.apply(o);
  text.apply_overrides("pcie_gbps=55,cpu_overhead_us=0");
  EXPECT_EQ(typed.to_json(), text.to_json());
  EXPECT_EQ(CostOverrides::parse(o.text()).text(), o.text());
  EXPECT_TRUE(CostOverrides::parse("").empty());
  for (const char* bad : {"pcie=1", "pcie_gbps=fast", "pcie_gbps=0", "cpu_gbps=nan", "pcie_gbps"}) {
    try {
      CostOverrides::parse(bad);
      ADD_FAILURE() << bad << ": no error";
    } catch (const Error& e) {
      const std::string name = std::string(bad).substr(0, std::string(bad).find('='));
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << bad << ": " << e.what();
    }
  }
  try {
    CostOverrides::parse("warp_speed=9");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: pcie_gbps"), std::string::npos) << e.what();
  }
}

TEST(SplitCold, OneTokenBalancesPcieAndCpu) {
  const CostModel c = simple_cost();
  // 13 identical cold experts, one token each: stream s, compute 13-s on the
  // CPU; best is s/25 ~ (13-s)/40 -> s = 5 (5/25 = 0.2 vs 8/40 = 0.2).
  std::vector<ColdExpert> cold(13, ColdExpert{1'000'000, 1, false});
  const auto s = split_cold(cold, c, 0);
  EXPECT_EQ(std::count(s.begin(), s.end(), 1), 5);
  const LayerTime t = layer_time(cold, s, c, 0);
  EXPECT_NEAR(t.copy_s, t.host_s, 0.05 * t.time_s);
  // No split is faster than the chosen one.
  for (int j = 0; j <= 13; ++j) {
    std::vector<uint8_t> alt(13, 0);
    for (int q = 0; q < j; ++q) alt[q] = 1;
    EXPECT_GE(layer_time(cold, alt, c, 0).time_s, t.time_s - 1e-12);
  }
}

TEST(SplitCold, ALinkBusyWithPrefetchLeavesMoreToTheCpu) {
  const CostModel c = simple_cost();
  std::vector<ColdExpert> cold(13, ColdExpert{1'000'000, 1, false});
  // Three experts' worth of staging already on the link (1 MB at 25 GB/s:
  // 40 us each): the best split streams 2 fewer than the 5 of an idle link.
  const double busy = 3 * c.copy_s(1'000'000);
  const auto s = split_cold(cold, c, 0, busy);
  EXPECT_EQ(std::count(s.begin(), s.end(), 1), 3);  // (3 + s)/25 ~ (13 - s)/40 -> s = 3
  const LayerTime t = layer_time(cold, s, c, 0, busy);
  EXPECT_NEAR(t.copy_s, busy + 3 * c.copy_s(1'000'000), 1e-12);
  // A link busy for longer than the CPU needs for everything: nothing streams.
  const auto none = split_cold(cold, c, 0, 13 * c.cpu_s(1'000'000, 1));
  EXPECT_EQ(std::count(none.begin(), none.end(), 1), 0);
}

TEST(SplitCold, TheCpusStartDelayLeavesItLess) {
  CostModel c = simple_cost();
  std::vector<ColdExpert> cold(13, ColdExpert{1'000'000, 1, false});
  // Starting 80 us late (two experts' CPU time) moves about one expert to
  // the link: s/25 ~ (80 us + (13 - s)/40 ms) -> s = 6.
  c.cpu_start_us = 2e6 * c.cpu_s(1'000'000, 1);
  const auto s = split_cold(cold, c, 0);
  EXPECT_EQ(std::count(s.begin(), s.end(), 1), 6);
  // Counted once, and only when the CPU has work.
  std::vector<uint8_t> all(13, 1), none(13, 0);
  EXPECT_EQ(layer_time(cold, all, c, 0).host_s, 0.0);
  EXPECT_NEAR(layer_time(cold, none, c, 0).host_s, 15 * c.cpu_s(1'000'000, 1), 1e-12);
}

TEST(SplitCold, BatchStreamsPopularExpertsAndLeavesSingleUseOnCpu) {
  const CostModel c = simple_cost();
  std::vector<ColdExpert> cold;
  for (int i = 0; i < 6; ++i) cold.push_back({1'000'000, 200, false});  // chosen by 200 tokens
  for (int i = 0; i < 6; ++i) cold.push_back({1'000'000, 1, false});    // single use
  const auto s = split_cold(cold, c, 0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s[i], 1) << i;
  EXPECT_GT(std::count(s.begin() + 6, s.end(), 0), 0);
  // Must-stream experts are always streamed.
  std::vector<ColdExpert> forced(4, ColdExpert{1'000'000, 1, true});
  const auto f = split_cold(forced, c, 0);
  EXPECT_EQ(std::count(f.begin(), f.end(), 1), 4);
}

TEST(Planner, PlansEveryExpertAndNeverEvictsTheWorkingSet) {
  uint64_t seed = 5;
  auto rnd = [&](uint32_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t((seed >> 33) % n);
  };
  const uint32_t n_layer = 4, n_expert = 16;
  for (const std::string& name : policy_names()) {
    PolicyOptions o;
    o.n_keys = n_layer * n_expert;
    o.pinned = {1, 17, 33};
    for (int state = 0; state < 30; ++state) {
      auto cache = make_policy(name, 4 + rnd(24), o);
      Planner planner(simple_cost(), {1000, 2000, 1000, 3000}, n_expert);
      // Random history builds a random cache state ...
      for (uint64_t step = 0; step < 40; ++step) {
        std::set<ExpertKey> ws;
        const uint32_t layer = rnd(n_layer), n = 1 + rnd(6);
        while (ws.size() < n) ws.insert(layer * n_expert + rnd(n_expert));
        std::vector<ExpertKey> keys(ws.begin(), ws.end());
        std::vector<uint32_t> tokens(keys.size());
        for (auto& t : tokens) t = 1 + rnd(50);
        const ExpertPlan p = planner.plan(step, layer, keys, tokens, *cache);
        // ... and every plan is checked.
        ASSERT_EQ(p.experts.size(), keys.size());
        for (ExpertKey e : p.evicted) ASSERT_FALSE(ws.count(e)) << name;
        uint64_t pcie = 0;
        for (const PlannedExpert& e : p.experts) {
          ASSERT_TRUE(ws.count(e.key));
          if (e.admit) ASSERT_EQ(e.tier, Tier::Stream);
          if (e.tier == Tier::Stream) pcie += planner.bytes_of(e.key);
          if (e.tier != Tier::Host) ASSERT_TRUE(e.tier == Tier::Resident || e.tier == Tier::Stream);
        }
        ASSERT_EQ(pcie, p.pcie_bytes);
        ASSERT_EQ(p.n_resident + p.n_stream + p.n_host, keys.size());
        ASSERT_GE(p.time_s, std::max({p.gpu_s, p.host_s}));
      }
    }
  }
}

// Decode staging (auto): link and CPU finish together. copy 50 us, cpu 90 us,
// overhead 10 us, 8 cold experts: (10 + 720) / 140 = 5.2 -> 5 staged.
TEST(Prefetch, DecodeStageCountBalancesTheLinkAgainstTheCpu) {
  const double copy = 50e-6, cpu = 90e-6, w = 10e-6;
  EXPECT_EQ(decode_stage_count(8, 0, 0, w, copy, cpu), 5u);
  // A GPU-only stretch of 140 us before the routes: one more fits the link.
  EXPECT_EQ(decode_stage_count(8, 140e-6, 0, w, copy, cpu), 6u);
  // A backlog of the same length takes it back.
  EXPECT_EQ(decode_stage_count(8, 140e-6, 140e-6, w, copy, cpu), 5u);
  // Within [0, cold]: a long stretch stages every cold one; a long backlog none.
  EXPECT_EQ(decode_stage_count(8, 10e-3, 0, w, copy, cpu), 8u);
  EXPECT_EQ(decode_stage_count(8, 0, 10e-3, w, copy, cpu), 0u);
  EXPECT_EQ(decode_stage_count(0, 1e-3, 0, w, copy, cpu), 0u);
  // The balance holds at the count returned: staging one more would leave
  // the link finishing later than the CPU by more than it gains.
  for (double gap : {0.0, 50e-6, 120e-6, 300e-6})
    for (double backlog : {0.0, 30e-6, 200e-6}) {
      const uint32_t s = decode_stage_count(8, gap, backlog, w, copy, cpu);
      const double link = backlog + s * copy, host = gap + w + (8 - s) * cpu;
      EXPECT_LE(std::abs(link - host), (copy + cpu) / 2 + 1e-12) << gap << " " << backlog;
    }
}

}  // namespace
}  // namespace ms
