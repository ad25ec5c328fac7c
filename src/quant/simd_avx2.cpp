// AVX2 (+FMA, F16C) row-dot kernels: weights x quantized activations with
// integer dot products (maddubs/madd), several weight rows per activation
// block so activation loads and per-block activation work are shared.
//
// Built with -mavx2 -mfma -mf16c: see the note in simd_kernels.h about what
// this file may include.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/simd_avx2_util.h"
#include "quant/simd_hsum.h"
#include "quant/simd_kernels.h"
#include "quant/simd_row_groups.h"

namespace ms::simd {
namespace {

// ---------------------------------------------------------------- helpers

// pshufb masks broadcasting int16 element j (of 8 in a 128-bit lane) to all of it.
alignas(32) constexpr uint8_t kBroadcastI16[8][32] = {
#define MS_B(j) {2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, \
                 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1}
    MS_B(0), MS_B(1), MS_B(2), MS_B(3), MS_B(4), MS_B(5), MS_B(6), MS_B(7)
#undef MS_B
};
inline __m256i bcast_i16(__m256i v, int j) { return _mm256_shuffle_epi8(v, load256(kBroadcastI16[j])); }

// pshufb masks for Q6_K: low lane gets int16 element 2k, high lane 2k+1.
alignas(32) constexpr uint8_t kPairI16[4][32] = {
#define MS_P(a, b) {2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1, \
                    2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1}
    MS_P(0, 1), MS_P(2, 3), MS_P(4, 5), MS_P(6, 7)
#undef MS_P
};

// ---------------------------------------------------------------- Q4_K x Q8_K
// Per super-block: sum_j sc_j * (q . a)_j * d * da  -  sum_j m_j * bsum_j * dmin * da.
struct Q4K {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = sizeof(BlockQ4_K);
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK_K;
    const auto* a = static_cast<const BlockQ8_K*>(act);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[R];
    __m128 accm[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_next_group<R>(w, stride, i, kBlockBytes);
      const BlockQ8_K& A = a[i];
      const __m256i bs = load256(A.bsums);
      // sums of the 8 activation sub-blocks of 32 (fits int16: |sum| <= 4096)
      const __m128i bsum8 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const __m128 da = _mm_set1_ps(A.d);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const BlockQ4_K*>(w + r * stride) + i;
        const __m256i scm16 = _mm256_cvtepu8_epi16(unpack_k4_scales(W->scales));  // sc0..7 | m0..7
        const __m128i prod_m = _mm_madd_epi16(bsum8, _mm256_extracti128_si256(scm16, 1));
        const __m256i sc = _mm256_permute2x128_si256(scm16, scm16, 0x00);
        __m256i sum = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
          const __m256i q = load256(W->qs + 32 * c);
          const __m256i lo = _mm256_and_si256(q, m4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          const __m256i pl = _mm256_maddubs_epi16(lo, load256(A.qs + 64 * c));
          const __m256i ph = _mm256_maddubs_epi16(hi, load256(A.qs + 64 * c + 32));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pl, bcast_i16(sc, 2 * c)));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(ph, bcast_i16(sc, 2 * c + 1)));
        }
        // d and dmin side by side -> [d*da, dmin*da, ...]
        const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(&W->d)))), da);
        acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sum), acc[r]);
        accm[r] = _mm_fmadd_ps(_mm_shuffle_ps(dd, dd, 0x55), _mm_cvtepi32_ps(prod_m), accm[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) - hsum(accm[r]);
  }
};

