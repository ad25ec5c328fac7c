// Attention over the F16 cache: the threaded SIMD version against the scalar
// reference, and the reference against facts (one position -> output is v).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention_test_util.h"
#include "cpu/attention.h"
#include "cpu/thread_pool.h"
#include "quant/half.h"

namespace ms {
namespace {

using attntest::Case;
using attntest::shape;

void fill_cache(std::vector<uint16_t>& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (auto& h : c) h = f32_to_f16(dist(rng));
}

TEST(Attention, FastMatchesReference) {
  ThreadPool pool(2);
  const Case cases[] = {{4, 4, 8, 16, 1, 0},   {8, 2, 64, 40, 1, 33},  {6, 3, 24, 50, 7, 10},
                        {32, 4, 128, 300, 3, 250}, {2, 1, 12, 9, 9, 0}, {4, 2, 17, 20, 2, 5}};
  for (const Case& c : cases) {
    const AttentionShape s = shape(c);
    std::vector<uint16_t> k(size_t(c.n_kv) * c.ctx * c.head_dim), v(k.size());
    fill_cache(k, 1);
    fill_cache(v, 2);
    std::vector<float> q(size_t(c.n_tokens) * c.n_head * c.head_dim);
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.f, 1.f);
    for (auto& x : q) x = dist(rng);
    std::vector<float> ref(q.size()), fast(q.size(), NAN);
    attention_ref(s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, ref.data());
    attention(pool, s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, fast.data());
    for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(fast[i], ref[i], 2e-5f) << "head_dim " << c.head_dim << " i " << i;
  }
}

TEST(Attention, SinglePositionReturnsValue) {
  AttentionShape s{4, 2, 8, 4, 0.35f};
  std::vector<uint16_t> k(2 * 4 * 8), v(k.size());
  fill_cache(k, 4);
  fill_cache(v, 5);
  std::vector<float> q(4 * 8, 0.7f), out(q.size());
  attention_ref(s, q.data(), k.data(), v.data(), 1, 0, out.data());
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out[h * 8 + i], f16_to_f32(v[(h / 2) * 4 * 8 + i]));
}

TEST(Attention, KvStoreRoundTripsThroughHalves) {
  AttentionShape s{2, 2, 8, 5, 1.f};
  std::vector<float> k(2 * 2 * 8), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) k[i] = 0.25f * float(i), v[i] = -0.5f * float(i);
  std::vector<uint16_t> kc(2 * 5 * 8, 0xffff), vc(kc.size(), 0xffff);
  kv_store(s, k.data(), v.data(), 2, 3, kc.data(), vc.data());
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(f16_to_f32(kc[(h * 5 + 3 + t) * 8 + i]), k[(t * 2 + h) * 8 + i]);
        EXPECT_EQ(f16_to_f32(vc[(h * 5 + 3 + t) * 8 + i]), v[(t * 2 + h) * 8 + i]);
      }
  EXPECT_EQ(kc[0], 0xffff);  // positions 0..2 untouched
}

}  // namespace
}  // namespace ms
