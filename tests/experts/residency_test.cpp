// ExpertResidency with a simulated slot pool (no GPU): slot bookkeeping
// agrees with the policy, the working set is never evicted, pools never
// overfill, transit slots are used for streamed-not-kept experts, and the
// cost model's split sends cold experts where it says.
#include "experts/residency.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "experts/policy.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr uint32_t kLayers = 6, kExperts = 32, kTopK = 4;

ResidencyConfig config(uint64_t pool_bytes, const std::string& policy = "default") {
  ResidencyConfig c;
  c.n_layer = kLayers;
  c.n_expert = kExperts;
  c.k = kTopK;
  // Two slot classes: layers 0..3 of 1 MiB experts, 4..5 of 1.5 MiB.
  for (uint32_t l = 0; l < kLayers; ++l) c.slot_bytes.push_back(l < 4 ? (1u << 20) : (3u << 19));
  c.pool_bytes = pool_bytes;
  c.transit_slots = 8;
  c.policy = policy;
  return c;
}

// config() with staging banks of `bank` slots, and a CPU so slow that
// every cold expert is streamed (the staging tests' set-up).
ResidencyConfig staging_config(uint64_t pool_bytes, const std::string& policy, uint32_t bank) {
  ResidencyConfig c = config(pool_bytes, policy);
  c.stage_bank = bank;
  c.cost.cpu_gbps = 0.001;
  return c;
}

// One layer step: n_tokens tokens, each choosing kTopK distinct experts
// (skewed towards low ids when skew > 0).
void route(std::mt19937& rng, int n_tokens, double skew, std::vector<ExpertKey>& keys, std::vector<uint32_t>& uses,
           uint32_t layer) {
  std::map<uint32_t, uint32_t> count;
  for (int t = 0; t < n_tokens; ++t) {
    std::set<uint32_t> picked;
    while (picked.size() < kTopK) {
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      picked.insert(std::min<uint32_t>(kExperts - 1, uint32_t(kExperts * std::pow(u, 1.0 + skew))));
    }
    for (uint32_t e : picked) ++count[e];
  }
  keys.clear();
  uses.clear();
  for (auto [e, n] : count) {
    keys.push_back(layer * kExperts + e);
    uses.push_back(n);
  }
}

// The first n experts of `layer` that are not resident (fewer if there are not so many).
std::vector<ExpertKey> cold_experts(const ExpertResidency& r, uint32_t layer, size_t n) {
  std::vector<ExpertKey> cold;
  for (uint32_t e = 0; e < kExperts && cold.size() < n; ++e)
    if (!r.resident(layer * kExperts + e)) cold.push_back(layer * kExperts + e);
  return cold;
}

// Checks every invariant of one plan against the residency's state.
void check_plan(const ExpertResidency& r, const StepPlan& p, std::span<const ExpertKey> keys, uint32_t layer) {
  ASSERT_EQ(p.plan.experts.size(), keys.size());
  for (ExpertKey e : p.plan.evicted)
    EXPECT_FALSE(std::binary_search(keys.begin(), keys.end(), e)) << "evicted a key of the working set";
  const int32_t pool = r.pool_of_layer(layer);
  const auto cache_slots = int32_t(r.layout().pools[size_t(pool)].slots);
  for (size_t i = 0; i < keys.size(); ++i) {
    const PlannedExpert& e = p.plan.experts[i];
    EXPECT_EQ(e.key, keys[i]);
    switch (e.tier) {
      case Tier::Host:
        EXPECT_FALSE(p.where[i].valid());
        EXPECT_FALSE(p.copy[i]);
        break;
      case Tier::Resident:
        EXPECT_EQ(p.where[i].pool, pool);
        EXPECT_LT(p.where[i].slot, cache_slots);
        EXPECT_FALSE(p.copy[i]);
        EXPECT_TRUE(r.resident(e.key));
        break;
      case Tier::Stream:
        EXPECT_EQ(p.where[i].pool, pool);
        if (e.staged) {  // copied ahead: a staging slot (past the transit slots), or a transit slot (prompts)
          EXPECT_FALSE(p.copy[i]);
          EXPECT_TRUE(p.transit[i]);
          const bool transit = p.staged_bank == StagePlan::kTransitBank;
          EXPECT_GE(p.where[i].slot, cache_slots + (transit ? 0 : int32_t(r.transit_slots())));
          if (transit) EXPECT_LT(p.where[i].slot, cache_slots + int32_t(r.transit_slots()));
          EXPECT_LT(p.where[i].slot, cache_slots + int32_t(r.extra_slots()));
          EXPECT_FALSE(r.resident(e.key));
          break;
        }
        EXPECT_TRUE(p.copy[i]);
        if (e.admit) {
          EXPECT_FALSE(p.transit[i]);
          EXPECT_LT(p.where[i].slot, cache_slots);
          EXPECT_TRUE(r.resident(e.key));
        } else {
          EXPECT_TRUE(p.transit[i]);
          EXPECT_GE(p.where[i].slot, cache_slots);
          EXPECT_LT(p.where[i].slot, cache_slots + int32_t(r.transit_slots()));
          EXPECT_FALSE(r.resident(e.key));
        }
        break;
    }
  }
}

