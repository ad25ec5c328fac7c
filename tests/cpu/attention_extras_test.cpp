// Attention sinks and the sliding window (AttentionExtras, gpt-oss) on the
// CPU: the double reference against facts written out independently (a
// window is the full attention of a cache holding only the window's rows; a
// sink over one key gives v / (1 + e^(sink - score)); huge negative sinks and
// windows past the start change nothing), then the threaded SIMD version
// against the reference for the three cache types, with poisoned outputs and
// cache rows before the window and past the causal range set to NaN (reading
// one would poison the result).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "attention_test_util.h"
#include "cpu/attention.h"
#include "cpu/thread_pool.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "util/error.h"

namespace ms {
namespace {

using attntest::Case;
using attntest::gaussian;
using attntest::shape;

// GQA 1..8, head sizes a multiple of 32 (q8_0 takes them), prefill and decode,
// pos0 0 and deep, odd lengths.
const Case kCases[] = {{4, 4, 32, 40, 1, 33},    {8, 2, 64, 70, 17, 0},  {6, 3, 96, 50, 7, 10},
                       {16, 2, 64, 300, 37, 250}, {2, 1, 32, 29, 29, 0}, {8, 1, 128, 150, 5, 131}};
const int kWindows[] = {0, 1, 3, 8, 33, 128, 1000};

std::vector<float> random_sinks(int n_head, uint32_t seed) {
  std::vector<float> s = gaussian(n_head, seed, 2.f);
  s[0] = 40.f;  // far above every score: nearly all the mass goes to the sink
  if (n_head > 1) s[1] = -40.f;
  return s;
}

TEST(AttentionExtras, WindowIsFullAttentionOverTheWindowsRows) {
  // Query at position p with window W == the same query as the last token of a
  // cache holding only rows p-W+1 .. p (no window), for every p of a prompt.
  const Case c{4, 2, 32, 60, 23, 30};
  const AttentionShape s = shape(c);
  const std::vector<float> k = gaussian(size_t(c.n_kv) * c.ctx * c.head_dim, 1),
                           v = gaussian(k.size(), 2);
  const std::vector<float> q = gaussian(size_t(c.n_tokens) * c.n_head * c.head_dim, 3, 2.f);
  const std::vector<float> sinks = random_sinks(c.n_head, 4);
  for (int w : {1, 5, 16, 40}) {
    for (bool with_sinks : {false, true}) {
      AttentionExtras x;
      x.window = w;
      x.sinks = with_sinks ? sinks.data() : nullptr;
      std::vector<float> out(q.size(), NAN);
      attention_ref(s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, out.data(), x);
      for (int t = 0; t < c.n_tokens; ++t) {
        const int64_t p = c.pos0 + t, first = std::max<int64_t>(0, p - w + 1), n = p - first + 1;
        AttentionShape sw = s;
        sw.ctx = n;
        std::vector<float> kw(size_t(c.n_kv) * n * c.head_dim), vw(kw.size());
        for (int h = 0; h < c.n_kv; ++h) {
          std::memcpy(&kw[size_t(h * n * c.head_dim)], &k[size_t((h * c.ctx + first) * c.head_dim)],
                      sizeof(float) * size_t(n * c.head_dim));
          std::memcpy(&vw[size_t(h * n * c.head_dim)], &v[size_t((h * c.ctx + first) * c.head_dim)],
                      sizeof(float) * size_t(n * c.head_dim));
        }
        AttentionExtras xs;
        xs.sinks = x.sinks;
        std::vector<float> one(size_t(c.n_head) * c.head_dim, NAN);
        attention_ref(sw, q.data() + size_t(t) * c.n_head * c.head_dim, kw.data(), vw.data(), 1, n - 1, one.data(),
                      xs);
        for (size_t i = 0; i < one.size(); ++i)
          ASSERT_EQ(out[size_t(t) * one.size() + i], one[i]) << "window " << w << " token " << t << " i " << i;
      }
    }
  }
}

TEST(AttentionExtras, SinkOverOneKeyScalesTheValue) {
  // One key: p = e^score / (e^score + e^sink), out = p * v.
  const AttentionShape s{3, 1, 32, 4, 0.25f};
  const std::vector<float> k = gaussian(4 * 32, 5), v = gaussian(k.size(), 6), q = gaussian(3 * 32, 7);
  const float sinks[3] = {-1.5f, 0.f, 2.25f};
  AttentionExtras x;
  x.sinks = sinks;
  std::vector<float> out(q.size(), NAN);
  attention_ref(s, q.data(), k.data(), v.data(), 1, 0, out.data(), x);
  for (int h = 0; h < 3; ++h) {
    double score = 0;
    for (int i = 0; i < 32; ++i) score += double(q[h * 32 + i]) * k[i];
    score *= s.scale;
    const double p = 1.0 / (1.0 + std::exp(double(sinks[h]) - score));
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(out[h * 32 + i], p * v[i], 1e-6) << "head " << h;
  }
}

TEST(AttentionExtras, OffValuesChangeNothing) {
  // Sinks far below every score and a window reaching back past position 0
  // give the plain results bit for bit (reference and fast path).
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    const AttentionShape s = shape(c);
    const std::vector<float> k = gaussian(size_t(c.n_kv) * c.ctx * c.head_dim, 8), v = gaussian(k.size(), 9);
    const std::vector<float> q = gaussian(size_t(c.n_tokens) * c.n_head * c.head_dim, 10);
    const std::vector<float> low(size_t(c.n_head), -1e30f);
    AttentionExtras x;
    x.sinks = low.data();
    x.window = int(c.pos0 + c.n_tokens);
    std::vector<float> plain(q.size()), extra(q.size()), fplain(q.size()), fextra(q.size());
    attention_ref(s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, plain.data());
    attention_ref(s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, extra.data(), x);
    attention(pool, s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, fplain.data());
    attention(pool, s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, fextra.data(), x);
    EXPECT_EQ(plain, extra) << "head_dim " << c.head_dim;
    EXPECT_EQ(fplain, fextra) << "head_dim " << c.head_dim;
  }
}

// Sets rows outside [lo, hi) of every KV head to NaN (f32 values; the other
// caches are made from them).
void poison_outside(std::vector<float>& cache, const Case& c, int64_t lo, int64_t hi) {
  for (int h = 0; h < c.n_kv; ++h)
    for (int64_t p = 0; p < c.ctx; ++p)
      if (p < lo || p >= hi)
        for (int i = 0; i < c.head_dim; ++i) cache[size_t((h * c.ctx + p) * c.head_dim + i)] = NAN;
}

template <typename T>
void expect_fast_matches_reference(ThreadPool& pool, const AttentionShape& s, const Case& c, const float* q,
                                   const T* k, const T* v, const AttentionExtras& x, const char* type) {
  const size_t n = size_t(c.n_tokens) * c.n_head * c.head_dim;
  std::vector<float> ref(n, NAN), fast(n, NAN);
  attention_ref(s, q, k, v, c.n_tokens, c.pos0, ref.data(), x);
  attention(pool, s, q, k, v, c.n_tokens, c.pos0, fast.data(), x);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(ref[i])) << type << " window " << x.window << " i " << i;
    ASSERT_NEAR(fast[i], ref[i], 2e-5f) << type << " window " << x.window << " sinks " << (x.sinks != nullptr)
                                        << " head_dim " << c.head_dim << " i " << i;
  }
}

