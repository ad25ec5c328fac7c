// gpt-oss's expert math on the CPU: the clamped SwiGLU (cpu/ops.h:
// swiglu_oai) against its reference and its defining properties, and the
// expert FFN (cpu/expert_ffn.h) with per-expert biases and that activation
// against expert_ffn_ref, on MXFP4 experts (as the published files ship them)
// and float ones, odd token counts, y poisoned outside the routed slots.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "cpu/expert_ffn.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "quant/ref_test_util.h"

namespace ms {
namespace {

using testing_ref::gaussian;

constexpr float kAlpha = 1.702f, kLimit = 7.0f;

TEST(SwigluOai, FastMatchesReferenceAcrossTheClamp) {
  // Scaled so a good share of values lies beyond +-limit on both inputs.
  std::vector<float> g = gaussian(1001, 7, 6.0f), u = gaussian(1001, 8, 6.0f);
  std::vector<float> ref(g.size()), fast(g.size());
  swiglu_oai_ref(g.data(), u.data(), ref.data(), static_cast<int64_t>(g.size()), kAlpha, kLimit);
  swiglu_oai(g.data(), u.data(), fast.data(), static_cast<int64_t>(g.size()), kAlpha, kLimit);
  int clamped = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(fast[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i]))) << i;
    clamped += g[i] > kLimit || std::fabs(u[i]) > kLimit;
  }
  EXPECT_GT(clamped, 50);  // the test exercised the clamp
}

TEST(SwigluOai, DefiningProperties) {
  auto f = [](float g, float u) {
    float out = 0;
    swiglu_oai(&g, &u, &out, 1, kAlpha, kLimit);
    return out;
  };
  // The gate is clamped above only; up on both sides.
  EXPECT_EQ(f(100.0f, 0.5f), f(kLimit, 0.5f));
  EXPECT_EQ(f(2.0f, 50.0f), f(2.0f, kLimit));
  EXPECT_EQ(f(2.0f, -50.0f), f(2.0f, -kLimit));
  EXPECT_NE(f(-3.0f, 0.5f), f(-4.0f, 0.5f));
  // up = -1 zeroes the output (the +1 on up); gate 0 too.
  EXPECT_EQ(f(3.0f, -1.0f), 0.0f);
  EXPECT_EQ(f(0.0f, 3.0f), 0.0f);
  // A value worked by hand: g = 1, u = 1: 1 * sigmoid(1.702) * 2.
  EXPECT_NEAR(f(1.0f, 1.0f), 2.0 / (1.0 + std::exp(-1.702)), 1e-6);
  // Aliasing the output with an input is allowed.
  float g = 1.0f, u = 1.0f;
  swiglu_oai(&g, &u, &g, 1, kAlpha, kLimit);
  EXPECT_NEAR(g, 2.0 / (1.0 + std::exp(-1.702)), 1e-6);
}

struct BiasedExperts {
  std::vector<std::vector<uint8_t>> gate, up, down;
  std::vector<const uint8_t*> gate_p, up_p, down_p;
  std::vector<float> bg, bu, bd;
  ExpertFfnWeights w;

  BiasedExperts(DType t, DType dt, int n_expert, int64_t D, int64_t F, uint32_t seed) {
    auto matrix = [&](DType type, int64_t rows, int64_t cols, uint32_t s) {
      const std::vector<float> v = gaussian(rows * cols, s, 1.0f / std::sqrt(static_cast<float>(cols)));
      std::vector<uint8_t> q(static_cast<size_t>(rows * row_bytes(type, cols)));
      for (int64_t r = 0; r < rows; ++r)
        quantize_row_ref(type, v.data() + r * cols, q.data() + r * row_bytes(type, cols), cols);
      return q;
    };
    for (int e = 0; e < n_expert; ++e) {
      const uint32_t s = seed * 1000 + static_cast<uint32_t>(e) * 3;
      gate.push_back(matrix(t, F, D, s));
      up.push_back(matrix(t, F, D, s + 1));
      down.push_back(matrix(dt, D, F, s + 2));
    }
    for (int e = 0; e < n_expert; ++e) {
      gate_p.push_back(gate[static_cast<size_t>(e)].data());
      up_p.push_back(up[static_cast<size_t>(e)].data());
      down_p.push_back(down[static_cast<size_t>(e)].data());
    }
    // Biases big enough to push some pre-activations past the clamp.
    bg = gaussian(n_expert * F, seed + 1, 3.0f);
    bu = gaussian(n_expert * F, seed + 2, 3.0f);
    bd = gaussian(n_expert * D, seed + 3, 0.5f);
    w.n_embd = D;
    w.n_ff = F;
    w.gate_type = w.up_type = t;
    w.down_type = dt;
    w.gate = gate_p;
    w.up = up_p;
    w.down = down_p;
    w.gate_bias = bg.data();
    w.up_bias = bu.data();
    w.down_bias = bd.data();
    w.clamped_swiglu = true;
  }
};