// No two resident experts share a slot, and no pool holds more than its slots.
void check_slots(const ExpertResidency& r) {
  std::set<std::pair<int32_t, int32_t>> used;
  std::vector<size_t> per_pool(r.layout().pools.size(), 0);
  for (ExpertKey k = 0; k < kLayers * kExperts; ++k) {
    const SlotRef s = r.slot_of(k);
    if (!s.valid()) continue;
    EXPECT_EQ(s.pool, r.pool_of_layer(k / kExperts));
    EXPECT_TRUE(used.insert({s.pool, s.slot}).second) << "slot shared by two experts";
    ++per_pool[size_t(s.pool)];
  }
  for (size_t p = 0; p < per_pool.size(); ++p) EXPECT_LE(per_pool[p], r.layout().pools[p].slots);
}

TEST(ExpertResidency, PoolsAreSizedFromTheByteBudgetPerSlotClass) {
  const ExpertResidency r(config(64ull << 20));
  ASSERT_EQ(r.layout().pools.size(), 2u);
  EXPECT_LE(r.layout().total_bytes(), 64ull << 20);
  EXPECT_GT(r.layout().total_bytes(), (64ull << 20) - (3u << 19));
  EXPECT_EQ(r.pool_of_layer(0), r.pool_of_layer(3));
  EXPECT_NE(r.pool_of_layer(3), r.pool_of_layer(4));
}

TEST(ExpertResidency, InitialPlacementFillsEverySlotOnce) {
  ExpertResidency r(config(40ull << 20));
  const auto placed = r.initial_placement();
  EXPECT_EQ(placed.size(), r.layout().total_slots());
  EXPECT_EQ(r.resident_count(), r.layout().total_slots());
  check_slots(r);
  // Spread evenly over the layers of a pool.
  std::map<uint32_t, int> per_layer;
  for (auto& [k, s] : placed) ++per_layer[k / kExperts];
  for (uint32_t l = 1; l < 4; ++l) EXPECT_LE(std::abs(per_layer[l] - per_layer[0]), 1);
}

TEST(ExpertResidency, ProfileHottestExpertsStartResident) {
  ExpertProfile prof;
  prof.n_layer = kLayers;
  prof.n_expert = kExperts;
  prof.counts.assign(kLayers * kExperts, 0);
  prof.counts[2 * kExperts + 31] = 100;  // expert 31 of layer 2: would come last in the even spread
  ResidencyConfig c = config(8ull << 20);
  c.profile = &prof;
  ExpertResidency r(c);
  r.initial_placement();
  EXPECT_TRUE(r.resident(2 * kExperts + 31));
}

