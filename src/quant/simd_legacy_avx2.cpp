// AVX2 row-dot kernels of the formats that had only the scalar path: Q4_1 and
// Q5_1 (x Q8_1), Q5_0 (x Q8_0), Q2_K and Q3_K (x Q8_K). Unsigned levels go
// through maddubs (u8 x s8); offsets (-16, -4) are subtracted as maddubs of
// the constant with the activations, and the affine formats' m multiplies
// Q8_1's stored d*sum, as in the reference (ref_simple.cpp, ref_kquants.cpp).
// Integer sums are exact; only float scaling and summation order differ.
//
// Built with -mavx2 -mfma -mf16c: see the note in simd_kernels.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/simd_avx2_util.h"
#include "quant/simd_kernels.h"
#include "quant/simd_row_groups.h"

namespace ms::simd {
namespace {

// 0x10 in byte j where bit j of the little-endian u32 at qh is set (the 5th
// bit of Q5_0/Q5_1 element j).
inline __m256i fifth_bits(const uint8_t* qh) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(load_u32(qh))),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Lane 0 holds v, the rest 0: a scalar term added into a block's 8 lanes.
inline __m256 lane0(float v) { return _mm256_setr_ps(v, 0, 0, 0, 0, 0, 0, 0); }

// ---------------------------------------------------------------- 32-wide blocks
// Unsigned q (0..31) times a, the int16 pairs less `offset` * a's pairs.
inline __m256i dot_offset(__m256i q, __m256i a, int8_t offset) {
  const __m256i p = _mm256_maddubs_epi16(q, a);
  const __m256i o = _mm256_maddubs_epi16(_mm256_set1_epi8(offset), a);
  return _mm256_madd_epi16(_mm256_sub_epi16(p, o), _mm256_set1_epi16(1));
}

struct Q41 {
  using Weight = BlockQ4_1;
  using Act = BlockQ8_1;
  static constexpr int kBlock = QK;
  static __m256 block(const Weight& w, const Act& a) {
    const __m256i s = dot_offset(unpack_nibbles_32(w.qs), load256(a.qs), 0);
    return _mm256_fmadd_ps(_mm256_set1_ps(f16(w.d) * f16(a.d)), _mm256_cvtepi32_ps(s), lane0(f16(w.m) * f16(a.s)));
  }
};

struct Q51 {
  using Weight = BlockQ5_1;
  using Act = BlockQ8_1;
  static constexpr int kBlock = QK;
  static __m256 block(const Weight& w, const Act& a) {
    const __m256i q = _mm256_or_si256(unpack_nibbles_32(w.qs), fifth_bits(w.qh));
    const __m256i s = dot_offset(q, load256(a.qs), 0);
    return _mm256_fmadd_ps(_mm256_set1_ps(f16(w.d) * f16(a.d)), _mm256_cvtepi32_ps(s), lane0(f16(w.m) * f16(a.s)));
  }
};

struct Q50 {
  using Weight = BlockQ5_0;
  using Act = BlockQ8_0;
  static constexpr int kBlock = QK;
  static __m256 block(const Weight& w, const Act& a) {
    const __m256i q = _mm256_or_si256(unpack_nibbles_32(w.qs), fifth_bits(w.qh));
    return scaled(f16(w.d) * f16(a.d), dot_offset(q, load256(a.qs), 16));
  }
};

// ---------------------------------------------------------------- Q2_K
// Element 128h+32j+l is bits 2j..2j+1 of qs[32h+l]; its sub-block of 16 is
// 8h+2j (l < 16) or 8h+2j+1, with scale nibble / min nibble in scales[].
struct Q2K {
  using Weight = BlockQ2_K;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i v = load256(w.qs + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const int sb = 8 * h + 2 * j;
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
        const __m256i p = _mm256_maddubs_epi16(q, load256(a.qs + 128 * h + 32 * j));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, scale_pair(w.scales[sb] & 15, w.scales[sb + 1] & 15)));
      }
    }
    // sum_i min_i * bsum_i
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(load128(w.scales), 4), _mm_set1_epi8(0x0F)));
    const __m256i msum = _mm256_madd_epi16(mins, load256(a.bsums));
    const __m256 main = scaled(f16(w.d) * a.d, sum);
    return _mm256_fnmadd_ps(_mm256_set1_ps(f16(w.dmin) * a.d), _mm256_cvtepi32_ps(msum), main);
  }
};

// ---------------------------------------------------------------- Q3_K
// As Q2_K for the low 2 bits; the high bit of element 128h+32j+l is bit 4h+j
// of hmask[l] (clear: 4 lower). With u = low | high << 2 in 0..7, the level
// is u - 4. Scales: 16 signed 6-bit values (see ref_kquants.cpp).
struct Q3K {
  using Weight = BlockQ3_K;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  // The 16 scales as int16 (sub-blocks 0..7 in the low lane, 8..15 in the
  // high): value i = (low nibble | 2 high bits << 4) - 32, where the low
  // nibble of i is in byte i % 8 (high half of the byte for i >= 8) and its
  // top bits at bit 2(i/4) of byte 8 + i % 4.
  static __m256i scales(const uint8_t* s) {
    uint64_t lo8;
    std::memcpy(&lo8, s, 8);
    const __m128i a = _mm_cvtsi64_si128(static_cast<long long>(lo8));
    const __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(a, _mm_srli_epi16(a, 4)), _mm_set1_epi8(0x0F));
    const uint32_t b = load_u32(s + 8);
    const __m128i hi = _mm_and_si128(_mm_set_epi32(static_cast<int>(b >> 6), static_cast<int>(b >> 4),
                                                   static_cast<int>(b >> 2), static_cast<int>(b)),
                                     _mm_set1_epi8(3));
    const __m128i v = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
    return _mm256_cvtepi8_epi16(v);
  }
  static __m256i pair_mask(int j) {  // low lane: int16 element 2j, high lane: 2j + 1
    const int a = 4 * j, b = 4 * j + 2;
    const __m128i m0 = _mm_set1_epi16(static_cast<int16_t>(a | ((a + 1) << 8)));
    const __m128i m1 = _mm_set1_epi16(static_cast<int16_t>(b | ((b + 1) << 8)));
    return _mm256_set_m128i(m1, m0);
  }
  static __m256 block(const Weight& w, const Act& a) {
    const __m256i sc16 = scales(w.scales);
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    const __m256i hm = load256(w.hmask);
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i v = load256(w.qs + 32 * h);
      // the half's 8 scales, both lanes (the selector must be an immediate, also at -O0)
      const __m256i sch = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00) : _mm256_permute2x128_si256(sc16, sc16, 0x11);
      for (int j = 0; j < 4; ++j) {
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
        const __m256i u = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
        const __m256i av = load256(a.qs + 128 * h + 32 * j);
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, av), _mm256_maddubs_epi16(four, av));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sch, pair_mask(j))));
      }
    }
    return scaled(f16(w.d) * a.d, sum);
  }
};

}  // namespace

#define MS_ROWS(fn, Fmt)                                                                                   \
  void fn(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {                 \
    for_row_groups<BlockRows<Fmt>>(n, w, s, rows, a, out);                                                \
  }

MS_ROWS(vec_dot_rows_q4_1_avx2, Q41)
MS_ROWS(vec_dot_rows_q5_1_avx2, Q51)
MS_ROWS(vec_dot_rows_q5_0_avx2, Q50)
MS_ROWS(vec_dot_rows_q2_K_avx2, Q2K)
MS_ROWS(vec_dot_rows_q3_K_avx2, Q3K)

#undef MS_ROWS

}  // namespace ms::simd
