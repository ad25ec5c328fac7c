// RoPE with YaRN scaling (model/rope_scaling.h, cpu/ops.h) against an
// independent scalar formula written here from the YaRN definition as
// llama.cpp applies it: per pair, the angle mixes interpolation
// (pos * freq / factor) and extrapolation (pos * freq) by a linear ramp over
// the correction dims, and cos/sin carry the magnitude 1 + 0.1 ln(factor).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/ops.h"
#include "model/rope_yarn.h"

namespace ms {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// The YaRN rotation of one head, in double, from first principles.
struct YarnRef {
  double factor, base, beta_fast = 32, beta_slow = 1, ext = 1, attn = 1;
  int n_rot;
  int64_t orig;

  // Pair index at which `beta` full rotations fit into the original context.
  double corr(double beta) const { return n_rot * std::log(orig / (beta * 2 * kPi)) / (2 * std::log(base)); }
  double mscale() const { return ext != 0 ? attn * (1 + 0.1 * std::log(factor)) : attn; }

  void apply(std::vector<double>& v, int head_dim, int n_heads, int64_t pos, bool neox) const {
    const double low = std::max(0.0, std::floor(corr(beta_fast)));
    const double high = std::min<double>(n_rot - 1, std::ceil(corr(beta_slow)));
    const int half = n_rot / 2;
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < half; ++i) {
        const double extrap = pos * std::pow(base, -2.0 * i / n_rot);
        const double interp = extrap / factor;
        const double y = std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
        const double mix = (1 - y) * ext;
        const double theta = interp * (1 - mix) + extrap * mix;
        const double c = std::cos(theta) * mscale(), s = std::sin(theta) * mscale();
        const int a = h * head_dim + (neox ? i : 2 * i), b = h * head_dim + (neox ? i + half : 2 * i + 1);
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
  }
};

YarnParams params_of(const YarnRef& r) {
  YarnParams p;
  p.factor = r.factor;
  p.n_rot = r.n_rot;
  p.n_ctx_orig = r.orig;
  p.theta_base = r.base;
  p.ext_factor = r.ext;
  p.beta_fast = r.beta_fast;
  p.beta_slow = r.beta_slow;
  p.attn_factor = r.attn;
  return p;
}

TEST(RopeYarn, CorrectionDimsOfAQwen3StyleModel) {
  // head 128, base 1e6, 32k original context: 32 rotations fit up to pair
  // 23.6, one rotation up to pair 39.7 (floor / ceil).
  float low = -1, high = -1;
  yarn_corr_dims(128, 32768, 1e6, 32, 1, &low, &high);
  EXPECT_EQ(low, 23.0f);
  EXPECT_EQ(high, 40.0f);
  // Clamped to the rotated dims: a tiny original context puts the start below 0.
  yarn_corr_dims(16, 8, 10000, 32, 1, &low, &high);
  EXPECT_EQ(low, 0.0f);
  EXPECT_LE(high, 15.0f);
}

TEST(RopeYarn, PairScaleRampsFromExtrapolationToInterpolation) {
  YarnRef r{4.0, 1e6};
  r.n_rot = 128;
  r.orig = 32768;
  const RopeScaling s = yarn_scaling(params_of(r));
  EXPECT_EQ(s.corr_low, 23.0f);
  EXPECT_EQ(s.corr_high, 40.0f);
  EXPECT_FLOAT_EQ(rope_pair_scale(s, 0), 1.0f);    // fast pairs: unchanged (extrapolated)
  EXPECT_FLOAT_EQ(rope_pair_scale(s, 23), 1.0f);
  EXPECT_FLOAT_EQ(rope_pair_scale(s, 40), 0.25f);  // slow pairs: interpolated by the factor
  EXPECT_FLOAT_EQ(rope_pair_scale(s, 63), 0.25f);
  for (int i = 24; i < 40; ++i) {  // strictly between, decreasing
    EXPECT_LT(rope_pair_scale(s, i), rope_pair_scale(s, i - 1)) << i;
    EXPECT_GT(rope_pair_scale(s, i), 0.25f) << i;
  }
  EXPECT_NEAR(s.mscale, 1.0 + 0.1 * std::log(4.0), 1e-6);
}

TEST(RopeYarn, RopeMatchesTheIndependentFormula) {
  struct Case {
    double factor, base;
    int n_rot, head_dim;
    int64_t orig;
    double ext, attn, beta_fast, beta_slow;
  };
  const std::vector<Case> cases = {
      {4.0, 1e6, 128, 128, 32768, 1.0, 1.0, 32, 1},     // Qwen3 long-context recipe
      {32.0, 150000, 64, 64, 4096, 1.0, 1.0, 32, 1},    // gpt-oss-like
      {8.0, 10000, 32, 48, 2048, 1.0, 1.0, 32, 1},      // partial rotation (n_rot < head_dim)
      {2.0, 10000, 16, 16, 512, 0.5, 1.0, 16, 2},       // half-strength ramp, other betas
      {4.0, 1e6, 64, 64, 8192, 1.0, 0.75, 32, 1},       // rope.scaling.attn_factor
      {3.0, 1e4, 24, 24, 1000, 0.0, 1.25, 32, 1},       // ramp off: linear, cos/sin x attn
  };
  for (const Case& k : cases) {
    YarnRef r{k.factor, k.base, k.beta_fast, k.beta_slow, k.ext, k.attn};
    r.n_rot = k.n_rot;
    r.orig = k.orig;
    const RopeScaling s = yarn_scaling(params_of(r));
    for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox})
      for (int64_t pos : {0, 1, 7, 4095, 40000, 131071}) {
        const int n_heads = 3;
        const auto x = random_vec(static_cast<size_t>(n_heads) * k.head_dim, 17 + static_cast<uint32_t>(pos));
        std::vector<double> want(x.begin(), x.end());
        r.apply(want, k.head_dim, n_heads, pos, mode == RopeMode::Neox);
        std::vector<float> got = x;
        rope_ref(got.data(), n_heads, k.head_dim, k.n_rot, pos, static_cast<float>(k.base), s, mode);
        std::vector<float> table = x, cs(k.n_rot);
        rope_table(cs.data(), k.n_rot, pos, static_cast<float>(k.base), s);
        rope_apply(table.data(), n_heads, k.head_dim, k.n_rot, cs.data(), mode);
        // The ramp's pair scale is computed in float (as ggml does): a
        // relative error of ~1e-7 on angles up to pos radians. A wrong ramp,
        // corr dims or magnitude is off by far more (and position 0 checks
        // the magnitude alone to 1e-5).
        const double tol = 1e-5 + 2e-7 * static_cast<double>(pos);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i])))
              << "factor " << k.factor << " n_rot " << k.n_rot << " pos " << pos << " i " << i;
          ASSERT_NEAR(table[i], got[i], 1e-5 * (1 + std::fabs(got[i]))) << "table vs ref, pos " << pos << " i " << i;
        }
      }
  }
}

