#include <gtest/gtest.h>

#include <set>

#include "experts/belady.h"
#include "experts/policy.h"

namespace ms {
namespace {

RequestSequence singles(const std::vector<ExpertKey>& keys) {
  RequestSequence r;
  for (ExpertKey k : keys) r.push(std::span<const ExpertKey>(&k, 1));
  return r;
}

TEST(Belady, ClassicExample) {
  // Capacity 3 on 7 0 1 2 0 3 0 4 2 3 0 3 2: MIN has 6 misses (9 with no
  // bypass is the textbook figure; bypass saves on 4 and lets 0 stay).
  const RequestSequence r = singles({7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2});
  EXPECT_EQ(belady_hits(r, 3, 8), brute_force_hits(r, 3));
  EXPECT_EQ(belady_hits(r, 3, 8), 7u);
}

TEST(Belady, ZeroCapacityAndEmpty) {
  const RequestSequence r = singles({1, 1, 1});
  EXPECT_EQ(belady_hits(r, 0, 4), 0u);
  EXPECT_EQ(belady_hits(RequestSequence{}, 4, 4), 0u);
  EXPECT_EQ(belady_hits(r, 1, 4), 2u);
}

TEST(Belady, MatchesBruteForceOnRandomSmallTraces) {
  uint64_t s = 7;
  auto rnd = [&](uint32_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t((s >> 33) % n);
  };
  int checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const uint32_t n_keys = 3 + rnd(5);      // 3..7 keys
    const size_t cap = 1 + rnd(3);           // 1..3 slots
    const uint32_t max_ws = 1 + rnd(3);      // working sets of 1..3 experts
    RequestSequence req;
    const int len = 6 + int(rnd(7));
    for (int i = 0; i < len; ++i) {
      std::set<ExpertKey> ws;
      const uint32_t n = 1 + rnd(max_ws);
      while (ws.size() < std::min(n, n_keys)) ws.insert(rnd(n_keys));
      std::vector<ExpertKey> v(ws.begin(), ws.end());
      req.push(v);
    }
    std::string dump;
    for (size_t i = 0; i < req.size(); ++i) {
      dump += "{";
      for (ExpertKey k : req[i]) dump += std::to_string(k) + " ";
      dump += "} ";
    }
    ASSERT_EQ(belady_hits(req, cap, n_keys), brute_force_hits(req, cap)) << "trial " << trial << " cap " << cap << ": " << dump;
    ++checked;
  }
  EXPECT_EQ(checked, 2000);
}

TEST(Belady, NoOnlinePolicyBeatsIt) {
  uint64_t s = 3;
  auto rnd = [&](uint32_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t((s >> 33) % n);
  };
  RequestSequence req;
  for (int i = 0; i < 3000; ++i) {
    std::set<ExpertKey> ws;
    while (ws.size() < 4) ws.insert(rnd(4) == 0 ? rnd(64) : rnd(12));
    std::vector<ExpertKey> v(ws.begin(), ws.end());
    req.push(v);
  }
  for (size_t cap : {4, 8, 16, 32}) {
    const uint64_t best = belady_hits(req, cap, 64);
    PolicyOptions o;
    o.n_keys = 64;
    for (const std::string& name : policy_names()) {
      if (name.rfind("pinned+", 0) == 0) continue;
      auto p = make_policy(name, cap, o);
      AccessResult r;
      uint64_t hits = 0;
      for (size_t i = 0; i < req.size(); ++i) {
        p->access(i, req[i], {}, r);
        hits += r.hits.size();
      }
      EXPECT_LE(hits, best) << name << " cap " << cap;
    }
  }
}

}  // namespace
}  // namespace ms