TEST(AttentionExtras, FastMatchesReferenceForEveryCacheType) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    const AttentionShape s = shape(c);
    const std::vector<float> q = gaussian(size_t(c.n_tokens) * c.n_head * c.head_dim, 11, 3.f);
    const std::vector<float> sinks = random_sinks(c.n_head, 12);
    for (int w : kWindows) {
      // Rows before the first token's window and past the last position are NaN.
      const int64_t lo = w > 0 ? std::max<int64_t>(0, c.pos0 - w + 1) : 0, hi = c.pos0 + c.n_tokens;
      std::vector<float> k = gaussian(size_t(c.n_kv) * c.ctx * c.head_dim, 13), v = gaussian(k.size(), 14);
      poison_outside(k, c, lo, hi);
      poison_outside(v, c, lo, hi);
      std::vector<uint16_t> kh(k.size()), vh(v.size());
      for (size_t i = 0; i < k.size(); ++i) kh[i] = f32_to_f16(k[i]), vh[i] = f32_to_f16(v[i]);
      std::vector<BlockQ8_0> kq(k.size() / QK), vq(v.size() / QK);
      // q8_0 row by row: a NaN row quantizes to garbage, but only that row.
      for (size_t r = 0; r < k.size() / size_t(c.head_dim); ++r) {
        quantize_row_act(DType::Q8_0, &k[r * c.head_dim], &kq[r * c.head_dim / QK], c.head_dim);
        quantize_row_act(DType::Q8_0, &v[r * c.head_dim], &vq[r * c.head_dim / QK], c.head_dim);
      }
      for (bool with_sinks : {false, true}) {
        AttentionExtras x;
        x.window = w;
        x.sinks = with_sinks ? sinks.data() : nullptr;
        expect_fast_matches_reference(pool, s, c, q.data(), k.data(), v.data(), x, "f32");
        expect_fast_matches_reference(pool, s, c, q.data(), kh.data(), vh.data(), x, "f16");
        expect_fast_matches_reference(pool, s, c, q.data(), kq.data(), vq.data(), x, "q8_0");
      }
    }
  }
}

TEST(AttentionExtras, WindowOneReturnsTheOwnValue) {
  ThreadPool pool(2);
  const Case c{4, 2, 32, 20, 9, 6};
  const AttentionShape s = shape(c);
  const std::vector<float> k = gaussian(size_t(c.n_kv) * c.ctx * c.head_dim, 15), v = gaussian(k.size(), 16);
  const std::vector<float> q = gaussian(size_t(c.n_tokens) * c.n_head * c.head_dim, 17);
  AttentionExtras x;
  x.window = 1;
  std::vector<float> out(q.size(), NAN);
  attention(pool, s, q.data(), k.data(), v.data(), c.n_tokens, c.pos0, out.data(), x);
  for (int t = 0; t < c.n_tokens; ++t)
    for (int h = 0; h < c.n_head; ++h)
      for (int i = 0; i < c.head_dim; ++i)
        EXPECT_EQ(out[size_t((t * c.n_head + h) * c.head_dim + i)],
                  v[size_t(((h / 2) * c.ctx + c.pos0 + t) * c.head_dim + i)]);
}

TEST(AttentionExtras, NegativeWindowIsAnError) {
  ThreadPool pool(1);
  const AttentionShape s{2, 2, 32, 4, 1.f};
  std::vector<float> k(2 * 4 * 32, 0.f), v(k.size(), 0.f), q(2 * 32, 0.f), out(q.size());
  AttentionExtras x;
  x.window = -3;
  EXPECT_THROW(attention_ref(s, q.data(), k.data(), v.data(), 1, 0, out.data(), x), Error);
  EXPECT_THROW(attention(pool, s, q.data(), k.data(), v.data(), 1, 0, out.data(), x), Error);
}

}  // namespace
}  // namespace ms