TEST(RopeYarn, LogMultiplierCancelsTheMagnitude) {
  // transformers' mscale / mscale_all_dim with both 1: no magnitude change.
  YarnParams p;
  p.factor = 40;
  p.n_rot = 64;
  p.n_ctx_orig = 4096;
  p.theta_base = 10000;
  p.log_mul = 1.0;
  EXPECT_NEAR(yarn_scaling(p).mscale, 1.0f, 1e-6f);
  p.log_mul = 0.707;  // get_mscale(40, 1) / get_mscale(40, 0.707)
  const double want = (0.1 * std::log(40.0) + 1) / (0.1 * 0.707 * std::log(40.0) + 1);
  EXPECT_NEAR(yarn_scaling(p).mscale, want, 1e-6);
}

TEST(RopeYarn, LinearAndNoneAreUnchanged) {
  const RopeScaling lin = linear_scaling(2.0, 1.0);
  for (int i : {0, 5, 31}) EXPECT_FLOAT_EQ(rope_pair_scale(lin, i), 0.5f);
  EXPECT_EQ(lin.mscale, 1.0f);
  EXPECT_TRUE(linear_scaling(1.0, 1.0).is_identity());
  // A bare float still means linear scaling (the ops' callers before YaRN).
  auto x = random_vec(64, 3);
  std::vector<float> a = x, b = x;
  rope_ref(a.data(), 2, 32, 32, 999, 1e4f, 0.5f, RopeMode::Neox);
  rope_ref(b.data(), 2, 32, 32, 999, 1e4f, lin, RopeMode::Neox);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(a[i], b[i]);
}

}  // namespace
}  // namespace ms
