// The SIMD-decoding GPU Q8 kernels of the sub-block formats and Q6_K
// (quant/gpu_q8_sub32_simd.h, AVX2 and AVX-512 VNNI builds) against the
// scalar dot_sub32_gpu_q8 (the Q6_K reference for Q6_K): random blocks
// (every packed quant/scale pattern), row counts that hit the 4/2/1 row groups, a padded row stride,
// 32-element formats' lengths that end in a partial group of 8 blocks,
// outputs poisoned with NaN (one past the rows too), activations with zeros
// and saturated blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/cpu_features.h"

namespace ms {
namespace {

const DType kTypes[] = {DType::Q3_K,    DType::Q2_K,   DType::IQ4_XS, DType::IQ4_NL,  DType::Q4_1,
                        DType::Q5_0,    DType::Q5_1,   DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
                        DType::IQ3_XXS, DType::IQ3_S,  DType::IQ1_S,  DType::IQ1_M,  DType::TQ2_0,
                        DType::TQ1_0,   DType::Q6_K};

// Random bytes with a sane f16 scale (and Q2_K's dmin).
std::vector<uint8_t> random_rows(DType t, int64_t n, int64_t rows, int64_t stride, uint32_t seed) {
  const TypeInfo& info = type_info(t);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> sc(0.001f, 0.05f);
  std::vector<uint8_t> w(static_cast<size_t>(stride * rows));
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  auto put = [&](uint8_t* p) {
    const uint16_t h = f32_to_f16(sc(rng));
    std::memcpy(p, &h, 2);
  };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < n / info.block_size; ++b) {
      uint8_t* blk = w.data() + r * stride + b * info.type_size;
      switch (t) {
        case DType::Q3_K: put(blk + 108); break;
        case DType::Q2_K: put(blk + 80), put(blk + 82); break;
        case DType::Q4_1: case DType::Q5_1: put(blk), put(blk + 2); break;
        case DType::TQ2_0: put(blk + 64); break;
        case DType::TQ1_0: put(blk + 52); break;
        case DType::Q6_K: put(blk + 208); break;
        case DType::IQ1_M: {  // the f16 scale is the top nibbles of the 4 scale words
          const uint16_t h = f32_to_f16(sc(rng));
          for (int k = 0; k < 4; ++k)
            blk[49 + 2 * k] = static_cast<uint8_t>((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
          break;
        }
        default: put(blk); break;  // the others: d first
      }
    }
  return w;
}

// GPU Q8 activations of a random row; `saturated` makes every block's
// largest |x| recur so many quants are +-127 (the largest products).
std::vector<uint8_t> activations(int64_t n, uint32_t seed, bool saturated) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = g(rng);
  for (int64_t i = 0; i < n; i += 37) x[static_cast<size_t>(i)] = 0.f;
  if (saturated)
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = (i % 3 == 0 ? -4.f : 4.f);
  std::vector<uint8_t> a(static_cast<size_t>(gpu_q8_row_bytes(n)));
  quantize_row_gpu_q8_ref(x.data(), a.data(), n);
  return a;
}

// sum over the row of |each product| in the reference's terms: the scale of
// float rounding (survives cancellation).
double magnitude(DType t, const uint8_t* row, int64_t n, const GpuQ8RowConst& a) {
  if (t == DType::Q6_K) {  // no sub-block decoder: the dequantized weights
    std::vector<float> w(static_cast<size_t>(n));
    dequantize_row_ref(t, row, w.data(), n);
    double mag = 0;
    for (int64_t i = 0; i < n; ++i)
      mag += std::fabs(static_cast<double>(w[static_cast<size_t>(i)]) * a.d[i / 32] * a.q[i]);
    return mag;
  }
  const GpuSub32Format f = gpu_sub32_format(t);
  const int64_t subs = f.block_elems / 32, bytes = type_info(t).type_size;
  GpuSub32 u[8];
  double mag = 0;
  for (int64_t item = 0; item < n / 32; ++item) {
    if (item % subs == 0) gpu_sub32_decode_block(t, row + (item / subs) * bytes, u);
    const GpuSub32& s = u[item % subs];
    for (int l = 0; l < 32; ++l) {
      const double ax = static_cast<double>(a.d[item]) * a.q[32 * item + l];
      mag += std::fabs(static_cast<double>(s.s[l / 16]) * s.q[l] * ax) + std::fabs(static_cast<double>(s.m[l / 16]) * ax);
    }
  }
  return mag;
}

int64_t lengths(DType t, int k) {
  if (type_info(t).block_size == 256) return 256 * (1 + 3 * k);  // 256, 1024, 1792
  return 32 * (7 + 33 * k);                                        // 224, 1280 (8 x 5), 2336 (73 blocks)
}

void check_kernel(simd::GpuQ8RowsFn fn, DType t, const std::string& what) {
  ASSERT_NE(fn, nullptr) << what << " " << type_name(t);
  for (int k = 0; k < 3; ++k)
    for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 13})
      for (bool saturated : {false, true}) {
        const int64_t n = lengths(t, k), stride = row_bytes(t, n) + 10;
        const std::vector<uint8_t> w = random_rows(t, n, rows, stride, 100u * static_cast<uint32_t>(k) + rows);
        const std::vector<uint8_t> act = activations(n, 7u + k + (saturated ? 50u : 0u), saturated);
        const GpuQ8RowConst a = gpu_q8_row(act.data(), n);
        std::vector<float> out(static_cast<size_t>(rows + 1), std::numeric_limits<float>::quiet_NaN());
        fn(n, w.data(), stride, rows, act.data(), out.data());
        for (int64_t r = 0; r < rows; ++r) {
          const uint8_t* wr = w.data() + r * stride;
          // dot_sub32_gpu_q8 for the sub-block formats, the Q6_K reference for Q6_K
          const float want = vec_dot_gpu_q8_ref(t, n, wr, act.data());
          const double mag = magnitude(t, wr, n, a);
          const float got = out[static_cast<size_t>(r)];
          ASSERT_FALSE(std::isnan(got)) << what << " " << type_name(t) << " n=" << n << " row " << r;
          EXPECT_NEAR(got, want, 1e-5 * mag)
              << what << " " << type_name(t) << " n=" << n << " rows=" << rows << " row " << r
              << (saturated ? " saturated" : "");
        }
        EXPECT_TRUE(std::isnan(out[static_cast<size_t>(rows)])) << what << " " << type_name(t) << " wrote past the rows";
      }
}