constexpr uint32_t kPoisonBits = 0x7fc0beefu;

std::vector<int32_t> routes(int n, int k, int n_expert, std::mt19937& rng) {
  std::vector<int32_t> ids;
  for (int t = 0; t < n; ++t) {
    std::set<int32_t> picked;
    while (static_cast<int>(picked.size()) < k) picked.insert(static_cast<int32_t>(rng() % n_expert));
    ids.insert(ids.end(), picked.begin(), picked.end());
  }
  return ids;
}

double rel_rms(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(ExpertFfnBiased, MatchesReferenceWithClampedSwiglu) {
  ThreadPool pool(2);
  ExpertFfn ffn(pool);
  std::mt19937 rng(3);
  struct Case {
    DType t, dt;
    int64_t D, F;
    double tol;
  };
  // MXFP4 is what gpt-oss ships (4-bit: a loose tolerance against the f32
  // reference, whose activations are not rounded); f32 checks the bias and
  // activation plumbing tightly.
  for (const Case& c : {Case{DType::MXFP4, DType::MXFP4, 64, 96, 5e-2}, Case{DType::F32, DType::F32, 37, 19, 1e-5}}) {
    const int n_expert = 6, k = 3;
    BiasedExperts ex(c.t, c.dt, n_expert, c.D, c.F, 21);
    for (int n : {1, 5, 17}) {  // decode, a few tokens, past the 16-pair parallel threshold
      const std::vector<float> x = gaussian(n * c.D, 9 + n);
      const std::vector<int32_t> ids = routes(n, k, n_expert, rng);
      // One spare row after the slots: it must stay poisoned.
      std::vector<float> y(static_cast<size_t>((n * k + 1) * c.D), std::bit_cast<float>(kPoisonBits));
      ffn.compute(ex.w, x.data(), n, group_by_expert(ids.data(), n, k, n_expert), y.data());
      std::vector<float> ref(static_cast<size_t>(c.D));
      for (int p = 0; p < n * k; ++p) {
        expert_ffn_ref(ex.w, ids[static_cast<size_t>(p)], x.data() + (p / k) * c.D, ref.data());
        EXPECT_LT(rel_rms(y.data() + p * c.D, ref.data(), c.D), c.tol) << type_name(c.t) << " n " << n << " pair " << p;
      }
      for (int64_t i = 0; i < c.D; ++i)
        EXPECT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(n * k * c.D + i)]), kPoisonBits);
    }
  }
}

TEST(ExpertFfnBiased, EachPartChangesTheResult) {
  // The reference itself: with the down bias alone the output moves by
  // exactly that bias; the gate/up biases and the activation each change it.
  BiasedExperts ex(DType::F32, DType::F32, 2, 32, 16, 5);
  const std::vector<float> x = gaussian(32, 4);
  std::vector<float> full(32), other(32);
  expert_ffn_ref(ex.w, 1, x.data(), full.data());
  ExpertFfnWeights no_down = ex.w;
  no_down.down_bias = nullptr;
  expert_ffn_ref(no_down, 1, x.data(), other.data());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(full[static_cast<size_t>(i)] - other[static_cast<size_t>(i)], ex.bd[32 + i], 1e-5);
  for (auto edit : {+[](ExpertFfnWeights& w) { w.gate_bias = nullptr; }, +[](ExpertFfnWeights& w) { w.up_bias = nullptr; },
                    +[](ExpertFfnWeights& w) { w.clamped_swiglu = false; }}) {
    ExpertFfnWeights w = ex.w;
    edit(w);
    expert_ffn_ref(w, 1, x.data(), other.data());
    EXPECT_GT(rel_rms(other.data(), full.data(), 32), 1e-3);
  }
}

}  // namespace
}  // namespace ms
