// The small ops of src/cpu/ops.h: fast versions against the scalar references
// on random inputs of odd sizes, and the references against hand-computed facts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/ops.h"
#include "util/error.h"

namespace ms {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Ops, RmsnormMatchesReference) {
  for (int64_t n : {1, 7, 64, 129, 2048}) {
    auto x = random_vec(n, 1 + n, 3.0f), w = random_vec(n, 2 + n);
    std::vector<float> ref(n), fast(n, NAN);
    rmsnorm_ref(x.data(), w.data(), ref.data(), n, 1e-6f);
    rmsnorm(x.data(), w.data(), fast.data(), n, 1e-6f);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(fast[i], ref[i], 1e-5f * (1 + std::fabs(ref[i]))) << n << " " << i;
    // In place, no weight.
    std::vector<float> y = x;
    rmsnorm(y.data(), nullptr, y.data(), n, 1e-6f);
    double ss = 0;
    for (float v : y) ss += v * v;
    EXPECT_NEAR(ss / n, 1.0, 1e-3) << n;
  }
}

TEST(Ops, RopeReferencePositionZeroIsIdentityAndPreservesNorm) {
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox}) {
    auto x = random_vec(4 * 16, 3);
    std::vector<float> y = x;
    rope_ref(y.data(), 4, 16, 16, 0, 10000.f, 1.f, mode);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
    rope_ref(y.data(), 4, 16, 16, 1234, 10000.f, 1.f, mode);
    for (int h = 0; h < 4; ++h) {
      double a = 0, b = 0;
      for (int i = 0; i < 16; ++i) a += x[h * 16 + i] * x[h * 16 + i], b += y[h * 16 + i] * y[h * 16 + i];
      EXPECT_NEAR(a, b, 1e-4 * a);
    }
  }
}

TEST(Ops, RopeReferenceFirstPairTurnsByPosition) {
  // Pair 0 has frequency 1: at position p it turns by p radians.
  std::vector<float> x(8, 0.f);
  x[0] = 1.f;  // Normal: pair (0,1)
  rope_ref(x.data(), 1, 8, 8, 2, 10000.f, 1.f, RopeMode::Normal);
  EXPECT_NEAR(x[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(2.0), 1e-6);
  std::vector<float> z(8, 0.f);
  z[0] = 1.f;  // Neox: pair (0,4)
  rope_ref(z.data(), 1, 8, 8, 2, 10000.f, 1.f, RopeMode::Neox);
  EXPECT_NEAR(z[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(z[4], std::sin(2.0), 1e-6);
  EXPECT_EQ(z[1], 0.f);
}

TEST(Ops, RopeNormalOnPermutedRowsEqualsNeox) {
  // GGUF llama files store q/k rows permuted (row 2i+j <- row j*d/2+i) so that
  // adjacent-pair RoPE computes rotate-half RoPE: check that identity.
  const int d = 16;
  auto x = random_vec(d, 4);
  std::vector<float> perm(d);
  for (int r = 0; r < d; ++r) perm[r] = x[(r % 2) * (d / 2) + r / 2];
  rope_ref(x.data(), 1, d, d, 77, 1e6f, 1.f, RopeMode::Neox);
  rope_ref(perm.data(), 1, d, d, 77, 1e6f, 1.f, RopeMode::Normal);
  for (int r = 0; r < d; ++r) EXPECT_NEAR(perm[r], x[(r % 2) * (d / 2) + r / 2], 1e-5);
}

TEST(Ops, RopeTableMatchesReference) {
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox})
    for (int n_rot : {8, 32}) {
      for (int64_t pos : {0, 1, 5, 4095, 100000}) {
        auto x = random_vec(3 * 32, 5 + pos);
        std::vector<float> ref = x, fast = x;
        rope_ref(ref.data(), 3, 32, n_rot, pos, 1e6f, 1.f, mode);
        std::vector<float> cs(n_rot);
        rope_table(cs.data(), n_rot, pos, 1e6f, 1.f);
        rope_apply(fast.data(), 3, 32, n_rot, cs.data(), mode);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(fast[i], ref[i], 1e-5f) << i;
      }
    }
}

TEST(Ops, SoftmaxMatchesReference) {
  for (int64_t n : {1, 3, 128, 1001}) {
    auto x = random_vec(n, 6 + n, 5.0f);
    x[0] = 80.f;  // large values must not overflow
    std::vector<float> ref = x, fast = x;
    softmax_ref(ref.data(), n);
    softmax(fast.data(), n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(fast[i], ref[i], 1e-6f);
      sum += fast[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST(Ops, SiluMulMatchesReference) {
  auto g = random_vec(777, 7, 4.f), u = random_vec(777, 8);
  std::vector<float> ref(777), fast(777, NAN);
  silu_mul_ref(g.data(), u.data(), ref.data(), 777);
  silu_mul(g.data(), u.data(), fast.data(), 777);
  for (int i = 0; i < 777; ++i) ASSERT_NEAR(fast[i], ref[i], 1e-5f * (1 + std::fabs(ref[i])));
  float one = 1.f, two = 2.f, out;
  silu_mul_ref(&one, &two, &out, 1);
  EXPECT_NEAR(out, 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(Ops, RouterSoftmaxTopKRenormalises) {
  const float logits[5] = {1.f, 3.f, 2.f, 3.f, -1.f};
  int32_t ids[2];
  float w[2];
  router_topk_ref(logits, 5, 2, RouterMode::SoftmaxTopK, true, ids, w);
  EXPECT_EQ(ids[0], 1);  // tie between 1 and 3: lower id first
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0], 0.5f, 1e-6);
  EXPECT_NEAR(w[1], 0.5f, 1e-6);
  router_topk_ref(logits, 5, 2, RouterMode::SoftmaxTopK, false, ids, w);
  double total = 0;
  for (float l : logits) total += std::exp(l);
  EXPECT_NEAR(w[0], std::exp(3.0) / total, 1e-6);
}

TEST(Ops, RouterTopKSoftmax) {
  const float logits[4] = {0.f, 2.f, 1.f, -3.f};
  int32_t ids[2];
  float w[2];
  router_topk_ref(logits, 4, 2, RouterMode::TopKSoftmax, false, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(w[0], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 1.0f, 1e-6);
  EXPECT_THROW(router_topk_ref(logits, 4, 5, RouterMode::TopKSoftmax, false, ids, w), Error);
}

TEST(Ops, EmbedRowF32AndBadId) {
  std::vector<float> table = {1, 2, 3, 4, 5, 6};
  std::vector<float> out(3);
  embed_row(DType::F32, table.data(), 2, 3, 1, out.data());
  EXPECT_EQ(out, (std::vector<float>{4, 5, 6}));
  EXPECT_THROW(embed_row(DType::F32, table.data(), 2, 3, 2, out.data()), Error);
  EXPECT_THROW(embed_row(DType::F32, table.data(), 2, 3, -1, out.data()), Error);
}

}  // namespace
}  // namespace ms
