// quantize_row_ref -> dequantize_row_ref round trips: error bounds on Gaussian
// data (RMSE reported per format), searched K-quant scales against naive ones,
// and awkward inputs (zeros, constants, outliers, bad row lengths, unsupported
// types).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/ref_formats.h"
#include "ref_test_util.h"
#include "util/error.h"

namespace ms {
namespace {

using namespace testing_ref;

// RMSE / sigma bounds on N(0,1) data: roughly 1.25x what the quantizers
// reach, so a regression in the search shows up.
struct Bound {
  DType type;
  double max_rel_rmse;
};
const Bound kBounds[] = {
    {DType::F32, 0.0},      {DType::F16, 3e-4},     {DType::BF16, 3e-3},    {DType::Q8_0, 0.008},
    {DType::Q8_1, 0.008},   {DType::Q8_K, 0.01},   {DType::Q4_0, 0.11},    {DType::Q4_1, 0.10},
    {DType::Q5_0, 0.055},   {DType::Q5_1, 0.05},    {DType::MXFP4, 0.16},   {DType::Q2_K, 0.40},
    {DType::Q3_K, 0.21},    {DType::Q4_K, 0.10},    {DType::Q5_K, 0.05},    {DType::Q6_K, 0.025},
    // Ternary and IQ formats (no importance weights; llama.cpp's quantizers,
    // given an imatrix, do better on real weights).
    {DType::TQ1_0, 0.55},   {DType::TQ2_0, 0.55},   {DType::IQ1_S, 0.56},   {DType::IQ1_M, 0.52},
    {DType::IQ2_XXS, 0.42}, {DType::IQ2_XS, 0.37},  {DType::IQ2_S, 0.31},   {DType::IQ3_XXS, 0.23},
    {DType::IQ3_S, 0.17},   {DType::IQ4_NL, 0.095}, {DType::IQ4_XS, 0.095},
};

class RoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, GaussianErrorIsBounded) {
  const Bound b = GetParam();
  for (int64_t n : {256, 512, 2048 + 256}) {
    const float sigma = 0.02f;  // typical weight scale: exercises f16 scales away from 1
    const auto x = gaussian(n, 1234u + static_cast<uint32_t>(n), sigma);
    const auto y = dequantize(b.type, quantize(b.type, x), n);
    const double rel = rmse(x, y) / sigma;
    if (n == 2048 + 256) {
      std::printf("  %-6s RMSE/sigma = %.5f (bound %.5f)\n", type_name(b.type), rel, b.max_rel_rmse);
      RecordProperty(std::string("rmse_over_sigma_") + type_name(b.type), std::to_string(rel));
    }
    EXPECT_LE(rel, b.max_rel_rmse) << type_name(b.type) << " n=" << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(y[i])) << i;
  }
}

TEST_P(RoundTrip, AllZeroRowGivesZeros) {
  const Bound b = GetParam();
  const std::vector<float> x(512, 0.0f);
  const auto y = dequantize(b.type, quantize(b.type, x), 512);
  for (float v : y) ASSERT_EQ(v, 0.0f) << type_name(b.type);
}

TEST_P(RoundTrip, ConstantRowsAreNearlyExact) {
  const Bound b = GetParam();
  for (float c : {1.0f, -0.375f, 3e-3f, -250.0f}) {
    const std::vector<float> x(512, c);
    const auto y = dequantize(b.type, quantize(b.type, x), 512);
    // Exact up to the rounding of the f16/E8M0 scales (MXFP4: a power of two
    // times an E2M1 value, 1/8 relative at worst) and the K formats' 4-6 bit
    // scales of the scale.
    // IQ4_XS: its 6-bit sub-block scales leave d at 1/(32*127) of the
    // largest value, an f16 subnormal for c = 3e-3 (steps of ~8% there).
    const double tol = b.type == DType::MXFP4 ? 0.125 : b.type == DType::IQ4_XS ? 0.05 : 0.01;
    for (float v : y) ASSERT_NEAR(v, c, tol * std::fabs(c)) << type_name(b.type) << " c=" << c;
  }
}

