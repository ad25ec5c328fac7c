// AVX2 + FMA + F16C kernels for attention (see attention_kernels.h). Built
// with ISA flags: includes nothing that baseline files also instantiate.
#include <immintrin.h>

#include <cstdint>

#include "cpu/attention_kernels.h"
#include "quant/simd_hsum.h"

namespace ms::attn_kernels {
namespace {

using simd::hsum;

// a * b + c, rounded once. The tails use it explicitly so both cache types
// round alike whatever the compiler contracts or vectorizes (an F32 cache of
// halves then gives the F16 path's results bit for bit). The builtin, not
// std::fma: no inline library function built with AVX2 flags here that a
// baseline caller could be linked to.
inline float fma1(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

inline __m256 load_half8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace

float dot_f32_f16_avx2(const float* a, const uint16_t* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_half8(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load_half8(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_half8(b + i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum = fma1(a[i], _cvtsh_ss(b[i]), sum);
  return sum;
}

void axpy_f16_avx2(float w, const uint16_t* v, float* y, int n) {
  const __m256 vw = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vw, load_half8(v + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = fma1(w, _cvtsh_ss(v[i]), y[i]);
}

float dot_f32_f32_avx2(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum = fma1(a[i], b[i], sum);
  return sum;
}

void axpy_f32_avx2(float w, const float* v, float* y, int n) {
  const __m256 vw = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vw, _mm256_loadu_ps(v + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = fma1(w, v[i], y[i]);
}

namespace {
// 8 int8 -> 8 floats (exact).
inline __m256 load_i8x8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
}  // namespace

float dot_f32_q8_0_avx2(const float* a, const BlockQ8_0* b, int n) {
  // Per block: the 32 products in one vector of partial sums, then scaled by
  // d into the running sum (one FMA per block, as the scalar version does).
  __m256 acc = _mm256_setzero_ps();
  for (int blk = 0; blk < n / QK; ++blk, a += QK) {
    const int8_t* q = b[blk].qs;
    __m256 s = _mm256_mul_ps(_mm256_loadu_ps(a), load_i8x8(q));
    s = _mm256_fmadd_ps(_mm256_loadu_ps(a + 8), load_i8x8(q + 8), s);
    s = _mm256_fmadd_ps(_mm256_loadu_ps(a + 16), load_i8x8(q + 16), s);
    s = _mm256_fmadd_ps(_mm256_loadu_ps(a + 24), load_i8x8(q + 24), s);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(b[blk].d)), s, acc);
  }
  return hsum(acc);
}

void axpy_q8_0_avx2(float w, const BlockQ8_0* v, float* y, int n) {
  for (int blk = 0; blk < n / QK; ++blk, y += QK) {
    const __m256 ws = _mm256_set1_ps(w * _cvtsh_ss(v[blk].d));
    const int8_t* q = v[blk].qs;
    for (int i = 0; i < QK; i += 8)
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(ws, load_i8x8(q + i), _mm256_loadu_ps(y + i)));
  }
}

void f32_to_f16_row_avx2(const float* src, uint16_t* dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

}  // namespace ms::attn_kernels
