// AVX2 GPU Q8 dots of the sub-block formats (gpu_q8_sub32.h), decode then
// dot: no longer dispatched (every sub-block format has a SIMD-decoding
// kernel in gpu_q8_sub32_fast_avx2.cpp); kept as the baseline of the bench's
// g-old rows. Each block is decoded once (scalar, gpu_sub32_decode_block) for
// 4 rows' worth of activation loads being shared, and each sub-block's two
// 16-element integer dots are done with maddubs/madd. The float terms are
// then combined as gpu_sub32_term does, in the same order (the compiler may fuse some into
// FMAs here, so the last bits can differ from the reference).
//
// Built with -mavx2 -mfma -mf16c: see the note in simd_kernels.h (this file
// calls the baseline, non-inline gpu_sub32_* functions only).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"

namespace ms::simd {
namespace {

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Sums of the low and high 128-bit lanes of 8 int32.
inline void half_sums(__m256i v, int* lo, int* hi) {
  __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
  a = _mm_hadd_epi32(a, b);  // a0+a1, a2+a3, b0+b1, b2+b3
  a = _mm_hadd_epi32(a, a);  // lo, hi, lo, hi
  *lo = _mm_cvtsi128_si32(a);
  *hi = _mm_extract_epi32(a, 1);
}

template <int R>
void rows_sub32(DType t, const GpuSub32Format& f, int64_t n, const uint8_t* w, int64_t stride, const int8_t* aq,
                const float* ad, const float* as, float* out) {
  const int64_t bytes = type_info(t).type_size, subs = f.block_elems / 32;
  const __m256i ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
  float acc[R] = {};
  GpuSub32 u[R][8];
  for (int64_t item = 0; item < n / 32; ++item) {
    if (item % subs == 0)
      for (int r = 0; r < R; ++r) gpu_sub32_decode_block(t, w + r * stride + (item / subs) * bytes, u[r]);
    const __m256i a = load256(aq + 32 * item);
    int h0 = 0, h1 = 0;
    if (f.min_kind == 2) half_sums(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, a), ones16), &h0, &h1);
    for (int r = 0; r < R; ++r) {
      const GpuSub32& s = u[r][item % subs];
      const __m256i q = load256(s.q);
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(a, q)), ones16);
      int s0, s1;
      half_sums(p, &s0, &s1);
      float v = f.two_scales ? ad[item] * (s.s[0] * static_cast<float>(s0) + s.s[1] * static_cast<float>(s1))
                             : ad[item] * s.s[0] * static_cast<float>(s0 + s1);
      if (f.min_kind == 1) v += s.m[0] * as[item];
      if (f.min_kind == 2) v += ad[item] * (s.m[0] * static_cast<float>(h0) + s.m[1] * static_cast<float>(h1));
      acc[r] += v;
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

template <DType T>
void rows(int64_t n, const void* w, int64_t stride, int64_t nrows, const void* act, float* out) {
  const GpuSub32Format f = gpu_sub32_format(T);
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* aq = static_cast<const int8_t*>(act);
  const auto* ad = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + n);
  const float* as = ad + n / 32;
  int64_t r = 0;
  for (; r + 4 <= nrows; r += 4) rows_sub32<4>(T, f, n, wp + r * stride, stride, aq, ad, as, out + r);
  for (; r < nrows; ++r) rows_sub32<1>(T, f, n, wp + r * stride, stride, aq, ad, as, out + r);
}

}  // namespace

GpuQ8RowsFn gpu_q8_sub32_rows_kernel_avx2(DType t) {
  if (GpuQ8RowsFn fast = gpu_q8_sub32_fast_kernel_avx2(t)) return fast;
  return gpu_q8_sub32_generic_kernel_avx2(t);
}

GpuQ8RowsFn gpu_q8_sub32_generic_kernel_avx2(DType t) {
  switch (t) {
    case DType::Q4_1: return rows<DType::Q4_1>;
    case DType::Q5_0: return rows<DType::Q5_0>;
    case DType::Q5_1: return rows<DType::Q5_1>;
    case DType::Q2_K: return rows<DType::Q2_K>;
    case DType::Q3_K: return rows<DType::Q3_K>;
    case DType::TQ1_0: return rows<DType::TQ1_0>;
    case DType::TQ2_0: return rows<DType::TQ2_0>;
    case DType::IQ4_NL: return rows<DType::IQ4_NL>;
    case DType::IQ4_XS: return rows<DType::IQ4_XS>;
    case DType::IQ2_XXS: return rows<DType::IQ2_XXS>;
    case DType::IQ2_XS: return rows<DType::IQ2_XS>;
    case DType::IQ2_S: return rows<DType::IQ2_S>;
    case DType::IQ3_XXS: return rows<DType::IQ3_XXS>;
    case DType::IQ3_S: return rows<DType::IQ3_S>;
    case DType::IQ1_S: return rows<DType::IQ1_S>;
    case DType::IQ1_M: return rows<DType::IQ1_M>;
    default: return nullptr;
  }
}

}  // namespace ms::simd