// ---------------------------------------------------------------- Q5_K x Q8_K
// As Q4_K with a 5th bit: bit 2c (low nibbles) / 2c+1 (high nibbles) of qh[l]
// belongs to element l of chunk c.
struct Q5K {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = sizeof(BlockQ5_K);
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK_K;
    const auto* a = static_cast<const BlockQ8_K*>(act);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    __m256 acc[R];
    __m128 accm[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_next_group<R>(w, stride, i, kBlockBytes);
      const BlockQ8_K& A = a[i];
      const __m256i bs = load256(A.bsums);
      const __m128i bsum8 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const __m128 da = _mm_set1_ps(A.d);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const BlockQ5_K*>(w + r * stride) + i;
        const __m256i scm16 = _mm256_cvtepu8_epi16(unpack_k4_scales(W->scales));
        const __m128i prod_m = _mm_madd_epi16(bsum8, _mm256_extracti128_si256(scm16, 1));
        const __m256i sc = _mm256_permute2x128_si256(scm16, scm16, 0x00);
        __m256i hb = load256(W->qh);
        __m256i sum = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
          // hb has been shifted right by 2c: bits 0 and 1 of each byte are ours
          // (16-bit shifts are fine: we look at most at bit 7 of the original).
          const __m256i q = load256(W->qs + 32 * c);
          const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4),
                                             _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit4));
          const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                             _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit4));
          hb = _mm256_srli_epi16(hb, 2);
          const __m256i pl = _mm256_maddubs_epi16(lo, load256(A.qs + 64 * c));
          const __m256i ph = _mm256_maddubs_epi16(hi, load256(A.qs + 64 * c + 32));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pl, bcast_i16(sc, 2 * c)));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(ph, bcast_i16(sc, 2 * c + 1)));
        }
        const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(&W->d)))), da);
        acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sum), acc[r]);
        accm[r] = _mm_fmadd_ps(_mm_shuffle_ps(dd, dd, 0x55), _mm_cvtepi32_ps(prod_m), accm[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) - hsum(accm[r]);
  }
};

// ---------------------------------------------------------------- Q6_K x Q8_K
// Each half h of 128 elements: ql[64h..64h+63] (L0 = first 32, L1 = next 32)
// and qh[32h..32h+31] (H) give, for l < 32:
//   element 128h+l    = L0 low nibble  | H bits 0-1 << 4
//   element 128h+32+l = L1 low nibble  | H bits 2-3 << 4
//   element 128h+64+l = L0 high nibble | H bits 4-5 << 4
//   element 128h+96+l = L1 high nibble | H bits 6-7 << 4
// x = d * sc * (q - 32); the -32 is applied through the activation's bsums.
struct Q6K {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = sizeof(BlockQ6_K);
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK_K;
    const auto* a = static_cast<const BlockQ8_K*>(act);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_next_group<R>(w, stride, i, kBlockBytes);
      const BlockQ8_K& A = a[i];
      const __m256i bs = load256(A.bsums);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const BlockQ6_K*>(w + r * stride) + i;
        const __m256i sc16 = _mm256_cvtepi8_epi16(load128(W->scales));  // sc0..7 | sc8..15
        // sum_j sc_j * bsum_j, for the -32 offset
        const __m256i offs = _mm256_madd_epi16(bs, sc16);
        __m256i sum = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
          const __m256i sch = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                     : _mm256_permute2x128_si256(sc16, sc16, 0x11);
          const __m256i L0 = load256(W->ql + 64 * h);
          const __m256i L1 = load256(W->ql + 64 * h + 32);
          const __m256i H = load256(W->qh + 32 * h);
          const __m256i q0 = _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
          const __m256i q1 = _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
          const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), _mm256_and_si256(H, m30));
          const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                                             _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
          const int8_t* aq = A.qs + 128 * h;
          const __m256i p0 = _mm256_maddubs_epi16(q0, load256(aq));
          const __m256i p1 = _mm256_maddubs_epi16(q1, load256(aq + 32));
          const __m256i p2 = _mm256_maddubs_epi16(q2, load256(aq + 64));
          const __m256i p3 = _mm256_maddubs_epi16(q3, load256(aq + 96));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p0, _mm256_shuffle_epi8(sch, load256(kPairI16[0]))));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p1, _mm256_shuffle_epi8(sch, load256(kPairI16[1]))));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p2, _mm256_shuffle_epi8(sch, load256(kPairI16[2]))));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p3, _mm256_shuffle_epi8(sch, load256(kPairI16[3]))));
        }
        sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(offs, 5));
        const __m256 d = _mm256_set1_ps(f16(W->d) * A.d);
        acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

