// AVX-512 (F/BW/VL/DQ + VNNI) row-dot kernels of the 32-element formats
// Q4_1, Q5_0, Q5_1 and IQ4_NL, and of the K formats Q2_K and Q3_K. The
// AVX2 versions (simd_legacy_avx2.cpp, simd_iquants_avx2.cpp) go through
// maddubs + madd on 32 elements at a time; here vpdpbusd (u8 x s8, four
// products into an int32 lane) works on 64 elements per zmm:
//
// - The 32-element formats take two blocks per zmm, as Q4_0 in
//   simd_avx512.cpp: bytes [low nibbles of block 0, of block 1, high nibbles
//   of block 0, of block 1], with the activations of the pair rearranged
//   once to match (shared by the 4 rows). Every weight code is made
//   unsigned (Q5_0: q in 0..31, offset 16; IQ4_NL: level + 128 by a pshufb
//   table, offset 128) and the offset times the activation sum starts the
//   accumulator, once per activation pair.
// - Q2_K and Q3_K take elements [32j, 32j+32) and [128+32j, 128+32j+32) in
//   one zmm (the shift-j planes of both 32-byte halves of qs); each group of
//   4 int32 lanes is one sub-block of 16, scaled by vpdpwssd (the lane sums
//   fit int16). Q3_K's -4 offset is taken from the activations' bsums.
//
// Integer sums are exact; only float scaling and summation order differ from
// the reference. Built with the AVX-512 flags: see the note in
// simd_kernels.h about what this file may include.
#include "quant/simd_avx512_warnings.h"  // first: GCC 12's own _mm512_undefined_* helpers
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/simd_avx2_util.h"
#include "quant/simd_avx512_rows.h"
#include "quant/simd_kernels.h"

namespace ms::simd {
namespace {

// ---------------------------------------------------------------- 32-element formats
// F names Block and Act (Q8_0 or Q8_1) and says whether the format has an
// additive min (x = d*q + m: Q4_1, Q5_1, with Q8_1's s = d*sum(a)), a 5th
// bit in qh (Q5_0, Q5_1), the IQ4_NL level table, and the code offset.
struct FmtQ41 {
  using Block = BlockQ4_1;
  using Act = BlockQ8_1;
  static constexpr bool kMin = true, kFifth = false, kTable = false;
  static constexpr int kOffset = 0;
};
struct FmtQ50 {
  using Block = BlockQ5_0;
  using Act = BlockQ8_0;
  static constexpr bool kMin = false, kFifth = true, kTable = false;
  static constexpr int kOffset = 16;
};
struct FmtQ51 {
  using Block = BlockQ5_1;
  using Act = BlockQ8_1;
  static constexpr bool kMin = true, kFifth = true, kTable = false;
  static constexpr int kOffset = 0;
};
struct FmtIQ4NL {
  using Block = BlockIQ4_NL;
  using Act = BlockQ8_0;
  static constexpr bool kMin = false, kFifth = false, kTable = true;
  static constexpr int kOffset = 128;
};

// The IQ4_NL levels plus 128 (all in 1..241), in every 128-bit lane.
inline __m512i iq4nl_table_u8() {
  return _mm512_broadcast_i32x4(_mm_xor_si128(load128(kIQ4NLValues), _mm_set1_epi8(static_cast<char>(0x80))));
}

template <class F>
struct Pair32 {
  static constexpr int kRows = 4;
  using Block = typename F::Block;
  using Act = typename F::Act;
  static constexpr int kBlockBytes = static_cast<int>(sizeof(Block));

  // The block's f16 d, with its f16 m (Q8_1: s) in the high half where the
  // format has one, else 0.
  static uint32_t wbits(const Block& b) {
    if constexpr (F::kMin) return load_u32(&b.d);
    else return b.d;
  }
  static uint32_t abits(const Act& a) {
    if constexpr (F::kMin) return load_u32(&a.d);
    else return a.d;
  }
  // [d0, m0, d1, m1] as floats from two blocks' bits.
  static __m128 pair_scales(uint32_t b0, uint32_t b1) {
    return _mm_cvtph_ps(_mm_set_epi32(0, 0, static_cast<int>(b1), static_cast<int>(b0)));
  }

