// Speculative verify steps (issue #42): the cache policies count only certain
// tokens' uses (CachePolicy::access_speculative) and take accepted drafts'
// uses later (CachePolicy::credit); rejected drafts teach them nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "experts/policy.h"
#include "experts/pools.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr uint32_t kKeys = 48;

PolicyOptions opts() {
  PolicyOptions o;
  o.n_keys = kKeys;
  o.admit_margin = 0.0;
  o.decay_halflife_steps = 16;  // short: decay matters within the test
  o.pinned = {3, 7, 11};        // used by the pinned+ policies only
  return o;
}

std::vector<ExpertKey> only(const std::vector<ExpertKey>& v, const std::vector<ExpertKey>& keep) {
  std::vector<ExpertKey> out;
  for (ExpertKey k : v)
    if (std::binary_search(keep.begin(), keep.end(), k)) out.push_back(k);
  return out;
}

// One random step: certain keys and uses, and draft tokens' extra uses, on
// keys the step's certain tokens chose or on keys not resident (where the
// step's working-set protection changes nothing).
struct Step {
  std::vector<ExpertKey> certain_keys, keys;
  std::vector<uint32_t> certain_uses, uses, certain;  // certain: per keys
};

Step random_step(std::mt19937& rng, const CachePolicy& spec) {
  Step s;
  std::uniform_int_distribution<uint32_t> key(0, kKeys - 1), n(1, 6), u(1, 4), coin(0, 2);
  // Skewed: low keys are hot, so policies keep and evict for reasons.
  for (uint32_t i = 0, m = n(rng); i < m; ++i) s.certain_keys.push_back(std::min(key(rng), key(rng)));
  std::sort(s.certain_keys.begin(), s.certain_keys.end());
  s.certain_keys.erase(std::unique(s.certain_keys.begin(), s.certain_keys.end()), s.certain_keys.end());
  for (size_t i = 0; i < s.certain_keys.size(); ++i) s.certain_uses.push_back(u(rng));
  std::vector<std::pair<ExpertKey, uint32_t>> drafts;  // key, extra uses
  for (uint32_t i = 0, m = n(rng); i < m; ++i) {
    const ExpertKey k = coin(rng) == 0 && !s.certain_keys.empty() ? s.certain_keys[key(rng) % s.certain_keys.size()]
                                                                 : key(rng);
    const bool certain_too = std::binary_search(s.certain_keys.begin(), s.certain_keys.end(), k);
    if (certain_too || !spec.contains(k)) drafts.push_back({k, u(rng)});
  }
  for (size_t i = 0; i < s.certain_keys.size(); ++i) drafts.push_back({s.certain_keys[i], 0});
  std::sort(drafts.begin(), drafts.end());
  for (const auto& [k, extra] : drafts) {
    if (!s.keys.empty() && s.keys.back() == k) {
      s.uses.back() += extra;
      continue;
    }
    s.keys.push_back(k);
    s.uses.push_back(extra);
    s.certain.push_back(0);
  }
  for (size_t i = 0; i < s.keys.size(); ++i) {
    const auto it = std::lower_bound(s.certain_keys.begin(), s.certain_keys.end(), s.keys[i]);
    if (it == s.certain_keys.end() || *it != s.keys[i]) continue;
    s.certain[i] = s.certain_uses[size_t(it - s.certain_keys.begin())];
    s.uses[i] += s.certain[i];
  }
  return s;
}

// The same accesses with rejected drafts (never credited) and without them
// leave every policy in the same state: the same residents after each step,
// the same decisions for the certain keys, and the drafts' own experts never
// admitted.
TEST(SpeculativeAccess, RejectedDraftsLeaveThePolicyAsWithoutThem) {
  for (const std::string& name : policy_names()) {
    SCOPED_TRACE(name);
    auto plain = make_policy(name, 10, opts());
    auto spec = make_policy(name, 10, opts());
    std::mt19937 rng(42);
    AccessResult a, b;
    uint64_t admitted = 0, draft_only = 0;
    for (uint64_t step = 0; step < 400; ++step) {
      const Step s = random_step(rng, *spec);
      plain->access(step, s.certain_keys, s.certain_uses, a);
      spec->access_speculative(step, s.keys, s.uses, s.certain, b);
      ASSERT_EQ(only(b.hits, s.certain_keys), a.hits) << "step " << step;
      ASSERT_EQ(only(b.misses, s.certain_keys), a.misses) << "step " << step;
      ASSERT_EQ(b.admitted, a.admitted) << "step " << step;
      ASSERT_EQ(b.evicted, a.evicted) << "step " << step;
      ASSERT_EQ(b.hits.size() + b.misses.size(), s.keys.size());
      ASSERT_EQ(spec->resident(), plain->resident()) << "step " << step;
      admitted += a.admitted.size();
      draft_only += s.keys.size() - s.certain_keys.size();
      if (step % 7 == 0) plain->settle(), spec->settle();
    }
    EXPECT_GT(draft_only, 100u);  // the test exercised drafts
    if (name.rfind("layers", 0) != 0) EXPECT_GT(admitted, 20u);  // ... and a cache that turns over
  }
}