TEST_P(RoundTrip, OutliersStayFiniteAndAreKept) {
  const Bound b = GetParam();
  auto x = gaussian(1024, 77u);
  x[5] = 40.0f;      // in the first block
  x[300] = -25.0f;   // a K-format's second super-block
  x[1023] = 1e4f;    // the last element
  const auto y = dequantize(b.type, quantize(b.type, x), 1024);
  for (float v : y) ASSERT_TRUE(std::isfinite(v)) << type_name(b.type);
  // MXFP4 can only say 4 or 6 for a value of 5 (scale 1): 20% at worst. The
  // 1-3 bit lattices have no zero level (IQ2's least magnitude is 8/43 of its
  // largest): keeping an outlier at full size would push its group's small
  // neighbours up with it, so the least-squares choice shrinks the outlier.
  double tol = b.type == DType::MXFP4 ? 0.2 : 0.13;
  for (DType t : {DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S})
    if (b.type == t) tol = 0.6;
  if (b.type == DType::IQ3_XXS || b.type == DType::IQ3_S) tol = 0.25;
  for (int i : {5, 300, 1023}) EXPECT_NEAR(y[i], x[i], tol * std::fabs(x[i])) << type_name(b.type) << " i=" << i;
}

TEST_P(RoundTrip, NonFiniteInputsDoNotCrash) {
  // Garbage in, garbage out, but no undefined float->int conversions (the
  // sanitizer build checks) and finite blocks elsewhere in the row stay good.
  const Bound b = GetParam();
  auto x = gaussian(512, 8u);
  x[3] = NAN;
  x[40] = INFINITY;
  x[41] = -INFINITY;
  const auto y = dequantize(b.type, quantize(b.type, x), 512);
  for (int i = 256; i < 512; ++i) ASSERT_TRUE(std::isfinite(y[i])) << type_name(b.type) << " i=" << i;
}

std::string bound_name(const ::testing::TestParamInfo<Bound>& info) { return type_name(info.param.type); }
INSTANTIATE_TEST_SUITE_P(Ref, RoundTrip, ::testing::ValuesIn(kBounds), bound_name);

// ---------------------------------------------------------------- searched vs naive

using KQuantizer = void (*)(const float*, void*, int64_t, ref::ScaleSearch);
struct KFormat {
  DType type;
  KQuantizer quantize;
};

TEST(RefKQuantSearch, SearchedScalesBeatNaiveOnes) {
  const KFormat formats[] = {{DType::Q2_K, ref::quantize_q2_K}, {DType::Q3_K, ref::quantize_q3_K},
                             {DType::Q4_K, ref::quantize_q4_K}, {DType::Q5_K, ref::quantize_q5_K},
                             {DType::Q6_K, ref::quantize_q6_K}};
  const int64_t n = 4096;
  const auto x = gaussian(n, 99u);
  for (const auto& f : formats) {
    std::vector<uint8_t> naive(row_bytes(f.type, n)), searched(row_bytes(f.type, n));
    f.quantize(x.data(), naive.data(), n, ref::ScaleSearch::kNaive);
    f.quantize(x.data(), searched.data(), n, ref::ScaleSearch::kSearch);
    const double e_naive = rmse(x, dequantize(f.type, naive, n));
    const double e_search = rmse(x, dequantize(f.type, searched, n));
    std::printf("  %-5s naive RMSE %.5f  searched %.5f  (%.1f%% lower)\n", type_name(f.type), e_naive, e_search,
                100.0 * (1.0 - e_search / e_naive));
    RecordProperty(std::string("naive_rmse_") + type_name(f.type), std::to_string(e_naive));
    RecordProperty(std::string("searched_rmse_") + type_name(f.type), std::to_string(e_search));
    EXPECT_LT(e_search, 0.97 * e_naive) << type_name(f.type);
    // quantize_row_ref is the searched quantizer.
    EXPECT_EQ(quantize(f.type, x), searched) << type_name(f.type);
  }
}

// ---------------------------------------------------------------- activation formats

