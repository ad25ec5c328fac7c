#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "experts/policy.h"
#include "util/error.h"

namespace ms {
namespace {

PolicyOptions opts(uint32_t n_keys = 64) {
  PolicyOptions o;
  o.n_keys = n_keys;
  return o;
}

// Runs single-key requests; returns the hit pattern as a string of H/M.
std::string run(CachePolicy& p, const std::vector<ExpertKey>& seq) {
  std::string pattern;
  AccessResult r;
  uint64_t step = 0;
  for (ExpertKey k : seq) {
    const ExpertKey key[1] = {k};
    p.access(step++, key, {}, r);
    pattern += r.hits.empty() ? 'M' : 'H';
  }
  return pattern;
}

TEST(Lru, KnownAnswer) {
  auto p = make_policy("lru", 2, opts());
  // 1 2 1 3 (evicts 2) 2 (evicts 1) 1 (evicts 3) 2
  EXPECT_EQ(run(*p, {1, 2, 1, 3, 2, 1, 2}), "MMHMMMH");
  EXPECT_EQ(p->resident(), (std::vector<ExpertKey>{1, 2}));
}

TEST(Lru, NeverEvictsTheWorkingSet) {
  auto p = make_policy("lru", 3, opts());
  AccessResult r;
  const ExpertKey a[3] = {1, 2, 3};
  p->access(0, a, {}, r);
  EXPECT_EQ(r.admitted.size(), 3u);
  const ExpertKey b[4] = {1, 2, 3, 4};  // 4 needs a slot, but 1..3 are in use
  p->access(1, b, {}, r);
  EXPECT_EQ(r.hits.size(), 3u);
  EXPECT_TRUE(r.admitted.empty());  // bypassed
  EXPECT_TRUE(r.evicted.empty());
  EXPECT_FALSE(p->contains(4));
}

TEST(Slru, ProtectedSurviveAScan) {
  auto slru = make_policy("slru", 4, opts());
  auto lru = make_policy("lru", 4, opts());
  // 1 and 2 used twice (protected), then a scan of one-off keys, then 1, 2 again.
  const std::vector<ExpertKey> seq = {1, 2, 1, 2, 10, 11, 12, 13, 14, 1, 2};
  EXPECT_EQ(run(*slru, seq), "MMHHMMMMMHH");
  EXPECT_EQ(run(*lru, seq), "MMHHMMMMMMM");
}

TEST(Lfu, FrequentExpertSurvivesAndHysteresisBypasses) {
  auto p = make_policy("lfu", 2, opts());
  // 1 x3, 2 x2, then 3 once: 3's count (1) cannot beat 2's (2): bypassed.
  EXPECT_EQ(run(*p, {1, 1, 1, 2, 2, 3, 1, 2}), "MHHMHMHH");
  EXPECT_FALSE(p->contains(3));
  // 3 again (count 2 < 3), then tying 2's count 3: still bypassed (it must
  // beat the victim); at count 4 it is admitted (that access is still a miss).
  EXPECT_EQ(run(*p, {3, 3, 3}), "MMM");
  EXPECT_TRUE(p->contains(3));
  EXPECT_FALSE(p->contains(2));
}

TEST(LfuDecay, OldPopularityFades) {
  PolicyOptions o = opts();
  o.decay_halflife_steps = 2;  // halves every 2 steps
  auto p = make_policy("lfu-decay", 1, o);
  AccessResult r;
  const ExpertKey one[1] = {1}, two[1] = {2};
  for (int s = 0; s < 10; ++s) p->access(s, one, {}, r);  // score of 1 ~ 3.4 at step 9
  p->access(40, two, {}, r);                              // 1 decayed to ~0: 2 wins at once
  EXPECT_EQ(r.admitted, std::vector<ExpertKey>{2});
  EXPECT_EQ(r.evicted, std::vector<ExpertKey>{1});
  auto plain = make_policy("lfu", 1, opts());
  for (int s = 0; s < 10; ++s) plain->access(s, one, {}, r);
  plain->access(40, two, {}, r);
  EXPECT_TRUE(r.admitted.empty());  // no decay: 1 keeps its slot
}

TEST(LfuDecay, AdmitMarginNeedsAClearWin) {
  PolicyOptions o = opts();
  o.admit_margin = 1.0;  // newcomer needs twice the victim's score
  auto p = make_policy("lfu", 1, o);
  // 2 is admitted at count 3 > 2 * 1 (a miss), then hits.
  EXPECT_EQ(run(*p, {1, 2, 2, 2, 2}), "MMMMH");
}

TEST(Pinned, PinnedKeysStayAndDynamicPartWorks) {
  PolicyOptions o = opts();
  o.pinned = {5, 6};
  o.pin_fraction = 1.0;
  auto p = make_policy("pinned+lru", 3, o);
  EXPECT_EQ(p->name(), "pinned+lru");
  // One dynamic slot: 1, 2, 1 thrash it; 5 and 6 are kept once loaded.
  EXPECT_EQ(run(*p, {5, 1, 2, 6, 5, 1, 6, 2}), "MMMMHMHM");
  EXPECT_TRUE(p->contains(5));
  EXPECT_TRUE(p->contains(6));
  EXPECT_LE(p->size(), 3u);
  // The pin budget caps pinned slots: with pin_fraction 0.5 only the first (hottest) key is pinned.
  o.pin_fraction = 0.5;
  auto q = make_policy("pinned+lru", 2, o);
  EXPECT_EQ(run(*q, {5, 6, 1, 5, 6}), "MMMHM");
}

TEST(Policies, UnknownNamesAreErrors) {
  EXPECT_THROW(make_policy("mru", 4, opts()), Error);
  EXPECT_THROW(make_policy("pinned+mru", 4, opts()), Error);
  EXPECT_THROW(make_policy("lru", 4, PolicyOptions{}), Error);  // n_keys unset
  EXPECT_EQ(make_policy("default", 4, opts())->name(), default_policy_name());
}

// Invariants every policy must keep, on random working sets.
TEST(Policies, InvariantsOnRandomSequences) {
  uint64_t s = 99;
  auto rnd = [&](uint32_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t((s >> 33) % n);
  };
  for (const std::string& name : policy_names()) {
    for (size_t cap : {0, 1, 3, 8}) {
      PolicyOptions o = opts(40);
      o.pinned = {3, 7, 11};
      o.decay_halflife_steps = 8;
      o.admit_margin = 0.1;
      auto p = make_policy(name, cap, o);
      auto twin = make_policy(name, cap, o);
      AccessResult r, r2;
      for (uint64_t step = 0; step < 400; ++step) {
        std::set<ExpertKey> ws;
        const uint32_t n = 1 + rnd(5);
        while (ws.size() < n) ws.insert(rnd(step % 100 < 50 ? 12 : 40));
        std::vector<ExpertKey> keys(ws.begin(), ws.end());
        std::vector<uint32_t> uses(keys.size());
        for (auto& u : uses) u = 1 + rnd(3);
        const std::vector<ExpertKey> before = p->resident();
        p->access(step, keys, uses, r);
        twin->access(step, keys, uses, r2);
        // Deterministic, and the same whether or not the caller settles the
        // deferred bookkeeping in between (p settles on odd steps, twice).
        if (step % 2 == 1) p->settle(), p->settle();
        ASSERT_EQ(r.hits, r2.hits) << name;
        ASSERT_EQ(r.admitted, r2.admitted) << name;
        ASSERT_EQ(r.evicted, r2.evicted) << name;
        ASSERT_EQ(r.hits.size() + r.misses.size(), keys.size()) << name;
        for (ExpertKey k : r.hits) ASSERT_TRUE(std::binary_search(before.begin(), before.end(), k)) << name;
        for (ExpertKey k : r.misses) ASSERT_FALSE(std::binary_search(before.begin(), before.end(), k)) << name;
        for (ExpertKey k : r.evicted) {
          ASSERT_FALSE(ws.count(k)) << name << ": evicted a key of the working set";
          ASSERT_FALSE(p->contains(k)) << name;
        }
        for (ExpertKey k : r.admitted) {
          ASSERT_TRUE(std::find(r.misses.begin(), r.misses.end(), k) != r.misses.end()) << name;
          ASSERT_TRUE(p->contains(k)) << name;
        }
        for (ExpertKey k : r.hits) ASSERT_TRUE(p->contains(k)) << name;
        ASSERT_LE(p->size(), cap) << name;
        const std::vector<ExpertKey> after = p->resident();
        ASSERT_EQ(after.size(), p->size()) << name;
        // Prefetch: never evicts a protected key, respects capacity.
        if (step % 7 == 0) {
          std::vector<ExpertKey> ev;
          const ExpertKey cand = rnd(40);
          const bool in = p->prefetch(step, cand, 0.9f, keys, ev);
          for (ExpertKey k : ev) ASSERT_FALSE(ws.count(k)) << name;
          ASSERT_EQ(in, p->contains(cand)) << name;
          ASSERT_LE(p->size(), cap) << name;
          std::vector<ExpertKey> ev2;
          twin->prefetch(step, cand, 0.9f, keys, ev2);
          ASSERT_EQ(ev, ev2) << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ms