TEST(GpuQ8Sub32Simd, Avx2MatchesScalar) {
  if (!simd::cpu_supports_avx2()) GTEST_SKIP() << "no AVX2";
  for (DType t : kTypes) check_kernel(simd::gpu_q8_sub32_fast_kernel_avx2(t), t, "avx2");
}

TEST(GpuQ8Sub32Simd, Avx512MatchesScalar) {
  if (!simd::cpu_supports_avx512()) GTEST_SKIP() << "no AVX-512 VNNI";
  for (DType t : kTypes) check_kernel(simd::gpu_q8_sub32_fast_kernel_avx512(t), t, "avx512");
}

// The dispatcher takes these kernels where the CPU has them; the other
// GPU Q8 types have none here.
TEST(GpuQ8Sub32Simd, DispatchPicksThem) {
  if (!simd::cpu_supports_avx2()) GTEST_SKIP() << "no AVX2";
  for (DType t : kTypes) {
    if (t != DType::Q6_K)
      EXPECT_EQ(simd::gpu_q8_sub32_rows_kernel_avx2(t), simd::gpu_q8_sub32_fast_kernel_avx2(t)) << type_name(t);
    const CpuFeatures& f = cpu_features();  // capped by MOESTREAM_ISA
    const bool vnni = f.avx512 && f.avx512_vnni && simd::cpu_supports_avx512();
    EXPECT_EQ(std::string(gpu_q8_path(t)), vnni ? "avx512" : f.avx2 ? "avx2" : "scalar") << type_name(t);
  }
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q8_0}) EXPECT_EQ(simd::gpu_q8_sub32_fast_kernel_avx2(t), nullptr);
}

}  // namespace
}  // namespace ms