TEST(ExpertResidency, LayersPolicyPinsWholeLayersAndNeverChanges) {
  ExpertResidency r(config(160ull << 20, "layers"));
  ASSERT_TRUE(r.whole_layers());
  r.initial_placement();
  check_slots(r);
  // Each pool fills its layers in order: every layer but at most one per pool
  // holds all of its experts or none.
  uint32_t pinned = 0;
  std::map<int32_t, int> partial_per_pool;
  for (uint32_t l = 0; l < kLayers; ++l) {
    uint32_t n = 0;
    for (uint32_t e = 0; e < kExperts; ++e) n += r.resident(l * kExperts + e);
    EXPECT_EQ(r.layer_pinned(l), n == kExperts);
    pinned += n == kExperts;
    if (n != 0 && n != kExperts) ++partial_per_pool[r.pool_of_layer(l)];
  }
  EXPECT_GE(pinned, 2u);
  EXPECT_LT(pinned, kLayers);
  for (auto [pool, n] : partial_per_pool) EXPECT_LE(n, 1) << "pool " << pool;
  std::vector<ExpertKey> before;
  for (ExpertKey k = 0; k < kLayers * kExperts; ++k)
    if (r.resident(k)) before.push_back(k);
  std::mt19937 rng(7);
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> uses;
  for (uint64_t step = 1; step < 200; ++step)
    for (uint32_t l = 0; l < kLayers; ++l) {
      route(rng, 1 + int(step % 9), 0.5, keys, uses, l);
      const StepPlan& p = r.plan(step, l, keys, uses);
      check_plan(r, p, keys, l);
      EXPECT_TRUE(p.plan.evicted.empty());
      if (r.layer_pinned(l))
        for (const PlannedExpert& e : p.plan.experts) EXPECT_EQ(e.tier, Tier::Resident);
    }
  std::vector<ExpertKey> after;
  for (ExpertKey k = 0; k < kLayers * kExperts; ++k)
    if (r.resident(k)) after.push_back(k);
  EXPECT_EQ(before, after);
}