// ---------------------------------------------------------------- Q8_0 x Q8_0
// Signed x signed through maddubs: |w| times a with w's sign. Exact for
// activations in [-127, 127] (pairs stay below the int16 saturation).
struct Q80 {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = sizeof(BlockQ8_0);
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK;
    const auto* a = static_cast<const BlockQ8_0*>(act);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_next_group<R>(w, stride, i, kBlockBytes);
      const __m256i av = load256(a[i].qs);
      const float da = f16(a[i].d);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const BlockQ8_0*>(w + r * stride) + i;
        const __m256i wv = load256(W->qs);
        const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(av, wv));
        const __m256i s = _mm256_madd_epi16(p, ones);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(f16(W->d) * da), _mm256_cvtepi32_ps(s), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

// ---------------------------------------------------------------- Q4_0 x Q8_0
// q in 0..15 times a, minus 8 * sum(a) (computed once per activation block).
struct Q40 {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = sizeof(BlockQ4_0);
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK;
    const auto* a = static_cast<const BlockQ8_0*>(act);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i eights = _mm256_set1_epi8(8);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_next_group<R>(w, stride, i, kBlockBytes);
      const __m256i av = load256(a[i].qs);
      const __m256i a8 = _mm256_maddubs_epi16(eights, av);  // 8*(a_2k + a_2k+1)
      const float da = f16(a[i].d);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const BlockQ4_0*>(w + r * stride) + i;
        const __m256i q = unpack_nibbles_32(W->qs);
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, av), a8);
        const __m256i s = _mm256_madd_epi16(p, ones);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(f16(W->d) * da), _mm256_cvtepi32_ps(s), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

// ---------------------------------------------------------------- MXFP4 x Q8_0
// E2M1 codes through a pshufb table of the doubled values plus 12 (0..24, so
// maddubs sees unsigned weights); 12 * sum(a) is subtracted per block.
struct MXFP4 {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = sizeof(BlockMXFP4);
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK;
    const auto* a = static_cast<const BlockQ8_0*>(act);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i twelves = _mm256_set1_epi8(12);
    const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                           12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_next_group<R>(w, stride, i, kBlockBytes);
      const __m256i av = load256(a[i].qs);
      const __m256i a12 = _mm256_maddubs_epi16(twelves, av);
      const float da = f16(a[i].d);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const BlockMXFP4*>(w + r * stride) + i;
        const __m256i u = _mm256_shuffle_epi8(table, unpack_nibbles_32(W->qs));
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, av), a12);
        const __m256i s = _mm256_madd_epi16(p, ones);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(e8m0_half(W->e) * da), _mm256_cvtepi32_ps(s), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

// ---------------------------------------------------------------- float weights x F32
// Widen 8 weights to f32 and FMA; the tail (n % 8) is scalar.
struct FromBF16 {
  static __m256 load8(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static float one(const uint16_t* p) {
    const uint32_t bits = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  using T = uint16_t;
};
struct FromF16 {
  static __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
  static float one(const uint16_t* p) { return f16(*p); }
  using T = uint16_t;
};
struct FromF32 {
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float one(const float* p) { return *p; }
  using T = float;
};

template <class From>
struct FloatDot {
  static constexpr int kRows = 4;
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    using T = typename From::T;
    const float* x = static_cast<const float*>(act);
    const T* wr[R];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const T*>(w + r * stride);
    __m256 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      prefetch_next_group<R>(w, stride, j / 16, 16 * sizeof(T));
      const __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + 8);
      for (int r = 0; r < R; ++r) {
        acc0[r] = _mm256_fmadd_ps(From::load8(wr[r] + j), x0, acc0[r]);
        acc1[r] = _mm256_fmadd_ps(From::load8(wr[r] + j + 8), x1, acc1[r]);
      }
    }
    for (; j + 8 <= n; j += 8) {
      const __m256 x0 = _mm256_loadu_ps(x + j);
      for (int r = 0; r < R; ++r) acc0[r] = _mm256_fmadd_ps(From::load8(wr[r] + j), x0, acc0[r]);
    }
    for (int r = 0; r < R; ++r) {
      float s = hsum(_mm256_add_ps(acc0[r], acc1[r]));
      for (int64_t k = j; k < n; ++k) s += From::one(wr[r] + k) * x[k];
      out[r] = s;
    }
  }
};

