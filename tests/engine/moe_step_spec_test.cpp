// MoeStep's speculative verify (issue #42): the draft tokens' experts are
// computed but do not count in the cache policy until confirm_drafts() says
// which drafts were kept; rejected drafts' routes never count.
#include <gtest/gtest.h>

#include <vector>

#include "engine/moe_step.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr int kExperts = 16, kTopK = 2;
constexpr uint64_t kSlot = 1u << 20;

// One MoE layer, 4 cache slots, LRU: which expert goes is easy to tell.
StepSchedulerOptions one_layer_lru(bool draft_credit = true) {
  StepSchedulerOptions o;
  ResidencyConfig& c = o.residency;
  c.n_layer = 1;
  c.n_expert = kExperts;
  c.k = kTopK;
  c.slot_bytes.assign(1, kSlot);
  c.pool_bytes = 4 * kSlot;
  c.transit_slots = 8;
  c.policy = "lru";
  o.tuning.prefetch = DecodePrefetch::Off;
  o.tuning.prompt_stage = false;
  o.tuning.draft_credit = draft_credit;
  return o;
}

class RouteTiers : public MoeTiers {
 public:
  std::vector<int32_t> ids;
  MoeRoutes fetch_routes(int, int, bool) override {
    MoeRoutes r;
    r.ids = ids.data();
    return r;
  }
  void compute_share(const MoeShare&) override {}
  void combine(int, int) override {}
};

struct Verifier {
  explicit Verifier(bool draft_credit = true) : sched(one_layer_lru(draft_credit)) {}
  StepScheduler sched;
  MoeStep step{kExperts, kTopK, &sched};
  RouteTiers tiers;
  uint64_t pass = 0;
  void forward(std::vector<int32_t> ids) {
    tiers.ids = std::move(ids);
    const int n = static_cast<int>(tiers.ids.size()) / kTopK;
    sched.begin_pass(n, false);
    step.run(pass++, 0, n, tiers);
    sched.end_pass();
  }
  bool resident(ExpertKey k) const { return sched.residency().resident(k); }
};

// accepted < 0: no ranks set (every token counts, as before issue #42).
void verify_then_one_more(Verifier& r, int accepted) {
  r.sched.initial_placement(false);
  r.step.set_report_times(false);
  r.forward({0, 1});
  r.forward({2, 3});  // full: LRU order 3 2 1 0
  // The fed token needs 4 and 5; draft 1 routes to 0 and 6, draft 2 to 1 and 7.
  const int32_t ranks[3] = {0, 1, 2};
  if (accepted >= 0) r.step.set_draft_ranks(ranks);
  r.forward({4, 5, 0, 6, 1, 7});
  if (accepted >= 0) {
    EXPECT_EQ(r.step.pending_draft_pairs(), 4u);
    r.step.confirm_drafts(accepted);
    EXPECT_EQ(r.step.pending_draft_pairs(), 0u);
  }
  r.forward({8, 9});
}

TEST(MoeStepSpeculative, DraftsAreServedButNeverAdmitted) {
  Verifier r;
  r.sched.initial_placement(false);
  r.forward({0, 1});
  r.forward({2, 3});
  const int32_t ranks[3] = {0, 1, 2};
  r.step.set_draft_ranks(ranks);
  r.forward({4, 5, 0, 6, 1, 7});
  // 4 and 5 took the slots of 2 and 3: 0 and 1 were in use by the drafts.
  for (ExpertKey k : {0u, 1u, 4u, 5u}) EXPECT_TRUE(r.resident(k)) << k;
  for (ExpertKey k : {2u, 3u, 6u, 7u}) EXPECT_FALSE(r.resident(k)) << k;
  const MoeStepTables& t = r.step.tables();
  ASSERT_EQ(t.keys.size(), 6u);
  EXPECT_EQ(t.certain, (std::vector<uint32_t>{0, 0, 1, 1, 0, 0}));  // keys 0 1 4 5 6 7
}

TEST(MoeStepSpeculative, OnlyAcceptedDraftsCount) {
  // Rejected (0 kept): 0 and 1 were not refreshed, 0 is the LRU: 8 and 9 take 0 and 1.
  Verifier rejected;
  verify_then_one_more(rejected, 0);
  EXPECT_FALSE(rejected.resident(0));
  EXPECT_FALSE(rejected.resident(1));
  // Draft 1 kept: its use of 0 counts (0 is recent), 1 is still stale.
  Verifier one;
  verify_then_one_more(one, 1);
  EXPECT_TRUE(one.resident(0));
  EXPECT_FALSE(one.resident(1));
  EXPECT_TRUE(one.resident(5));
  EXPECT_FALSE(one.resident(4));
  // Both kept: 0 and 1 recent, 4 and 5 go.
  Verifier both;
  verify_then_one_more(both, 2);
  EXPECT_TRUE(both.resident(0));
  EXPECT_TRUE(both.resident(1));
  EXPECT_FALSE(both.resident(4));
}

TEST(MoeStepSpeculative, WithoutRanksDraftsEvictAndAreAdmitted) {
  for (bool ranked : {false, true}) {
    Verifier r;
    r.sched.initial_placement(false);
    r.forward({0, 1});
    const int32_t ranks[2] = {0, 1};
    if (ranked) r.step.set_draft_ranks(ranks);
    r.forward({2, 3, 6, 7});  // the fed token needs 2 and 3, the draft 6 and 7
    EXPECT_EQ(r.resident(6), !ranked);
    EXPECT_EQ(r.resident(7), !ranked);
    EXPECT_EQ(r.resident(0), ranked);  // evicted for the draft's experts when unranked
    EXPECT_TRUE(r.resident(2));
  }
  // StepTuning::draft_credit off: ranked drafts count when routed, as unranked ones.
  Verifier off(false);
  off.sched.initial_placement(false);
  off.forward({0, 1});
  const int32_t ranks[2] = {0, 1};
  off.step.set_draft_ranks(ranks);
  off.forward({2, 3, 6, 7});
  EXPECT_TRUE(off.resident(6));
  EXPECT_FALSE(off.resident(0));
  EXPECT_EQ(off.step.pending_draft_pairs(), 0u);
  off.step.confirm_drafts(1);  // credits nothing: nothing was held back
}

TEST(MoeStepSpeculative, RanksMustMatchThePass) {
  Verifier r;
  r.sched.initial_placement(false);
  const int32_t ranks[2] = {0, 1};
  r.step.set_draft_ranks(ranks);
  EXPECT_THROW(r.forward({4, 5, 0, 6, 1, 7}), Error);
}

}  // namespace
}  // namespace ms