// "layers-first" pins the first layers of each pool, as llama.cpp's
// --n-cpu-moe does; "layers" spreads them, so a resident layer sits between
// tiered ones (the link stages the next tiered layer while it computes).
TEST(ExpertResidency, LayersSpreadsThePinnedLayersAndLayersFirstTakesThemInOrder) {
  ResidencyConfig c = config(0, "layers");
  c.n_layer = 16;
  c.slot_bytes.assign(16, 1u << 20);  // one pool
  c.pool_bytes = 6ull * kExperts << 20;  // six whole layers
  for (const char* pol : {"layers", "layers-first"}) {
    c.policy = pol;
    ExpertResidency r(c);
    r.initial_placement();
    std::vector<uint32_t> pinned;
    for (uint32_t l = 0; l < 16; ++l)
      if (r.layer_pinned(l)) pinned.push_back(l);
    ASSERT_EQ(pinned.size(), 6u) << pol;
    if (std::string(pol) == "layers-first") {
      EXPECT_EQ(pinned, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
    } else {
      EXPECT_EQ(pinned, (std::vector<uint32_t>{0, 2, 4, 8, 10, 12}));  // bit-reversed order 0, 8, 4, 12, 2, 10
      uint32_t gap = 0;  // no long run of tiered layers
      for (size_t i = 1; i < pinned.size(); ++i) gap = std::max(gap, pinned[i] - pinned[i - 1]);
      EXPECT_LE(gap, 4u);
    }
  }
}

TEST(ExpertResidency, TheEngineDefaultIsAKnownPolicyThatFillsWholeLayersWithoutAProfile) {
  const std::vector<std::string> names = policy_names();
  for (bool profile : {false, true})
    EXPECT_NE(std::find(names.begin(), names.end(), engine_default_policy(profile)), names.end());
  ExpertResidency r(config(160ull << 20, engine_default_policy(false)));
  EXPECT_TRUE(r.whole_layers());  // no profile: nothing says which experts are hot, whole layers avoid round trips
  ExpertResidency p(config(160ull << 20, engine_default_policy(true)));
  EXPECT_FALSE(p.whole_layers());  // a profile: its hottest experts, wherever their layer
}

TEST(ExpertResidency, EveryPolicyKeepsTheInvariantsOverManySteps) {
  std::vector<std::string> policies = policy_names();
  policies.push_back("default");
  for (const std::string& pol : policies)
    for (double skew : {0.0, 1.5}) {
      SCOPED_TRACE(pol + " skew " + std::to_string(skew));
      ExpertResidency r(config(48ull << 20, pol));
      r.initial_placement();
      std::mt19937 rng(42);
      std::vector<ExpertKey> keys;
      std::vector<uint32_t> uses;
      uint64_t step = 0;
      for (int pass = 0; pass < 60; ++pass, ++step) {
        const int n_tokens = pass % 10 == 0 ? 24 : 1;  // prompt batches now and then
        for (uint32_t l = 0; l < kLayers; ++l) {
          route(rng, n_tokens, skew, keys, uses, l);
          const StepPlan& p = r.plan(step, l, keys, uses);
          check_plan(r, p, keys, l);
          if (HasFailure()) return;
        }
        check_slots(r);
      }
      const ResidencyCounters& c = r.counters();
      EXPECT_EQ(c.layer_steps, 60u * kLayers);
      EXPECT_GT(c.resident, 0u);
    }
}

TEST(ExpertResidency, TheCostModelDecidesBetweenPcieAndCpu) {
  for (bool cpu_fast : {true, false}) {
    ResidencyConfig c = config(0);  // no cache slots: every expert is cold
    c.cost.pcie_gbps = cpu_fast ? 0.001 : 1000;
    c.cost.cpu_gbps = cpu_fast ? 1000 : 0.001;
    ExpertResidency r(c);
    EXPECT_EQ(r.layout().total_slots(), 0u);
    r.initial_placement();
    std::mt19937 rng(1);
    std::vector<ExpertKey> keys;
    std::vector<uint32_t> uses;
    route(rng, 3, 0.0, keys, uses, 1);
    const StepPlan& p = r.plan(0, 1, keys, uses);
    for (const PlannedExpert& e : p.plan.experts) EXPECT_EQ(e.tier, cpu_fast ? Tier::Host : Tier::Stream);
    check_plan(r, p, keys, 1);
  }
}

// The caller's link backlog replaces the residency's own guess: with the
// link free the plan streams what the split gives it; behind a long backlog
// the CPU takes every cold expert.
TEST(ExpertResidency, AKnownLinkBacklogMovesColdExpertsToTheCpu) {
  ResidencyConfig c = config(0);  // every expert cold
  c.cost.pcie_gbps = 50;
  c.cost.cpu_gbps = 30;
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> uses;
  for (uint32_t e = 0; e < 8; ++e) keys.push_back(kExperts + e), uses.push_back(1);
  auto host_count = [&](double backlog) {
    ExpertResidency r(c);
    const StepPlan& p = r.plan(0, 1, keys, uses, backlog);
    check_plan(r, p, keys, 1);
    return p.plan.n_host;
  };
  const uint32_t free_link = host_count(0), unknown = host_count(-1), busy = host_count(1.0);
  EXPECT_EQ(free_link, unknown);  // nothing staged: the guess is a free link too
  EXPECT_GT(free_link, 0u);
  EXPECT_LT(free_link, 8u);
  EXPECT_EQ(busy, 8u);
}

TEST(ExpertResidency, StreamedExpertsCycleThroughTheTransitSlots) {
  ResidencyConfig c = config(0);
  c.cost.cpu_gbps = 0.001;  // stream everything
  ExpertResidency r(c);
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> uses;
  for (uint32_t e = 0; e < 20; ++e) keys.push_back(kExperts + e), uses.push_back(1);
  const StepPlan& p = r.plan(0, 1, keys, uses);
  std::vector<int32_t> slots;
  for (size_t i = 0; i < keys.size(); ++i) slots.push_back(p.where[i].slot);
  // 8 transit slots reused in order: expert i and i+8 share one.
  for (size_t i = 0; i + 8 < slots.size(); ++i) EXPECT_EQ(slots[i], slots[i + 8]);
  EXPECT_EQ(std::set<int32_t>(slots.begin(), slots.end()).size(), 8u);
}

// Staging (prefetch): predicted cold experts of the coming layer step go
// into the next bank's slots, past the transit slots; that step's plan takes
// the routed ones from there with nothing to copy, and counts the rest of
// the prediction.
TEST(ExpertResidency, StagedExpertsAreStreamedFromTheirStagingSlotsWithoutACopy) {
  // "layers" admits nothing (an admission would take precedence over the
  // staged copy). A layer with resident and cold experts: the one whole
  // layers left half full.
  ResidencyConfig c = staging_config(48ull << 20, "layers", 4);
  ExpertResidency r(c);
  r.initial_placement();
  uint32_t l = kLayers;
  for (uint32_t q = 0; q < kLayers && l == kLayers; ++q) {
    uint32_t n = 0;
    for (uint32_t e = 0; e < kExperts; ++e) n += r.resident(q * kExperts + e);
    if (n > 0 && n + 6 <= kExperts) l = q;
  }
  ASSERT_LT(l, kLayers);
  const std::vector<ExpertKey> cold = cold_experts(r, l, 6);
  ASSERT_EQ(cold.size(), 6u);
  ExpertKey hot = l * kExperts;
  for (uint32_t e = 0; e < kExperts; ++e)
    if (r.resident(l * kExperts + e)) hot = l * kExperts + e;
  ASSERT_TRUE(r.resident(hot));
  // Predicted: one resident expert (not staged), then 5 cold ones: 4 fit the bank.
  const std::vector<ExpertKey> predicted{hot, cold[0], cold[1], cold[2], cold[3], cold[4]};
  const StagePlan& sp = r.stage(9, l, predicted, 8);
  ASSERT_EQ(sp.copies.size(), 4u);
  const int32_t pool = r.pool_of_layer(l);
  const uint32_t first_staging = uint32_t(r.layout().pools[size_t(pool)].slots) + r.transit_slots();
  std::set<int32_t> staging;
  for (const auto& [key, where] : sp.copies) {
    EXPECT_FALSE(r.resident(key));
    EXPECT_EQ(where.pool, pool);
    EXPECT_GE(uint32_t(where.slot), first_staging + uint32_t(sp.bank) * 4u);
    EXPECT_LT(uint32_t(where.slot), first_staging + uint32_t(sp.bank) * 4u + 4u);
    staging.insert(where.slot);
  }
  EXPECT_EQ(staging.size(), 4u);
  // Routed: cold[1], cold[3] (staged), cold[5] (not predicted), hot.
  std::vector<ExpertKey> keys{hot, cold[1], cold[3], cold[5]};
  std::sort(keys.begin(), keys.end());
  const std::vector<uint32_t> uses(keys.size(), 1);
  const StepPlan& p = r.plan(9, l, keys, uses);
  check_plan(r, p, keys, l);
  EXPECT_EQ(p.plan.n_staged, 2u);
  EXPECT_EQ(p.staged_bank, sp.bank);
  for (size_t i = 0; i < keys.size(); ++i) {
    const PlannedExpert& e = p.plan.experts[i];
    const bool staged = e.key == cold[1] || e.key == cold[3];
    EXPECT_EQ(e.staged, staged) << e.key;
    if (staged) {
      EXPECT_EQ(e.tier, Tier::Stream);
      EXPECT_FALSE(p.copy[i]);
      EXPECT_TRUE(p.transit[i]);
      EXPECT_TRUE(staging.count(p.where[i].slot));
    } else if (e.key == cold[5]) {
      EXPECT_TRUE(p.copy[i]);
      EXPECT_LT(uint32_t(p.where[i].slot), first_staging);  // a transit slot
    }
  }
  const PredictionOutcome& o = p.prediction;
  EXPECT_EQ(o.predicted, 6u);
  EXPECT_EQ(o.correct, 3u);  // hot, cold[1], cold[3]
  EXPECT_EQ(o.routed, 4u);
  EXPECT_EQ(o.staged, 4u);
  EXPECT_EQ(o.staged_used, 2u);
  EXPECT_EQ(o.cold, 3u);
  EXPECT_EQ(r.counters().staged, 4u);
  EXPECT_EQ(r.counters().staged_used, 2u);
  // A bank serves one plan, of its own step: the same layer later has nothing staged.
  const StepPlan& again = r.plan(10, l, keys, uses);
  EXPECT_EQ(again.plan.n_staged, 0u);
  EXPECT_EQ(again.prediction.predicted, 0u);
  EXPECT_EQ(again.staged_bank, -1);
}

TEST(ExpertResidency, StagingAlternatesBanksAndIsOffWithoutOne) {
  ResidencyConfig c = config(0);
  c.stage_bank = 2;
  ExpertResidency r(c);
  const std::vector<ExpertKey> a{kExperts + 1, kExperts + 2}, b{2 * kExperts + 1};
  const int32_t bank_a = r.stage(0, 1, a, 8).bank;
  const int32_t bank_b = r.stage(0, 2, b, 8).bank;
  EXPECT_NE(bank_a, bank_b);
  EXPECT_EQ(r.stage(0, 1, a, 0).copies.size(), 0u);  // max_experts 0
  EXPECT_THROW(r.stage(0, 1, b, 8), Error);           // a key of another layer
  ResidencyConfig off = config(0);
  ExpertResidency n(off);
  EXPECT_EQ(n.stage(0, 1, a, 8).bank, -1);
  EXPECT_TRUE(n.stage(0, 1, a, 8).copies.empty());
}

// A staged expert that the policy admits at its layer step (LRU admits
// every miss) goes into its cache slot from the staging slot, not over the
// link a second time: the plan names the staging slot as the copy's source,
// counts it as a used stage, and counts its link bytes once (the stage's).
TEST(ExpertResidency, AnAdmittedStagedExpertIsCopiedFromItsStagingSlot) {
  ResidencyConfig c = staging_config(24ull << 20, "lru", 2);
  ExpertResidency r(c);
  r.initial_placement();
  const uint32_t l = 1;
  const std::vector<ExpertKey> cold = cold_experts(r, l, 2);
  ASSERT_EQ(cold.size(), 2u);
  const StagePlan& sp = r.stage(3, l, std::vector<ExpertKey>{cold[0]}, 2);
  ASSERT_EQ(sp.copies.size(), 1u);
  const SlotRef staging = sp.copies[0].second;
  const uint64_t bytes_after_stage = r.counters().copy_bytes;
  const std::vector<uint32_t> uses{1, 1};
  const StepPlan& p = r.plan(3, l, cold, uses);  // cold[0] staged, cold[1] not
  check_plan(r, p, cold, l);
  ASSERT_EQ(p.plan.admitted.size(), 2u);
  for (size_t i = 0; i < cold.size(); ++i) {
    EXPECT_TRUE(p.plan.experts[i].admit);
    EXPECT_TRUE(p.copy[i]);
    EXPECT_TRUE(r.resident(cold[i]));
    EXPECT_EQ(p.where[i].slot, r.slot_of(cold[i]).slot);
  }
  EXPECT_EQ(p.copy_from[0].pool, staging.pool);
  EXPECT_EQ(p.copy_from[0].slot, staging.slot);
  EXPECT_FALSE(p.copy_from[1].valid());
  EXPECT_EQ(p.prediction.staged_used, 1u);
  EXPECT_EQ(p.prediction.staged_admitted, 1u);
  EXPECT_EQ(p.staged_bank, sp.bank);
  EXPECT_EQ(r.counters().copy_bytes - bytes_after_stage, 1u << 20);  // cold[1] only
}

// A plan that may not admit (a step the GPU already ran from staging slots)
// changes no slot, with every policy that admits: its misses are staged or
// streamed, nothing is evicted, and the same step planned normally later
// admits again.
TEST(ExpertResidency, APlanThatMayNotAdmitChangesNoSlot) {
  for (const char* policy : {"lru", "slru", "lfu-decay", "adaptive", "pinned+adaptive"}) {
    ResidencyConfig c = staging_config(24ull << 20, policy, 2);
    ExpertResidency r(c);
    r.initial_placement();
    const uint32_t l = 2;
    const std::vector<ExpertKey> cold = cold_experts(r, l, 3);
    ASSERT_EQ(cold.size(), 3u) << policy;
    const size_t resident_before = r.resident_count();
    r.stage(7, l, std::vector<ExpertKey>{cold[0]}, 2);
    const std::vector<uint32_t> uses(cold.size(), 40);  // hot enough for any policy's admission
    const StepPlan& p = r.plan(7, l, cold, uses, -1, false);
    check_plan(r, p, cold, l);
    EXPECT_TRUE(p.plan.admitted.empty()) << policy;
    EXPECT_TRUE(p.plan.evicted.empty()) << policy;
    EXPECT_EQ(r.resident_count(), resident_before) << policy;
    EXPECT_EQ(p.plan.n_staged, 1u) << policy;
    for (size_t i = 0; i < cold.size(); ++i) {
      EXPECT_FALSE(r.resident(cold[i])) << policy;
      EXPECT_TRUE(p.transit[i]) << policy;
      EXPECT_FALSE(p.copy_from[i].valid()) << policy;
    }
    size_t admitted = 0;
    for (uint64_t step = 8; step < 12; ++step) admitted += r.plan(step, l, cold, uses).plan.admitted.size();
    EXPECT_GT(admitted, 0u) << policy;
  }
}

// Prompt staging: a layer's cold experts take the next transit slots before
// its routes are known; its plan takes the routed ones as staged, and its
// own streamed experts continue the transit order after them.
TEST(ExpertResidency, PromptStagingTakesTheNextTransitSlotsAndThePlanContinuesAfterThem) {
  ResidencyConfig c = config(0);  // no cache slots: every expert is cold
  c.cost.cpu_gbps = 0.001;        // stream every cold expert
  ExpertResidency r(c);
  const int32_t pool = r.pool_of_layer(1);
  const int32_t cache_slots = int32_t(r.layout().pools[size_t(pool)].slots);
  // One streamed expert first, so the transit order does not start at 0.
  const std::vector<ExpertKey> first{kExperts + 31};
  const std::vector<uint32_t> one{1};
  EXPECT_EQ(r.plan(4, 1, first, one).where[0].slot, cache_slots + 0);
  std::vector<ExpertKey> wanted;
  for (uint32_t e = 0; e < 6; ++e) wanted.push_back(kExperts + e);
  const StagePlan& sp = r.stage_transit(5, 1, wanted, 100);
  EXPECT_EQ(sp.bank, StagePlan::kTransitBank);
  ASSERT_EQ(sp.copies.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(sp.copies[i].first, wanted[i]);
    EXPECT_EQ(sp.copies[i].second.pool, pool);
    EXPECT_EQ(sp.copies[i].second.slot, cache_slots + int32_t(1 + i));  // after the one above
  }
  // Routed: staged 1, 3, 4 and not staged 10, 11, 12.
  const std::vector<ExpertKey> keys{kExperts + 1, kExperts + 3, kExperts + 4, kExperts + 10, kExperts + 11,
                                    kExperts + 12};
  const std::vector<uint32_t> uses(keys.size(), 2);
  const StepPlan& p = r.plan(5, 1, keys, uses);
  check_plan(r, p, keys, 1);
  EXPECT_EQ(p.staged_bank, StagePlan::kTransitBank);
  EXPECT_EQ(p.plan.n_staged, 3u);
  const std::vector<int32_t> want_slot{2, 4, 5, 7, 0, 1};  // staged where staged; then 7, wrapping to 0, 1
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(p.plan.experts[i].staged, i < 3) << i;
    EXPECT_EQ(p.copy[i], i >= 3) << i;
    EXPECT_EQ(p.where[i].slot, cache_slots + want_slot[i]) << i;
  }
  EXPECT_EQ(p.prediction.predicted, 6u);
  EXPECT_EQ(p.prediction.staged, 6u);
  EXPECT_EQ(p.prediction.staged_used, 3u);
  EXPECT_EQ(r.counters().staged, 6u);
  // Used once: the layer's next plan has nothing staged.
  EXPECT_EQ(r.plan(6, 1, keys, uses).plan.n_staged, 0u);
}