// An expert that only drafts chose is served (a hit when resident), never
// admitted, and protected in its step; its recency is not refreshed.
TEST(SpeculativeAccess, DraftOnlyExpertIsProtectedButNotRefreshed) {
  auto p = make_policy("lru", 3, opts());
  AccessResult r;
  for (ExpertKey k : {1u, 2u, 3u}) {
    const ExpertKey one[1] = {k};
    p->access(k, one, {}, r);  // recency: 3 2 1
  }
  // Step 4: a certain token needs 4, a draft needs 1 (resident, the LRU) and 5.
  const ExpertKey keys[3] = {1, 4, 5};
  const uint32_t uses[3] = {1, 1, 1}, certain[3] = {0, 1, 0};
  p->access_speculative(4, keys, uses, certain, r);
  EXPECT_EQ(r.hits, (std::vector<ExpertKey>{1}));
  EXPECT_EQ(r.misses, (std::vector<ExpertKey>{4, 5}));
  EXPECT_EQ(r.admitted, (std::vector<ExpertKey>{4}));
  EXPECT_EQ(r.evicted, (std::vector<ExpertKey>{2}));  // 1 was the LRU, but in use
  EXPECT_FALSE(p->contains(5));
  // 1 was not refreshed by the draft (recency 4 3 1): it goes next, not 3.
  const ExpertKey k6[1] = {6};
  p->access(5, k6, {}, r);
  EXPECT_EQ(r.evicted, (std::vector<ExpertKey>{1}));
}

TEST(SpeculativeAccess, DraftOnlyMissIsNeverAdmittedEvenWithRoom) {
  for (const std::string& name : policy_names()) {
    SCOPED_TRACE(name);
    auto p = make_policy(name, 8, opts());
    AccessResult r;
    const ExpertKey keys[2] = {3, 20};  // 3 is pinned in pinned+ policies
    const uint32_t uses[2] = {2, 5}, certain[2] = {0, 0};
    p->access_speculative(0, keys, uses, certain, r);
    EXPECT_TRUE(r.admitted.empty());
    EXPECT_EQ(r.misses, (std::vector<ExpertKey>{3, 20}));
    EXPECT_EQ(p->size(), 0u);
  }
}

TEST(SpeculativeAccess, BadCountsAreErrors) {
  auto p = make_policy("lru", 4, opts());
  AccessResult r;
  const ExpertKey keys[2] = {1, 2};
  const uint32_t uses[2] = {1, 1}, too_many[2] = {1, 2}, short_list[1] = {1};
  EXPECT_THROW(p->access_speculative(0, keys, uses, too_many, r), Error);
  EXPECT_THROW(p->access_speculative(0, keys, uses, short_list, r), Error);
}

// A credited use counts as a use would: of two residents, the one an
// accepted draft used survives the next eviction.
TEST(SpeculativeCredit, AcceptedDraftKeepsItsExpert) {
  for (const std::string& name : policy_names()) {
    if (name.rfind("layers", 0) == 0) continue;  // a fixed set: no statistics
    SCOPED_TRACE(name);
    for (bool credit : {false, true}) {
      PolicyOptions o = opts();
      o.pinned.clear();
      o.decay_halflife_steps = 2048;
      auto p = make_policy(name, 2, o);
      AccessResult r;
      const ExpertKey k1[1] = {1}, k2[1] = {2}, k3[1] = {3};
      const uint32_t one[1] = {1}, four[1] = {4}, eight[1] = {8};
      p->access(0, k1, one, r);
      p->access(1, k2, one, r);
      if (credit) p->credit(2, k1, four);
      p->access(3, k3, eight, r);
      ASSERT_EQ(r.evicted.size(), 1u);
      EXPECT_EQ(r.evicted[0], credit ? 2u : 1u) << (credit ? "credited" : "not credited");
    }
  }
}

TEST(SpeculativeCredit, CreditAdmitsNothingAndLayersIgnoreIt) {
  for (const std::string& name : policy_names()) {
    SCOPED_TRACE(name);
    auto p = make_policy(name, 4, opts());
    const ExpertKey keys[2] = {5, 9};
    const uint32_t uses[2] = {3, 1};
    p->credit(0, keys, uses);
    EXPECT_EQ(p->size(), 0u);
  }
}

// PooledCache routes both to the pool of the step's layer (local keys).
TEST(SpeculativeAccess, PooledCacheSplitsAndCredits) {
  PoolLayout layout;
  layout.pools = {Pool{1, 2, {0}}, Pool{1, 2, {1}}};
  layout.pool_of_layer = {0, 1};
  PolicyOptions o;
  o.n_keys = 16;
  PooledCache c(layout, 8, "lru", o);
  AccessResult r;
  const ExpertKey a[1] = {9}, b[1] = {10};
  c.access(0, a, {}, r);
  c.access(1, b, {}, r);  // layer 1 holds 10, 9 (LRU: 9)
  const ExpertKey keys[2] = {9, 12};
  const uint32_t uses[2] = {1, 1}, certain[2] = {0, 0};
  c.access_speculative(2, keys, uses, certain, r);
  EXPECT_EQ(r.hits, (std::vector<ExpertKey>{9}));
  EXPECT_EQ(r.misses, (std::vector<ExpertKey>{12}));
  EXPECT_TRUE(r.admitted.empty());
  c.credit(2, a, {});  // the draft that chose 9 was accepted: 9 is recent now
  const ExpertKey d[1] = {11};
  c.access(3, d, {}, r);
  EXPECT_EQ(r.evicted, (std::vector<ExpertKey>{10}));
  const ExpertKey mixed[2] = {1, 9};
  EXPECT_THROW(c.credit(4, mixed, {}), Error);
}

}  // namespace
}  // namespace ms
