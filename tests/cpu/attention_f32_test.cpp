// Attention over the F32 cache (the --kv-type f32 parity path): the threaded
// SIMD version against the double-precision reference, with cache positions
// past the causal range and the outputs poisoned; bit-for-bit agreement with
// the F16 path when the F32 cache holds the same (half-representable) values;
// and kv_store copying exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attention_test_util.h"
#include "cpu/attention.h"
#include "cpu/thread_pool.h"
#include "quant/half.h"

namespace ms {
namespace {

using attntest::Case;
using attntest::gaussian;
using attntest::shape;

// GQA groups of 1..8, head sizes around the SIMD widths (8, 16) and odd ones,
// prefill and decode, starts at 0 and deep in the context.
const Case kCases[] = {{4, 4, 8, 16, 1, 0},       {8, 2, 64, 40, 1, 33}, {6, 3, 24, 50, 7, 10},
                       {32, 4, 128, 300, 3, 250}, {2, 1, 12, 9, 9, 0},   {4, 2, 17, 20, 2, 5},
                       {8, 1, 1, 11, 4, 3},       {3, 3, 5, 6, 6, 0},    {16, 2, 33, 70, 13, 40}};

// A cache with positions pos0+n_tokens.. (never written yet) set to NaN:
// reading any of them would poison the output.
std::vector<float> cache(const Case& c, uint32_t seed) {
  std::vector<float> kc = gaussian(size_t(c.n_kv) * c.ctx * c.head_dim, seed);
  for (int h = 0; h < c.n_kv; ++h)
    for (int64_t p = c.pos0 + c.n_tokens; p < c.ctx; ++p)
      for (int i = 0; i < c.head_dim; ++i) kc[(h * c.ctx + p) * c.head_dim + i] = NAN;
  return kc;
}

TEST(AttentionF32, FastMatchesReference) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    const AttentionShape s = shape(c);
    const std::vector<float> k = cache(c, 1), v = cache(c, 2);
    for (float q_sd : {1.f, 8.f}) {  // 8: peaked softmax (scores in the tens)
      const std::vector<float> q = gaussian(size_t(c.n_tokens) * c.n_head * c.head_dim, 3, q_sd);
      std::vector<float> ref(q.size(), NAN), fast(q.size(), NAN);
      attention_ref(s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, ref.data());
      attention(pool, s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, fast.data());
      for (size_t i = 0; i < q.size(); ++i) {
        ASSERT_TRUE(std::isfinite(ref[i])) << "head_dim " << c.head_dim << " i " << i;
        ASSERT_NEAR(fast[i], ref[i], 2e-5f) << "head_dim " << c.head_dim << " q_sd " << q_sd << " i " << i;
      }
    }
  }
}

TEST(AttentionF32, ThreadCountDoesNotChangeResults) {
  // Large enough to be split over the pool (see the size cut in attention()).
  const Case c{16, 4, 64, 200, 24, 150};
  const AttentionShape s = shape(c);
  const std::vector<float> k = cache(c, 4), v = cache(c, 5);
  const std::vector<float> q = gaussian(size_t(c.n_tokens) * c.n_head * c.head_dim, 6);
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> out(q.size(), NAN);
    attention(pool, s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, out.data());
    if (first.empty()) first = out;
    else EXPECT_EQ(out, first) << threads << " threads";
  }
}

TEST(AttentionF32, SameValuesGiveTheF16PathsResultsExactly) {
  // Holding halves, the F32 cache must be the same algorithm as the F16 one:
  // identical reference and (same kernels, same order) identical fast output.
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    const AttentionShape s = shape(c);
    std::vector<float> kf = gaussian(size_t(c.n_kv) * c.ctx * c.head_dim, 7), vf = gaussian(kf.size(), 8);
    std::vector<uint16_t> kh(kf.size()), vh(kf.size());
    for (size_t i = 0; i < kf.size(); ++i) {
      kh[i] = f32_to_f16(kf[i]), vh[i] = f32_to_f16(vf[i]);
      kf[i] = f16_to_f32(kh[i]), vf[i] = f16_to_f32(vh[i]);
    }
    const std::vector<float> q = gaussian(size_t(c.n_tokens) * c.n_head * c.head_dim, 9);
    std::vector<float> ref_h(q.size()), ref_f(q.size()), fast_h(q.size()), fast_f(q.size());
    attention_ref(s, q.data(), kh.data(), vh.data(), c.n_tokens, c.pos0, ref_h.data());
    attention_ref(s, q.data(), kf.data(), vf.data(), c.n_tokens, c.pos0, ref_f.data());
    attention(pool, s, q.data(), kh.data(), vh.data(), c.n_tokens, c.pos0, fast_h.data());
    attention(pool, s, q.data(), kf.data(), vf.data(), c.n_tokens, c.pos0, fast_f.data());
    EXPECT_EQ(ref_f, ref_h) << "head_dim " << c.head_dim;
    EXPECT_EQ(fast_f, fast_h) << "head_dim " << c.head_dim;
  }
}

TEST(AttentionF32, SinglePositionReturnsTheValueUnrounded) {
  // One position: softmax weight 1, so out is v exactly (0.1f etc. are not
  // halves; the F16 cache would round them).
  ThreadPool pool(2);
  const AttentionShape s{4, 2, 9, 4, 0.35f};
  std::vector<float> k = gaussian(2 * 4 * 9, 10), v = gaussian(k.size(), 11);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * float(i) + 1e-4f;
  const std::vector<float> q = gaussian(4 * 9, 12);
  std::vector<float> ref(q.size(), NAN), fast(q.size(), NAN);
  attention_ref(s, q.data(), k.data(), v.data(), 1, 0, ref.data());
  attention(pool, s, q.data(), k.data(), v.data(), 1, 0, fast.data());
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 9; ++i) {
      EXPECT_EQ(ref[h * 9 + i], v[(h / 2) * 4 * 9 + i]);
      EXPECT_EQ(fast[h * 9 + i], v[(h / 2) * 4 * 9 + i]);
    }
}

TEST(AttentionF32, KvStoreCopiesExactly) {
  // Values a half cannot hold (beyond 65504, below its subnormals, 1 + 2^-20)
  // come back bit for bit; -0 keeps its sign.
  const AttentionShape s{2, 3, 7, 6, 1.f};
  std::vector<float> k = gaussian(2 * 3 * 7, 13), v = gaussian(k.size(), 14);
  k[0] = 1e6f, k[1] = 1e-30f, k[2] = 1.0f + 0x1p-20f, k[3] = -0.0f;
  v[5] = std::numeric_limits<float>::denorm_min();
  const float sentinel = -12345.f;
  std::vector<float> kc(3 * 6 * 7, sentinel), vc(kc.size(), sentinel);
  kv_store(s, k.data(), v.data(), 2, 3, kc.data(), vc.data());
  for (int h = 0; h < 3; ++h)
    for (int64_t p = 0; p < 6; ++p)
      for (int i = 0; i < 7; ++i) {
        const size_t at = (h * 6 + p) * 7 + i;
        if (p < 3 || p > 4) {  // positions 0..2 and 5 untouched
          EXPECT_EQ(kc[at], sentinel);
          EXPECT_EQ(vc[at], sentinel);
          continue;
        }
        const size_t from = ((p - 3) * 3 + h) * 7 + i;
        EXPECT_EQ(std::memcmp(&kc[at], &k[from], 4), 0) << at;
        EXPECT_EQ(std::memcmp(&vc[at], &v[from], 4), 0) << at;
      }
}

}  // namespace
}  // namespace ms