  // The unsigned codes of blocks W[0], W[1] in the pair layout.
  static __m512i pair_codes(const Block* W, __m512i table) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m256i q01 = _mm256_set_m128i(load128(W[1].qs), load128(W[0].qs));
    __m512i u = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q01), _mm256_srli_epi16(q01, 4), 1), m4);
    if constexpr (F::kTable) u = _mm512_shuffle_epi8(table, u);
    if constexpr (F::kFifth) {
      // bit j of qh is element j: elements 0-15 sit in bytes 0-15 (block 0)
      // and 16-31 (block 1), elements 16-31 in bytes 32-47 and 48-63.
      const uint64_t h0 = load_u32(W[0].qh), h1 = load_u32(W[1].qh);
      const uint64_t bits = (h0 & 0xFFFF) | (h1 & 0xFFFF) << 16 | (h0 >> 16) << 32 | (h1 >> 16) << 48;
      u = _mm512_mask_add_epi8(u, _cvtu64_mask64(bits), u, _mm512_set1_epi8(0x10));
    }
    return u;
  }

  // One block in 256 bits (the odd last block of a row).
  static __m256i codes(const Block& b, __m512i table) {
    __m256i u = unpack_nibbles_32(b.qs);
    if constexpr (F::kTable) u = _mm256_shuffle_epi8(_mm512_castsi512_si256(table), u);
    if constexpr (F::kFifth) u = _mm256_mask_add_epi8(u, static_cast<__mmask32>(load_u32(b.qh)), u, _mm256_set1_epi8(0x10));
    return u;
  }

  static float lane(__m128 v, int k) {
    alignas(16) float f[4];
    _mm_store_ps(f, v);
    return f[k];
  }

  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK;
    const auto* a = static_cast<const Act*>(act);
    const __m512i table = F::kTable ? iq4nl_table_u8() : _mm512_setzero_si512();
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(F::kOffset));
    // int32 lanes 0-3 and 8-11 belong to block 0 (scale lane 0), 4-7 and 12-15 to block 1 (lane 2).
    const __m512i sidx = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2);
    __m512 acc[R];
    __m128 accm[R];  // lanes 1 and 3: m * s of the blocks
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
      const __m512i t = join256(a[i].qs, a[i + 1].qs);
      const __m512i av = _mm512_shuffle_i64x2(t, t, 0xD8);
      __m512i base = _mm512_setzero_si512();
      if constexpr (F::kOffset != 0)
        base = _mm512_sub_epi32(base, _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, av));
      const __m128 da = pair_scales(abits(a[i]), abits(a[i + 1]));
      for (int r = 0; r < R; ++r) {
        const Block* W = reinterpret_cast<const Block*>(w + r * stride) + i;
        const __m512i s = _mm512_dpbusd_epi32(base, pair_codes(W, table), av);
        const __m128 dd = _mm_mul_ps(pair_scales(wbits(W[0]), wbits(W[1])), da);  // [d0 da0, m0 s0, d1 da1, m1 s1]
        acc[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(sidx, _mm512_castps128_ps512(dd)), _mm512_cvtepi32_ps(s), acc[r]);
        if constexpr (F::kMin) accm[r] = _mm_add_ps(accm[r], dd);
      }
    }
    float tail[R];
    for (int r = 0; r < R; ++r) tail[r] = 0.f;
    if (i < nb) {  // the odd last block
      const __m256i av = load256(a[i].qs);
      __m256i base = _mm256_setzero_si256();
      if constexpr (F::kOffset != 0)
        base = _mm256_sub_epi32(base, _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(offset), av));
      const __m128 da = pair_scales(abits(a[i]), 0);
      for (int r = 0; r < R; ++r) {
        const Block& W = reinterpret_cast<const Block*>(w + r * stride)[i];
        const __m256i s = _mm256_dpbusd_epi32(base, codes(W, table), av);
        const __m128 dd = _mm_mul_ps(pair_scales(wbits(W), 0), da);  // [d da, m s, 0, 0]
        tail[r] = _mm_cvtss_f32(dd) * hsum(_mm256_cvtepi32_ps(s));
        if constexpr (F::kMin) tail[r] += lane(dd, 1);
      }
    }
    for (int r = 0; r < R; ++r) {
      float v = hsum(acc[r]) + tail[r];
      if constexpr (F::kMin) v += lane(accm[r], 1) + lane(accm[r], 3);
      out[r] = v;
    }
  }
};

// ---------------------------------------------------------------- Q2_K / Q3_K
// vpermd indices for plane j: the four sub-blocks of 16 in its zmm, 2j and
// 2j+1 (elements 32j..32j+31) then 8+2j and 9+2j (128+32j..).
inline __m512i idx_plane(int j) {
  const int a = 2 * j, b = 2 * j + 1, c = 8 + 2 * j, d = 9 + 2 * j;
  return _mm512_setr_epi32(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d);
}

// The activations of plane j: [a(32j..32j+31), a(128+32j..128+32j+31)].
struct PlaneAct {
  __m512i av[4];
  __m256i bsums;
  explicit PlaneAct(const BlockQ8_K& A) {
    for (int j = 0; j < 4; ++j) av[j] = join256(A.qs + 32 * j, A.qs + 128 + 32 * j);
    bsums = load256(A.bsums);
  }
};

