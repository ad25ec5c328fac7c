// Attention over a token tree (attention_tree: a speculative verify of
// several candidate continuations, docs/speculative.md "Draft trees"): each
// token's output is bit-equal to attention() over a cache that holds its
// path (the prefix, then its ancestors and itself at consecutive positions),
// for the three cache types, with and without a sliding window and sinks,
// serial and threaded; the threaded SIMD version against the double
// reference; slots of other branches set to NaN are never read; bad parents
// are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "attention_test_util.h"
#include "cpu/attention.h"
#include "cpu/kv_rows.h"
#include "cpu/thread_pool.h"
#include "quant/blocks.h"
#include "quant/half.h"
#include "util/error.h"

namespace ms {
namespace {

using attntest::gaussian;

int64_t units(const uint16_t*, int d) { return d; }
int64_t units(const float*, int d) { return d; }
int64_t units(const BlockQ8_0*, int d) { return d / QK; }

// A contiguous [n_kv][ctx] cache of T rows.
template <typename T>
struct Cache {
  int n_kv, d;
  int64_t ctx;
  std::vector<T> k, v;
  Cache(int n_kv_, int d_, int64_t ctx_) : n_kv(n_kv_), d(d_), ctx(ctx_) {
    const size_t n = static_cast<size_t>(n_kv * ctx * units(static_cast<T*>(nullptr), d));
    k.resize(n);
    v.resize(n);
  }
  KvRows<T> kr() { return contiguous_rows(k.data(), ctx, units(k.data(), d)); }
  KvRows<T> vr() { return contiguous_rows(v.data(), ctx, units(v.data(), d)); }
  // Row `from` of src to row `to` here, every head, K and V.
  void copy_row(Cache& src, int64_t from, int64_t to) {
    const size_t bytes = static_cast<size_t>(units(k.data(), d)) * sizeof(T);
    for (int h = 0; h < n_kv; ++h) {
      std::memcpy(kr().row(h, to), src.kr().row(h, from), bytes);
      std::memcpy(vr().row(h, to), src.vr().row(h, from), bytes);
    }
  }
};

// A tree of 12 tokens over a prefix: two roots' subtrees, a deep chain, siblings.
const std::vector<int32_t> kParents = {-1, 0, 0, 1, 1, 2, 3, 3, -1, 8, 6, 10};

std::vector<int32_t> path_of(int t) {
  std::vector<int32_t> p;
  for (int a = t; a >= 0; a = kParents[static_cast<size_t>(a)]) p.insert(p.begin(), a);
  return p;
}

template <typename T>
void check_type(ThreadPool& pool, int64_t pos0, int window, bool sinks) {
  const int n_head = 8, n_kv = 2, d = 64;
  const int n = static_cast<int>(kParents.size());
  const int64_t ctx = pos0 + n + 4;
  const AttentionShape s{n_head, n_kv, d, ctx, 1.0f / std::sqrt(float(d))};
  Cache<T> tree(n_kv, d, ctx);
  const std::vector<float> k = gaussian(static_cast<int64_t>(pos0 + n) * n_kv * d, 11),
                           v = gaussian(static_cast<int64_t>(pos0 + n) * n_kv * d, 12);
  kv_store(s, k.data(), v.data(), static_cast<int>(pos0 + n), 0, tree.kr(), tree.vr());
  const std::vector<float> q = gaussian(static_cast<int64_t>(n) * n_head * d, 13, 2.f);
  const std::vector<float> sink_logits = gaussian(n_head, 14, 2.f);
  AttentionExtras x;
  x.window = window;
  x.sinks = sinks ? sink_logits.data() : nullptr;
  std::vector<float> out(q.size(), NAN), ref(q.size(), NAN);
  attention_tree(pool, s, q.data(), tree.kr(), tree.vr(), n, pos0, kParents.data(), out.data(), x);
  attention_tree_ref(s, q.data(), tree.kr(), tree.vr(), n, pos0, kParents.data(), ref.data(), x);
  const std::string what = "pos0 " + std::to_string(pos0) + ", window " + std::to_string(window) +
                           (sinks ? ", sinks" : "");
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, double(std::fabs(out[i] - ref[i])));
  EXPECT_LT(worst, 2e-5) << "against the double reference, " << what;
  for (int t = 0; t < n; ++t) {
    // The token's path at consecutive positions; every other row poisoned.
    const std::vector<int32_t> path = path_of(t);
    Cache<T> chain(n_kv, d, ctx);
    const std::vector<float> nan_rows(static_cast<size_t>(ctx) * n_kv * d, NAN);
    kv_store(s, nan_rows.data(), nan_rows.data(), static_cast<int>(ctx), 0, chain.kr(), chain.vr());
    for (int64_t j = 0; j < pos0; ++j) chain.copy_row(tree, j, j);
    for (size_t i = 0; i < path.size(); ++i) chain.copy_row(tree, pos0 + path[i], pos0 + static_cast<int64_t>(i));
    const int64_t pos = pos0 + static_cast<int64_t>(path.size()) - 1;
    std::vector<float> one(static_cast<size_t>(n_head) * d, NAN);
    attention(pool, s, q.data() + static_cast<size_t>(t) * n_head * d, chain.kr(), chain.vr(), 1, pos, one.data(), x);
    EXPECT_EQ(0, std::memcmp(one.data(), out.data() + static_cast<size_t>(t) * n_head * d, one.size() * sizeof(float)))
        << "token " << t << " against its path as a chain, " << what;
  }
}

TEST(AttentionTree, EachTokenIsItsPathsChainBitForBit) {
  ThreadPool serial(1), pool(2);
  for (ThreadPool* p : {&serial, &pool})
    for (int64_t pos0 : {0, 1, 37})
      for (int window : {0, 3, 8})
        for (bool sinks : {false, true}) {
          check_type<uint16_t>(*p, pos0, window, sinks);
          check_type<float>(*p, pos0, window, sinks);
          check_type<BlockQ8_0>(*p, pos0, window, sinks);
        }
}

TEST(AttentionTree, OtherBranchesAreNeverRead) {
  // Slots of nodes that are not token 11's ancestors hold NaN: its output
  // stays finite (a read of one would poison it).
  ThreadPool pool(2);
  const int n_head = 4, n_kv = 2, d = 32, n = static_cast<int>(kParents.size());
  const int64_t pos0 = 5, ctx = pos0 + n;
  const AttentionShape s{n_head, n_kv, d, ctx, 1.0f / std::sqrt(float(d))};
  Cache<float> c(n_kv, d, ctx);
  std::vector<float> k = gaussian(ctx * n_kv * d, 1), v = gaussian(ctx * n_kv * d, 2);
  const std::vector<int32_t> keep = path_of(11);
  for (int t = 0; t < n; ++t)
    if (std::find(keep.begin(), keep.end(), t) == keep.end())
      for (int i = 0; i < n_kv * d; ++i) k[static_cast<size_t>((pos0 + t) * n_kv * d + i)] = v[static_cast<size_t>((pos0 + t) * n_kv * d + i)] = NAN;
  kv_store(s, k.data(), v.data(), static_cast<int>(ctx), 0, c.kr(), c.vr());
  const std::vector<float> q = gaussian(static_cast<int64_t>(n) * n_head * d, 3);
  std::vector<float> out(q.size(), NAN);
  attention_tree(pool, s, q.data(), c.kr(), c.vr(), n, pos0, kParents.data(), out.data());
  for (int i = 0; i < n_head * d; ++i) EXPECT_TRUE(std::isfinite(out[static_cast<size_t>(11 * n_head * d + i)]));
}

TEST(AttentionTree, BadParentsAreErrors) {
  ThreadPool pool(1);
  const AttentionShape s{2, 1, 32, 16, 0.2f};
  Cache<float> c(1, 32, 16);
  const std::vector<float> q(3 * 2 * 32, 0.f);
  std::vector<float> out(q.size());
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{-1, 1, 0}, {-1, 0, 2}, {-2, 0, 1}, {0, -1, -1}}) {
    EXPECT_THROW(attention_tree(pool, s, q.data(), c.kr(), c.vr(), 3, 4, bad.data(), out.data()), Error);
    EXPECT_THROW(attention_tree_ref(s, q.data(), c.kr(), c.vr(), 3, 4, bad.data(), out.data()), Error);
  }
}

}  // namespace
}  // namespace ms