TEST(ExpertResidency, PromptStagingSkipsResidentExpertsAndStopsAtTheTransitSlots) {
  ResidencyConfig c = config(48ull << 20, "layers");
  ExpertResidency r(c);
  r.initial_placement();
  uint32_t l = kLayers;  // a layer with resident and cold experts
  for (uint32_t q = 0; q < kLayers && l == kLayers; ++q) {
    uint32_t n = 0;
    for (uint32_t e = 0; e < kExperts; ++e) n += r.resident(q * kExperts + e);
    if (n > 0 && n + 10 <= kExperts) l = q;
  }
  ASSERT_LT(l, kLayers);
  std::vector<ExpertKey> all;
  uint32_t cold = 0;
  for (uint32_t e = 0; e < kExperts; ++e) {
    all.push_back(l * kExperts + e);
    cold += !r.resident(l * kExperts + e);
  }
  ASSERT_GT(cold, r.transit_slots());
  const StagePlan& sp = r.stage_transit(0, l, all, 100);
  EXPECT_EQ(sp.copies.size(), r.transit_slots());  // 8 transit slots hold at most 8
  std::set<int32_t> slots;
  for (const auto& [key, where] : sp.copies) {
    EXPECT_FALSE(r.resident(key));
    slots.insert(where.slot);
  }
  EXPECT_EQ(slots.size(), r.transit_slots());
  EXPECT_EQ(r.stage_transit(0, l, all, 3).copies.size(), 3u);  // max_experts; replaces the stage above
  EXPECT_THROW(r.stage_transit(0, l, std::vector<ExpertKey>{(l + 1) % kLayers * kExperts}, 4), Error);
  // A stage of another step is not this step's.
  r.stage_transit(0, l, all, 4);
  std::vector<ExpertKey> keys;
  for (const auto& [key, where] : r.stage_transit(1, l, all, 4).copies) keys.push_back(key);
  const std::vector<uint32_t> uses(keys.size(), 1);
  EXPECT_EQ(r.plan(2, l, keys, uses).plan.n_staged, 0u);
}

TEST(ExpertResidency, RejectsAModelWithoutExperts) {
  ResidencyConfig c = config(1 << 20);
  c.n_expert = 0;
  EXPECT_THROW(ExpertResidency r(c), Error);
}

}  // namespace
}  // namespace ms