TEST(RefActivations, Q8RoundsHalfToEvenWithTheDocumentedScale) {
  // amax = 127 -> d = 1, id = 1: levels are the inputs rounded half to even.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  x[4] = -0.5f;
  x[5] = 0.49f;
  const auto q = quantize(DType::Q8_0, x);
  BlockQ8_0 b;
  std::memcpy(&b, q.data(), sizeof b);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], -2);
  EXPECT_EQ(b.qs[4], 0);
  EXPECT_EQ(b.qs[5], 0);
}

TEST(RefActivations, Q8_1CarriesScaledSum) {
  const auto x = gaussian(64, 5u);
  const auto q = quantize(DType::Q8_1, x);
  for (int blk = 0; blk < 2; ++blk) {
    BlockQ8_1 b;
    std::memcpy(&b, q.data() + blk * sizeof b, sizeof b);
    int sum = 0;
    float amax = 0;
    for (int j = 0; j < 32; ++j) {
      sum += b.qs[j];
      amax = std::max(amax, std::fabs(x[blk * 32 + j]));
    }
    const float d = amax / 127.0f;
    EXPECT_EQ(b.d, f32_to_f16(d));
    EXPECT_EQ(b.s, f32_to_f16(d * static_cast<float>(sum)));
  }
}

TEST(RefActivations, Q8_KFillsBlockSums) {
  const auto x = gaussian(512, 6u, 3.0f);
  const auto q = quantize(DType::Q8_K, x);
  for (int blk = 0; blk < 2; ++blk) {
    BlockQ8_K b;
    std::memcpy(&b, q.data() + blk * sizeof b, sizeof b);
    float amax = 0;
    for (int l = 0; l < 256; ++l) amax = std::max(amax, std::fabs(x[blk * 256 + l]));
    EXPECT_EQ(b.d, amax / 127.0f);
    int levels_at_127 = 0;
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int l = 0; l < 16; ++l) {
        s += b.qs[16 * k + l];
        levels_at_127 += std::abs(b.qs[16 * k + l]) == 127;
      }
      EXPECT_EQ(b.bsums[k], s) << k;
    }
    EXPECT_GE(levels_at_127, 1);  // the max-abs value lands on +-127
  }
}

// ---------------------------------------------------------------- bad input

TEST(RefErrors, RowNotWholeBlocksThrows) {
  std::vector<float> x(300, 1.0f), y(300);
  std::vector<uint8_t> q(4096), a(4096);
  for (DType t : computable_types()) {
    const int64_t bs = type_info(t).block_size;
    if (bs == 1) continue;
    const int64_t n = bs + bs / 2;
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n), Error) << type_name(t);
    EXPECT_THROW(dequantize_row_ref(t, q.data(), y.data(), n), Error) << type_name(t);
    EXPECT_THROW(vec_dot_ref(t, n, q.data(), a.data()), Error) << type_name(t);
  }
  EXPECT_THROW(dequantize_row_ref(DType::F32, q.data(), y.data(), -1), Error);
}

TEST(RefErrors, EmptyRowIsFine) {
  for (DType t : computable_types()) {
    EXPECT_NO_THROW(dequantize_row_ref(t, nullptr, nullptr, 0)) << type_name(t);
    EXPECT_EQ(vec_dot_ref(t, 0, nullptr, nullptr), 0.0f) << type_name(t);
  }
}

TEST(RefErrors, UnsupportedTypesNameTheType) {
  std::vector<uint8_t> q(4096);
  std::vector<float> y(256);
  try {
    dequantize_row_ref(DType::I16, q.data(), y.data(), 256);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quant type i16 is not supported"), std::string::npos) << e.what();
  }
  for (DType t : {DType::I8, DType::I32, DType::I64, DType::F64}) {
    EXPECT_THROW(quantize_row_ref(t, y.data(), q.data(), 256), Error) << type_name(t);
    EXPECT_THROW(vec_dot_ref(t, 256, q.data(), q.data()), Error) << type_name(t);
  }
  EXPECT_THROW(dequantize_row_ref(static_cast<DType>(99), q.data(), y.data(), 256), Error);
}

}  // namespace
}  // namespace ms
