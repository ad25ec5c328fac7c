// GPU Q8 activations on the CPU (quant/gpu_q8.h): the quantizer against a
// plain statement of dev::warp_q8's rule (bit for bit), each weight type's
// dot against dequantize-then-dot. The AVX2 kernels and the dispatched rows
// against the reference: tests/backend_ops (ops dot_q8_<type>).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/gpu_q8.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/error.h"

namespace ms {
namespace {

// ---------------------------------------------------------------- the rule, stated plainly
// For each block of 32 (one warp, lane l holding x[l]):
//   amax = max |x| over the non-NaN lanes (NaN when all are NaN)
//   d = amax / 127
//   q[l] = 0 unless amax > 0; else x[l] / d rounded half-to-even to int32,
//          NaN -> 0, saturating; the stored int8 is its low byte
//   s = d * sum(q as int32), the sum in the butterfly's pairwise order.
struct Expected {
  std::vector<int8_t> q;
  std::vector<float> d, s;
};

Expected gpu_rule(const std::vector<float>& x) {
  Expected e;
  const size_t nb = x.size() / 32;
  for (size_t b = 0; b < nb; ++b) {
    bool any = false;
    float amax = 0.f;
    for (int l = 0; l < 32; ++l) {
      const float a = std::fabs(x[b * 32 + l]);
      if (std::isnan(a)) continue;
      amax = any ? std::max(amax, a) : a;
      any = true;
    }
    if (!any) amax = std::numeric_limits<float>::quiet_NaN();
    const float d = amax / 127.f;
    float v[32];
    for (int l = 0; l < 32; ++l) {
      int64_t qi = 0;
      if (amax > 0.f) {
        const float r = x[b * 32 + l] / d;
        if (std::isnan(r)) qi = 0;
        else if (r >= 2147483647.f) qi = 2147483647;
        else if (r <= -2147483648.f) qi = -2147483648LL;
        else qi = static_cast<int64_t>(std::nearbyint(r));
      }
      e.q.push_back(static_cast<int8_t>(static_cast<uint8_t>(qi & 0xff)));
      v[l] = static_cast<float>(qi);
    }
    for (int o = 16; o > 0; o >>= 1)
      for (int l = 0; l < o; ++l) v[l] = v[l] + v[l + o];
    e.d.push_back(d);
    e.s.push_back(d * v[0]);
  }
  return e;
}

std::vector<float> random_row(int64_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = g(rng);
  return x;
}

// Rows that exercise the edges: all zero, one non-zero, ties at .5, huge
// (near FLT_MAX), tiny (d subnormal), infinities and NaNs.
std::vector<float> edge_row(uint32_t seed) {
  std::vector<float> x = random_row(32 * 12, seed);
  float* b = x.data();
  for (int l = 0; l < 32; ++l) b[l] = 0.f;                              // block 0: zeros
  for (int l = 0; l < 32; ++l) b[32 + l] = l == 5 ? -3.f : 0.f;          // block 1: one value
  for (int l = 0; l < 32; ++l) b[64 + l] = l == 0 ? -127.f : (l - 16) + 0.5f;  // block 2: d = 1, ties at .5
  for (int l = 0; l < 32; ++l) b[96 + l] *= 1e37f;                     // block 3: huge
  for (int l = 0; l < 32; ++l) b[128 + l] *= 1e-30f;                   // block 4: small, d normal
  for (int l = 0; l < 32; ++l) b[160 + l] *= 1e-41f;                   // block 5: d subnormal
  for (int l = 0; l < 32; ++l) b[192 + l] = (l % 3 - 1) * 1e-45f;      // block 6: smallest subnormals
  b[224 + 3] = std::numeric_limits<float>::infinity();                 // block 7: +inf
  b[256 + 9] = std::numeric_limits<float>::quiet_NaN();                // block 8: one NaN
  for (int l = 0; l < 32; ++l) b[288 + l] = std::numeric_limits<float>::quiet_NaN();  // block 9: all NaN
  b[320 + 1] = -std::numeric_limits<float>::infinity();                // block 10: -inf
  b[352 + 0] = std::numeric_limits<float>::max();                      // block 11: FLT_MAX
  b[352 + 1] = -std::numeric_limits<float>::max();
  return x;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void expect_matches_rule(const std::vector<float>& x, const std::vector<uint8_t>& got, const char* what) {
  const int64_t n = static_cast<int64_t>(x.size());
  const Expected e = gpu_rule(x);
  const GpuQ8RowConst r = gpu_q8_row(got.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r.q[i], e.q[static_cast<size_t>(i)]) << what << " element " << i;
  for (int64_t b = 0; b < n / 32; ++b) {
    // bit patterns: NaN == NaN, and +0 vs -0 counts
    ASSERT_EQ(bits(r.d[b]), bits(e.d[static_cast<size_t>(b)])) << what << " d of block " << b;
    ASSERT_EQ(bits(r.s[b]), bits(e.s[static_cast<size_t>(b)])) << what << " s of block " << b;
  }
}

using QuantFn = void (*)(const float*, void*, int64_t);

void check_quantizer(QuantFn fn, const char* what) {
  std::vector<std::vector<float>> rows;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const int64_t n = 32 * static_cast<int64_t>(seed % 7 + 1 + (seed % 2 ? 64 : 0));  // odd block counts too
    rows.push_back(random_row(n, seed, seed % 3 == 0 ? 1e-3f : seed % 3 == 1 ? 1.f : 300.f));
  }
  for (uint32_t seed = 100; seed < 105; ++seed) rows.push_back(edge_row(seed));
  for (const auto& x : rows) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> out(static_cast<size_t>(gpu_q8_row_bytes(n)), 0xA5);  // poisoned
    fn(x.data(), out.data(), n);
    expect_matches_rule(x, out, what);
  }
}

TEST(GpuQ8Quantize, ReferenceMatchesTheGpuRule) { check_quantizer(quantize_row_gpu_q8_ref, "ref"); }

TEST(GpuQ8Quantize, DispatchedMatchesTheGpuRule) { check_quantizer(quantize_row_gpu_q8, "dispatched"); }

TEST(GpuQ8Quantize, Avx2MatchesTheGpuRule) {
  if (!simd::cpu_supports_avx2()) GTEST_SKIP() << "no AVX2";
  check_quantizer(simd::gpu_q8_quantize_kernel_avx2(), "avx2");
}

TEST(GpuQ8Quantize, RowBytesAndErrors) {
  EXPECT_EQ(gpu_q8_row_bytes(0), 0);
  EXPECT_EQ(gpu_q8_row_bytes(64), 64 + 2 * 8);
  EXPECT_THROW(gpu_q8_row_bytes(48), Error);
  EXPECT_THROW(quantize_row_gpu_q8(nullptr, nullptr, 33), Error);
}

// ---------------------------------------------------------------- dots
const std::vector<DType>& gpu_types() {
  static const std::vector<DType> k = {
      DType::Q4_K,  DType::Q5_K,  DType::Q6_K,  DType::Q8_0,   DType::Q4_0,    DType::MXFP4,   DType::Q4_1,
      DType::Q5_0,  DType::Q5_1,  DType::Q2_K,  DType::Q3_K,   DType::TQ1_0,   DType::TQ2_0,   DType::IQ4_NL,
      DType::IQ4_XS, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S,
      DType::IQ1_M};
  return k;
}

// Random weight rows: random bytes (every packed scale/quant pattern) with
// sane f16 / E8M0 scale fields.
std::vector<uint8_t> random_weights(DType t, int64_t n, int64_t rows, uint32_t seed) {
  const int64_t rb = row_bytes(t, n);
  const TypeInfo& info = type_info(t);
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(static_cast<size_t>(rb * rows));
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> sc(0.001f, 0.05f);
  auto put = [&](uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < n / info.block_size; ++b) {
      uint8_t* blk = w.data() + r * rb + b * info.type_size;
      switch (t) {
        case DType::Q4_K: case DType::Q5_K: put(blk, sc(rng)); put(blk + 2, sc(rng)); break;
        case DType::Q6_K: put(blk + 208, sc(rng)); break;
        case DType::Q8_0: case DType::Q4_0: put(blk, sc(rng)); break;
        case DType::MXFP4: blk[0] = static_cast<uint8_t>(115 + rng() % 12); break;
        case DType::Q4_1: case DType::Q5_1: put(blk, sc(rng)); put(blk + 2, sc(rng)); break;
        case DType::Q2_K: put(blk + 80, sc(rng)); put(blk + 82, sc(rng)); break;
        case DType::Q3_K: put(blk + 108, sc(rng)); break;
        case DType::TQ1_0: put(blk + 52, sc(rng)); break;
        case DType::TQ2_0: put(blk + 64, sc(rng)); break;
        case DType::IQ1_M: {  // the f16 scale is the top nibbles of the 4 scale words
          const uint16_t h = f32_to_f16(sc(rng));
          for (int k = 0; k < 4; ++k)
            blk[49 + 2 * k] = static_cast<uint8_t>((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
          break;
        }
        default: put(blk, sc(rng)); break;  // Q5_0 and the other IQ formats: d first
      }
    }
  return w;
}

std::vector<uint8_t> quantized(const std::vector<float>& x) {
  std::vector<uint8_t> a(static_cast<size_t>(gpu_q8_row_bytes(static_cast<int64_t>(x.size()))));
  quantize_row_gpu_q8_ref(x.data(), a.data(), static_cast<int64_t>(x.size()));
  return a;
}

// Dequantized weights . dequantized activations (d * q) in double, and the
// scale of the problem: sum |w_i * a_i| (a relative bound that survives
// cancellation).
void ref_dot(DType t, int64_t n, const uint8_t* w, const std::vector<uint8_t>& act, double* dot, double* mag) {
  std::vector<float> wf(static_cast<size_t>(n));
  dequantize_row_ref(t, w, wf.data(), n);
  const GpuQ8RowConst a = gpu_q8_row(act.data(), n);
  *dot = 0;
  *mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(wf[static_cast<size_t>(i)]) * (static_cast<double>(a.d[i / 32]) * a.q[i]);
    *dot += p;
    *mag += std::fabs(p);
  }
}

int64_t test_cols(DType t, int k) {
  // 32-element formats also get lengths that are not a multiple of 256 (tails)
  return type_info(t).block_size == 256 ? 256 * (k + 1) : 32 * (7 + 5 * k);
}

TEST(GpuQ8Dot, ReferenceMatchesDequantizedDot) {
  for (DType t : gpu_types())
    for (int k = 0; k < 3; ++k) {
      const int64_t n = test_cols(t, k), rows = 5;
      const std::vector<uint8_t> w = random_weights(t, n, rows, 7u + k);
      const std::vector<uint8_t> act = quantized(random_row(n, 40u + k));
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* wr = w.data() + r * row_bytes(t, n);
        double want, mag;
        ref_dot(t, n, wr, act, &want, &mag);
        const float got = vec_dot_gpu_q8_ref(t, n, wr, act.data());
        EXPECT_NEAR(got, want, 1e-5 * mag) << type_name(t) << " n=" << n << " row " << r;
      }
    }
}

TEST(GpuQ8Dot, ZeroActivations) {
  for (DType t : gpu_types()) {
    const int64_t n = test_cols(t, 1);
    const std::vector<uint8_t> w = random_weights(t, n, 1, 3);
    const std::vector<uint8_t> act = quantized(std::vector<float>(static_cast<size_t>(n), 0.f));
    EXPECT_EQ(vec_dot_gpu_q8_ref(t, n, w.data(), act.data()), 0.f) << type_name(t);
  }
}

TEST(GpuQ8Dot, RejectsOtherTypes) {
  const std::vector<uint8_t> act = quantized(random_row(256, 1));
  std::vector<uint8_t> w(1024);
  EXPECT_THROW(vec_dot_gpu_q8_ref(DType::Q8_K, 256, w.data(), act.data()), Error);
  EXPECT_THROW(vec_dot_gpu_q8_ref(DType::F32, 256, w.data(), act.data()), Error);
  float out;
  EXPECT_THROW(vec_dot_rows_gpu_q8(DType::Q8_1, 256, w.data(), 0, 1, act.data(), &out), Error);
  EXPECT_THROW(vec_dot_rows_gpu_q8(DType::Q4_K, 128, w.data(), 0, 1, act.data(), &out), Error);
  EXPECT_FALSE(gpu_q8_supported(DType::BF16));
  EXPECT_TRUE(gpu_q8_supported(DType::Q4_K));
}

}  // namespace
}  // namespace ms