// Q2_K: x = d * sc * q - dmin * m per sub-block of 16; the min term goes
// through the activations' bsums in a second float accumulator.
struct Q2K {
  static constexpr int kRows = 4;
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK_K;
    const auto* a = static_cast<const BlockQ8_K*>(act);
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m512 acc[R];
    __m256 accm[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const PlaneAct P(a[i]);
      for (int r = 0; r < R; ++r) {
        const BlockQ2_K& W = reinterpret_cast<const BlockQ2_K*>(w + r * stride)[i];
        const __m128i sc8 = load128(W.scales);
        const __m512i sc32 = _mm512_cvtepu8_epi32(_mm_and_si128(sc8, m4));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        const __m256i msum = _mm256_madd_epi16(mins, P.bsums);
        const __m512i v = load512(W.qs);
        __m512i sum = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) {
          const __m512i q = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), m3);
          const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, P.av[j]);
          sum = _mm512_dpwssd_epi32(sum, d, _mm512_permutexvar_epi32(idx_plane(j), sc32));
        }
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(f16(W.d) * a[i].d), _mm512_cvtepi32_ps(sum), acc[r]);
        accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(f16(W.dmin) * a[i].d), _mm256_cvtepi32_ps(msum), accm[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) - hsum(accm[r]);
  }
};

// Q3_K: u = low 2 bits | high bit << 2 (0..7), level u - 4; 16 signed 6-bit
// scales. The -4 offset is 4 * sum_i sc_i * bsum_i.
struct Q3K {
  using Block = BlockQ3_K;
  using Prep = PlaneAct;
  // The 16 scales as int16 (value i = (low nibble | 2 high bits << 4) - 32):
  // the low nibble of i is in byte i % 8 (high half for i >= 8), its top bits
  // at bit 2(i/4) of byte 8 + i % 4.
  static __m256i scales(const uint8_t* s) {
    const __m128i a = _mm_cvtsi64_si128(static_cast<long long>(load_u64(s)));
    const __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(a, _mm_srli_epi16(a, 4)), _mm_set1_epi8(0x0F));
    const uint32_t b = load_u32(s + 8);
    const __m128i hi = _mm_and_si128(_mm_set_epi32(static_cast<int>(b >> 6), static_cast<int>(b >> 4),
                                                   static_cast<int>(b >> 2), static_cast<int>(b)),
                                     _mm_set1_epi8(3));
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32)));
  }
  // High-bit selectors of plane j: bit j of hmask[l] for the first half, bit 4+j for the second.
  static __m512i hsel(int j) {
    return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << j)),
                              _mm256_set1_epi8(static_cast<char>(1 << (4 + j))), 1);
  }
  static float scale(const Block& W) { return f16(W.d); }
  static __m512i dot(const Block& W, const Prep& P) {
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    const __m256i sc16 = scales(W.scales);
    const __m512i sc32 = _mm512_cvtepu16_epi32(sc16);  // the int16 in each lane's low half, 0 above
    const __m256i offs = _mm256_madd_epi16(sc16, P.bsums);
    const __m512i hm = bcast256(W.hmask);
    const __m512i v = load512(W.qs);
    __m512i sum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(_mm256_slli_epi32(offs, 2)));
    for (int j = 0; j < 4; ++j) {
      const __m512i low = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), m3);
      const __m512i u = _mm512_mask_add_epi8(low, _mm512_test_epi8_mask(hm, hsel(j)), low, four);
      const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, P.av[j]);
      sum = _mm512_dpwssd_epi32(sum, d, _mm512_permutexvar_epi32(idx_plane(j), sc32));
    }
    return sum;
  }
};

}  // namespace

#define MS_ROWS(fn, Kernel)                                                                                \
  void fn(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {                 \
    for_row_groups<Kernel>(n, w, s, rows, a, out);                                                        \
  }

MS_ROWS(vec_dot_rows_q4_1_avx512, Pair32<FmtQ41>)
MS_ROWS(vec_dot_rows_q5_0_avx512, Pair32<FmtQ50>)
MS_ROWS(vec_dot_rows_q5_1_avx512, Pair32<FmtQ51>)
MS_ROWS(vec_dot_rows_iq4_nl_avx512, Pair32<FmtIQ4NL>)
MS_ROWS(vec_dot_rows_q2_K_avx512, Q2K)
MS_ROWS(vec_dot_rows_q3_K_avx512, SuperRows<Q3K>)

#undef MS_ROWS

}  // namespace ms::simd
