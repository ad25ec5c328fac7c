// vec_dot_ref against the double-precision dot product of the dequantized
// weight and activation rows, for every computable type and several lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include <cstddef>
#include <cstring>
#include <random>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "ref_test_util.h"

namespace ms {
namespace {

using namespace testing_ref;

// Q4_1/Q5_1 dots take the activations' sum from Q8_1's s = f16(d*sum(q)),
// which dequantizing does not see: the format itself differs from the
// dequantized dot by up to |m| * |s| * 2^-10 per block (f16 rounding of s and
// of d). Sum that slack over the blocks.
double q8_1_sum_slack(DType t, const std::vector<uint8_t>& wq, const std::vector<uint8_t>& xq, int64_t n) {
  const size_t wsize = static_cast<size_t>(type_info(t).type_size);
  double slack = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    uint16_t m_bits, s_bits;
    std::memcpy(&m_bits, wq.data() + b * wsize + 2, 2);       // Q4_1/Q5_1: d, then m
    std::memcpy(&s_bits, xq.data() + b * sizeof(BlockQ8_1) + 2, 2);  // Q8_1: d, then s
    slack += std::fabs(f16_to_f32(m_bits)) * std::fabs(f16_to_f32(s_bits)) * 0x1p-9;
  }
  return slack;
}

class RefDot : public ::testing::TestWithParam<DType> {};

TEST_P(RefDot, MatchesDoubleDotOfDequantizedRows) {
  const DType t = GetParam();
  const DType act = type_info(t).vec_dot_type;
  uint32_t seed = 1;
  for (int64_t n : {256, 512, 1024 + 256, 4096}) {
    for (int rep = 0; rep < 3; ++rep) {
      const auto w = gaussian(n, seed++, 0.05f);
      auto x = gaussian(n, seed++, 2.0f);
      if (rep == 2)  // activations with a positive mean: exercises the min / sum terms
        for (auto& v : x) v += 1.5f;
      const auto wq = quantize(t, w);
      const auto xq = quantize(act, x);
      const auto wd = dequantize(t, wq, n);
      const auto xd = dequantize(act, xq, n);
      const double want = dot(wd, xd);
      const double got = vec_dot_ref(t, n, wq.data(), xq.data());
      // Float scale products and float per-block terms: a few ulps of the
      // magnitudes involved.
      double tol = 2e-6 * l2(wd) * l2(xd) * std::sqrt(static_cast<double>(n) / 256.0) + 1e-30;
      if (act == DType::Q8_1 && t != DType::Q8_1) tol += q8_1_sum_slack(t, wq, xq, n);
      EXPECT_NEAR(got, want, tol) << type_name(t) << " n=" << n << " rep=" << rep;
      // And the quantized dot is a fair estimate of the float one.
      const double exact = dot(w, x);
      EXPECT_NEAR(got, exact, 1.5 * l2(w) * l2(x) / std::sqrt(static_cast<double>(n)) + 0.1 * std::fabs(exact))
          << type_name(t) << " n=" << n;
    }
  }
}

TEST_P(RefDot, ZeroWeightsGiveZero) {
  const DType t = GetParam();
  const DType act = type_info(t).vec_dot_type;
  const int64_t n = 512;
  const std::vector<float> w(n, 0.0f);
  const auto x = gaussian(n, 3u);
  const auto wq = quantize(t, w);
  const auto xq = quantize(act, x);
  EXPECT_EQ(vec_dot_ref(t, n, wq.data(), xq.data()), 0.0f) << type_name(t);
}

// Blocks of random bytes reach levels and scales no quantizer produces (Q6_K
// scale -128, every Q3_K scale, all hmask patterns, ...). Only the float
// fields are set to sane values so the products stay finite.
void randomize_blocks(DType t, std::vector<uint8_t>& q, std::mt19937& rng) {
  for (auto& v : q) v = static_cast<uint8_t>(rng());
  const size_t bsize = static_cast<size_t>(type_info(t).type_size);
  std::uniform_real_distribution<float> mag(0.001f, 0.1f);
  auto set_half = [&](size_t at) {
    const uint16_t h = f32_to_f16(mag(rng) * ((rng() & 1) ? 1.0f : -1.0f));
    std::memcpy(q.data() + at, &h, 2);
  };
  for (size_t b = 0; b < q.size() / bsize; ++b) {
    const size_t o = b * bsize;
    switch (t) {
      case DType::F16: set_half(o); break;
      case DType::BF16: {
        const uint16_t h = f32_to_bf16(mag(rng));
        std::memcpy(q.data() + o, &h, 2);
        break;
      }
      case DType::F32: {
        const float f = mag(rng);
        std::memcpy(q.data() + o, &f, 4);
        break;
      }
      case DType::Q4_1: case DType::Q5_1: case DType::Q8_1: case DType::Q4_K: case DType::Q5_K:
        set_half(o);
        set_half(o + 2);
        break;
      case DType::Q2_K: set_half(o + offsetof(BlockQ2_K, d)); set_half(o + offsetof(BlockQ2_K, dmin)); break;
      case DType::Q3_K: set_half(o + offsetof(BlockQ3_K, d)); break;
      case DType::Q6_K: set_half(o + offsetof(BlockQ6_K, d)); break;
      case DType::Q8_K: {
        const float f = mag(rng);
        std::memcpy(q.data() + o, &f, 4);
        break;
      }
      case DType::MXFP4: q[o] = static_cast<uint8_t>(110 + rng() % 30); break;
      default: set_half(o); break;  // Q4_0, Q5_0, Q8_0: d first
    }
  }
}

TEST_P(RefDot, RandomBlockBytesMatchDequantizedDot) {
  const DType t = GetParam();
  const DType act = type_info(t).vec_dot_type;
  std::mt19937 rng(42);
  for (int64_t n : {256, 1024}) {
    std::vector<uint8_t> wq(row_bytes(t, n));
    randomize_blocks(t, wq, rng);
    const auto x = gaussian(n, static_cast<uint32_t>(n));
    const auto xq = quantize(act, x);
    const auto wd = dequantize(t, wq, n);
    const auto xd = dequantize(act, xq, n);
    double tol = 2e-6 * l2(wd) * l2(xd) * std::sqrt(static_cast<double>(n) / 256.0) + 1e-30;
    if (act == DType::Q8_1 && t != DType::Q8_1) tol += q8_1_sum_slack(t, wq, xq, n);
    EXPECT_NEAR(vec_dot_ref(t, n, wq.data(), xq.data()), dot(wd, xd), tol) << type_name(t) << " n=" << n;
  }
}

std::string type_param_name(const ::testing::TestParamInfo<DType>& info) { return type_name(info.param); }
INSTANTIATE_TEST_SUITE_P(Ref, RefDot, ::testing::ValuesIn(computable_types()), type_param_name);

}  // namespace
}  // namespace ms