// ---------------------------------------------------------------- activation quantizers
// The rule of ref_formats.h, step for step in float so the bytes match
// quantize_row_ref: amax = max |x| (NaNs ignored), d = amax / 127, id = 1 / d
// (0 when d is 0), q = round-half-even(x * id) (non-finite -> 0) clamped to
// [-127, 127]. _cvtss_sh rounds to nearest-even like f32_to_f16 (d is never NaN).

// max |x| over 8*k floats; max_ps returns its second operand when either is
// NaN, so NaN inputs leave the running max alone (as std::max(m, |x|) does).
inline float abs_max(const float* x, int k) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < k; ++i) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * i), abs_mask), m);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// 8 floats -> 8 int32 levels.
inline __m256i levels8(const float* x, __m256 id) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), id);
  const __m256 finite = _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), _mm256_set1_ps(__builtin_inff()), _CMP_LT_OQ);
  v = _mm256_and_ps(v, finite);
  v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.f)), _mm256_set1_ps(127.f));
  return _mm256_cvtps_epi32(v);
}

// 4 x 8 int32 (elements 0..31 in order) -> 32 int8 in order.
inline __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline float inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

inline uint16_t to_f16(float d) { return static_cast<uint16_t>(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT)); }

}  // namespace

void quantize_act_q8_0_avx2(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) {
    const float* x = src + i * QK;
    const float d = abs_max(x, 4) / 127.0f;
    const __m256 id = _mm256_set1_ps(inverse(d));
    const __m256i q = pack32(levels8(x, id), levels8(x + 8, id), levels8(x + 16, id), levels8(x + 24, id));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs), q);
    b[i].d = to_f16(d);
  }
}

void quantize_act_q8_K_avx2(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    const float d = abs_max(x, 32) / 127.0f;
    const __m256 id = _mm256_set1_ps(inverse(d));
    __m128i sums[4];
    for (int c = 0; c < 4; ++c) {  // 64 elements: 4 groups of 16 for bsums
      __m256i l[8];
      for (int k = 0; k < 8; ++k) l[k] = levels8(x + 64 * c + 8 * k, id);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + 64 * c), pack32(l[0], l[1], l[2], l[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + 64 * c + 32), pack32(l[4], l[5], l[6], l[7]));
      // group g = l[2g] + l[2g+1]; two rounds of hadd leave, per 128-bit
      // lane, one partial sum per group; adding the lanes finishes them.
      const __m256i h01 = _mm256_hadd_epi32(_mm256_add_epi32(l[0], l[1]), _mm256_add_epi32(l[2], l[3]));
      const __m256i h23 = _mm256_hadd_epi32(_mm256_add_epi32(l[4], l[5]), _mm256_add_epi32(l[6], l[7]));
      const __m256i h = _mm256_hadd_epi32(h01, h23);
      sums[c] = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b[i].bsums), _mm_packs_epi32(sums[0], sums[1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b[i].bsums + 8), _mm_packs_epi32(sums[2], sums[3]));
    b[i].d = d;
  }
}

// ---------------------------------------------------------------- entry points

void vec_dot_rows_q4_K_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q4K>(n, w, s, rows, a, out);
}
void vec_dot_rows_q5_K_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q5K>(n, w, s, rows, a, out);
}
void vec_dot_rows_q6_K_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q6K>(n, w, s, rows, a, out);
}
void vec_dot_rows_q8_0_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q80>(n, w, s, rows, a, out);
}
void vec_dot_rows_q4_0_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q40>(n, w, s, rows, a, out);
}
void vec_dot_rows_mxfp4_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<MXFP4>(n, w, s, rows, a, out);
}
void vec_dot_rows_bf16_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<FloatDot<FromBF16>>(n, w, s, rows, a, out);
}
void vec_dot_rows_f16_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<FloatDot<FromF16>>(n, w, s, rows, a, out);
}
void vec_dot_rows_f32_avx2(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<FloatDot<FromF32>>(n, w, s, rows, a, out);
}

}  // namespace ms::simd
