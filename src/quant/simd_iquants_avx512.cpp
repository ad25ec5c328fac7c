// AVX-512 (F/BW/VL/DQ + VNNI, BMI2) row-dot kernels of IQ4_XS, the ternary
// TQ1_0/TQ2_0 and the grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S and IQ1_M, against Q8_K activations. Each super-block goes 64
// elements (two sub-blocks of 32) per zmm:
//
// - Grid formats: the 8 (or 16) grid entries of a sub-block pair come in by
//   one vpgatherdq (vpgatherdd) from the tables of iq_grids.h instead of 8
//   scalar loads and inserts; their signs are one 64-bit mask (a bit per
//   element, the 8 sign bytes in a row) that negates the activations by a
//   masked subtract. The 7-bit sign indices of IQ2_XXS/IQ2_XS/IQ3_XXS become
//   sign bytes by pdep and a parity fold (bit 7 makes the count even, as
//   kIQ2Signs). vpdpbusd (unsigned magnitudes x signed activations) then
//   vpdpwssd by the int16 scales (each lane's sum of 4 products fits int16).
// - IQ1_S/IQ1_M levels 8*g + delta (g in -1..1, delta +-1) are made unsigned
//   as 8*(g+1) + (delta+1) in 0..18, and 9 * the scaled bsums subtracted.
// - IQ4_XS: levels + 128 by pshufb, offset 128 * sum(a) from the bsums; the
//   lane sums exceed int16, so the sub-block scales multiply int32 lanes.
// - TQ2_0 as Q2_K's planes without scales; TQ1_0's base-3 digits come from
//   16-bit multiplies (b << 8 times 3^k keeps the low byte of b * 3^k in the
//   high byte; mulhi by 3 is then the digit) and are dotted in int16 with
//   vpdpwssd.
//
// The sign tricks need activations in [-127, 127] (what quantize_row_act
// makes; see simd_kernels.h). Integer sums are exact; only float scaling and
// summation order differ from the reference (ref_iquants.cpp). Built with the
// AVX-512 flags: see the note in simd_kernels.h about what this file may include.
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

// Eight sign bytes from eight 7-bit sign indices (index g at bits 7g..7g+6
// of `fields`): byte g = index g plus bit 7 when its popcount is odd.
inline uint64_t sign_bytes(uint64_t fields) {
  const uint64_t s = _pdep_u64(fields, 0x7F7F7F7F7F7F7F7Full);
  uint64_t p = s ^ (s >> 4);  // bit 0 of each byte ends up as the byte's parity
  p ^= p >> 2;
  p ^= p >> 1;
  return s | ((p & 0x0101010101010101ull) << 7);
}
// The four 7-bit indices in bits 0..27 of two u32 words (IQ2_XXS, IQ3_XXS).
inline uint64_t sign_bytes_2w(uint32_t w0, uint32_t w1) {
  return sign_bytes((w0 & 0x0FFFFFFFu) | static_cast<uint64_t>(w1 & 0x0FFFFFFFu) << 28);
}

// a negated where the element's bit of `signs` is set.
inline __m512i apply_signs(__m512i a, uint64_t signs) {
  return _mm512_mask_sub_epi8(a, _cvtu64_mask64(signs), _mm512_setzero_si512(), a);
}

inline __m512i dpbusd0(__m512i u, __m512i a) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, a); }

// Activations as stored, 64 per zmm, and the 16 bsums.
struct RawAct {
  __m512i av[4];
  __m256i bsums;
  explicit RawAct(const BlockQ8_K& A) {
    for (int p = 0; p < 4; ++p) av[p] = load512(A.qs + 64 * p);
    bsums = load256(A.bsums);
  }
};

// 8 int32 grid indices (a ymm) -> the 8 grid entries of 8 bytes.
inline __m512i gather8(__m256i idx, const uint64_t* grid) {
  return _mm512_i32gather_epi64(idx, static_cast<const void*>(grid), 8);
}

// The 16 nibble scales 2 * nib + 1 of IQ2_XS/IQ2_S as int32, in element
// order (sub-block ib: low nibble for its first 16 elements, high for the rest).
inline __m512i iq2_nibble_scales(const uint8_t* scales) {
  const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i il = _mm_unpacklo_epi8(_mm_and_si128(x, m4), _mm_and_si128(_mm_srli_epi16(x, 4), m4));
  return _mm512_cvtepu8_epi32(_mm_add_epi8(_mm_add_epi8(il, il), _mm_set1_epi8(1)));
}

// ---------------------------------------------------------------- IQ2_XXS
struct IQ2XXS {
  using Block = BlockIQ2_XXS;
  using Prep = RawAct;
  static float scale(const Block& W) { return f16(W.d) * 0.125f; }
  static __m512i dot(const Block& W, const Prep& P) {
    // Sub-block ib: u32 a = 4 grid indices, u32 b = 4 sign indices + scale << 28.
    const __m512i q = load512(W.qs);
    const __m256i aw = _mm512_cvtepi64_epi32(q);
    const __m256i bw = _mm512_cvtepi64_epi32(_mm512_srli_epi64(q, 32));
    const __m256i s8 = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(bw, 28), 1), _mm256_set1_epi32(1));
    const __m512i sc = _mm512_zextsi256_si512(s8);
    const __m512i idx01 = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(aw));
    const __m512i idx23 = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(aw, 1));
    const __m256i idx[4] = {_mm512_castsi512_si256(idx01), _mm512_extracti64x4_epi64(idx01, 1),
                            _mm512_castsi512_si256(idx23), _mm512_extracti64x4_epi64(idx23, 1)};
    const auto* words = reinterpret_cast<const uint8_t*>(W.qs);
    __m512i sum = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      const __m512i g = gather8(idx[p], kIQ2XXSGrid);
      const uint64_t signs = sign_bytes_2w(load_u32(words + 16 * p + 4), load_u32(words + 16 * p + 12));
      const __m512i d = dpbusd0(g, apply_signs(P.av[p], signs));
      sum = _mm512_dpwssd_epi32(sum, d, _mm512_permutexvar_epi32(idx_half8(p), sc));
    }
    return sum;
  }
};

// ---------------------------------------------------------------- IQ2_XS
struct IQ2XS {
  using Block = BlockIQ2_XS;
  using Prep = RawAct;
  static float scale(const Block& W) { return f16(W.d) * 0.125f; }
  static __m512i dot(const Block& W, const Prep& P) {
    const __m512i sc = iq2_nibble_scales(W.scales);
    __m512i sum = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      // 8 u16: 9-bit grid index | 7-bit sign index << 9.
      const uint16_t* g16 = W.qs + 8 * p;
      const __m256i idx = _mm256_and_si256(_mm256_cvtepu16_epi32(load128(g16)), _mm256_set1_epi32(511));
      const __m512i g = gather8(idx, kIQ2XSGrid);
      const uint64_t fields = _pext_u64(load_u64(g16), 0xFE00FE00FE00FE00ull) |
                              _pext_u64(load_u64(g16 + 4), 0xFE00FE00FE00FE00ull) << 28;
      const __m512i d = dpbusd0(g, apply_signs(P.av[p], sign_bytes(fields)));
      sum = _mm512_dpwssd_epi32(sum, d, _mm512_permutexvar_epi32(idx_quad4(p), sc));
    }
    return sum;
  }
};

// ---------------------------------------------------------------- IQ2_S
struct IQ2S {
  using Block = BlockIQ2_S;
  using Prep = RawAct;
  static float scale(const Block& W) { return f16(W.d) * 0.125f; }
  static __m512i dot(const Block& W, const Prep& P) {
    const __m512i sc = iq2_nibble_scales(W.scales);
    const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    __m512i sum = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      // Group g of the pair: index qs[8p + g] | 2 bits of qh[2p + g/4] at 2(g%4), << 8.
      const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(W.qs + 8 * p)));
      const int t = W.qh[2 * p] | W.qh[2 * p + 1] << 8;
      const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(t), shifts),
                                                            _mm256_set1_epi32(3)), 8);
      const __m512i g = gather8(_mm256_or_si256(lo, hi), kIQ2SGrid);
      const __m512i d = dpbusd0(g, apply_signs(P.av[p], load_u64(W.qs + 32 + 8 * p)));
      sum = _mm512_dpwssd_epi32(sum, d, _mm512_permutexvar_epi32(idx_quad4(p), sc));
    }
    return sum;
  }
};

// ---------------------------------------------------------------- IQ3_XXS
struct IQ3XXS {
  using Block = BlockIQ3_XXS;
  using Prep = RawAct;
  static float scale(const Block& W) { return f16(W.d) * 0.25f; }
  static __m512i dot(const Block& W, const Prep& P) {
    // After the 64 grid indices: per sub-block a u32 of 4 sign indices + scale << 28.
    const __m256i ww = load256(W.qs + 64);
    const __m256i s8 = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(ww, 28), 1), _mm256_set1_epi32(1));
    const __m512i sc = _mm512_zextsi256_si512(s8);
    __m512i sum = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      const __m512i idx = _mm512_cvtepu8_epi32(load128(W.qs + 16 * p));
      const __m512i g = _mm512_i32gather_epi32(idx, static_cast<const void*>(kIQ3XXSGrid), 4);
      const uint64_t signs = sign_bytes_2w(load_u32(W.qs + 64 + 8 * p), load_u32(W.qs + 68 + 8 * p));
      const __m512i d = dpbusd0(g, apply_signs(P.av[p], signs));  // lanes <= 4 * 62 * 127
      sum = _mm512_dpwssd_epi32(sum, d, _mm512_permutexvar_epi32(idx_half8(p), sc));
    }
    return sum;
  }
};

// ---------------------------------------------------------------- IQ3_S
struct IQ3S {
  using Block = BlockIQ3_S;
  using Prep = RawAct;
  static float scale(const Block& W) { return f16(W.d); }
  static __m512i dot(const Block& W, const Prep& P) {
    __m512i sum = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      // Grid index k = 16p + lane: qs[k], 9th bit = bit lane of qh[2p] | qh[2p+1] << 8.
      const __m512i lo = _mm512_cvtepu8_epi32(load128(W.qs + 16 * p));
      const auto hbits = static_cast<__mmask16>(W.qh[2 * p] | W.qh[2 * p + 1] << 8);
      const __m512i idx = _mm512_mask_or_epi32(lo, hbits, lo, _mm512_set1_epi32(0x100));
      const __m512i g = _mm512_i32gather_epi32(idx, static_cast<const void*>(kIQ3SGrid), 4);
      const __m512i d = dpbusd0(g, apply_signs(P.av[p], load_u64(W.signs + 8 * p)));
      const int b = W.scales[p];  // sub-block 2p: low nibble, 2p+1: high
      const __m512i sc = _mm512_mask_blend_epi32(static_cast<__mmask16>(0xFF00), _mm512_set1_epi32(2 * (b & 15) + 1),
                                                 _mm512_set1_epi32(2 * (b >> 4) + 1));
      sum = _mm512_dpwssd_epi32(sum, d, sc);
    }
    return sum;
  }
};

// ---------------------------------------------------------------- IQ1_S / IQ1_M
// Unsigned codes 8*(g+1) + (delta+1) of 8 grid entries g (int8 -1/0/+1),
// delta = +1 for the groups whose bit of `pos` is set, else -1.
inline __m512i iq1_codes(__m256i idx, __mmask8 pos) {
  const __m512i g1 = _mm512_add_epi8(gather8(idx, kIQ1SGrid), _mm512_set1_epi8(1));  // 0..2
  // 16-bit shift of bytes <= 2: nothing crosses into the neighbour byte.
  return _mm512_add_epi8(_mm512_slli_epi16(g1, 3), _mm512_maskz_mov_epi64(pos, _mm512_set1_epi8(2)));
}

struct IQ1S {
  using Block = BlockIQ1_S;
  using Prep = RawAct;
  static float scale(const Block& W) { return f16(W.d) * 0.125f; }
  static __m512i dot(const Block& W, const Prep& P) {
    const __m128i qh = load128(W.qh);  // per sub-block: 4 x 3 index bits, scale << 12, delta sign << 15
    const __m128i s16 = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1),
                                     _mm_set1_epi16(1));
    // 9 * sum over the 16-element halves of scale * bsum: the code offset.
    const __m256i s_halves = _mm256_set_m128i(_mm_unpackhi_epi16(s16, s16), _mm_unpacklo_epi16(s16, s16));
    const __m256i offs = _mm256_mullo_epi32(_mm256_madd_epi16(s_halves, P.bsums), _mm256_set1_epi32(9));
    const __m512i sc = _mm512_zextsi256_si512(_mm256_cvtepu16_epi32(s16));
    const __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 16, 19, 22, 25);
    __m512i sum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(offs));
    for (int p = 0; p < 4; ++p) {
      const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(W.qs + 8 * p)));
      const uint32_t t = W.qh[2 * p] | static_cast<uint32_t>(W.qh[2 * p + 1]) << 16;
      const __m256i hi = _mm256_slli_epi32(
          _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(t)), shifts), _mm256_set1_epi32(7)), 8);
      const int pos = ((t >> 15) & 1 ? 0 : 0x0F) | ((t >> 31) & 1 ? 0 : 0xF0);
      const __m512i u = iq1_codes(_mm256_or_si256(lo, hi), static_cast<__mmask8>(pos));
      sum = _mm512_dpwssd_epi32(sum, dpbusd0(u, P.av[p]), _mm512_permutexvar_epi32(idx_half8(p), sc));
    }
    return sum;
  }
};

struct IQ1M {
  using Block = BlockIQ1_M;
  using Prep = RawAct;
  static float scale(const Block& W) {
    uint16_t sc[4];
    std::memcpy(sc, W.scales, 8);
    return f16(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                     (sc[3] & 0xf000))) * 0.125f;
  }
  static __m512i dot(const Block& W, const Prep& P) {
    // Scale of the 16-element half r (= 2 ib + h): 3 bits of word r/4 at 3 * (r % 4), as 2s + 1.
    const __m128i words = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(W.scales)));
    const __m512i wr = _mm512_permutexvar_epi32(idx_quad4(0), _mm512_castsi128_si512(words));
    const __m512i s3 = _mm512_and_si512(
        _mm512_srlv_epi32(wr, _mm512_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9)), _mm512_set1_epi32(7));
    const __m512i sc = _mm512_or_si512(_mm512_slli_epi32(s3, 1), _mm512_set1_epi32(1));
    const __m256i offs = _mm256_mullo_epi32(_mm256_madd_epi16(_mm512_cvtepi32_epi16(sc), P.bsums), _mm256_set1_epi32(9));
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    __m512i sum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(offs));
    for (int p = 0; p < 4; ++p) {
      // Group g of the pair: nibble g of the u32 at qh + 4p; its low 3 bits
      // are the index's bits 8..10, bit 3 a negative delta.
      const uint32_t nib = load_u32(W.qh + 4 * p);
      const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(W.qs + 8 * p)));
      const __m256i hi = _mm256_slli_epi32(
          _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(nib)), shifts), _mm256_set1_epi32(7)), 8);
      const auto pos = static_cast<__mmask8>(~_pext_u32(nib, 0x88888888u));
      const __m512i u = iq1_codes(_mm256_or_si256(lo, hi), pos);
      sum = _mm512_dpwssd_epi32(sum, dpbusd0(u, P.av[p]), _mm512_permutexvar_epi32(idx_quad4(p), sc));
    }
    return sum;
  }
};

// ---------------------------------------------------------------- IQ4_XS
struct IQ4XS {
  using Block = BlockIQ4_XS;
  struct Prep {
    __m512i av[4];  // sub-blocks 2p, 2p+1 in the nibble layout: [2p 0..15, 2p+1 0..15, 2p 16..31, 2p+1 16..31]
    __m256i asum;   // activation sum of each sub-block
    explicit Prep(const BlockQ8_K& A) {
      for (int p = 0; p < 4; ++p) {
        const __m512i x = load512(A.qs + 64 * p);
        av[p] = _mm512_shuffle_i64x2(x, x, 0xD8);
      }
      asum = _mm256_madd_epi16(load256(A.bsums), _mm256_set1_epi16(1));
    }
  };
  static float scale(const Block& W) { return f16(W.d); }
  static __m512i dot(const Block& W, const Prep& P) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_xor_si128(load128(kIQ4NLValues), _mm_set1_epi8(static_cast<char>(0x80))));  // levels + 128
    // 6-bit scales: nibble ib of scales_l (as a u32), 2 bits ib of scales_h above it; minus 32.
    const __m256i sl = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(load_u32(W.scales_l))),
                                         _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256i sh = _mm256_srlv_epi32(_mm256_set1_epi32(W.scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    const __m256i ls = _mm256_sub_epi32(
        _mm256_or_si256(_mm256_and_si256(sl, _mm256_set1_epi32(15)), _mm256_slli_epi32(_mm256_and_si256(sh, _mm256_set1_epi32(3)), 4)),
        _mm256_set1_epi32(32));
    const __m512i ls512 = _mm512_zextsi256_si512(ls);
    // sum of ls * (code . a) less 128 * sum of ls * (sub-block sum of a).
    __m512i sum = _mm512_sub_epi32(_mm512_setzero_si512(),
                                   _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_mullo_epi32(ls, P.asum), 7)));
    for (int p = 0; p < 4; ++p) {
      const __m256i q = load256(W.qs + 32 * p);
      const __m512i nib = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
      const __m512i d = dpbusd0(_mm512_shuffle_epi8(table, nib), P.av[p]);
      const __m512i s = _mm512_permutexvar_epi32(
          _mm512_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p, 2 * p, 2 * p,
                            2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1),
          ls512);
      sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(d, s));
    }
    return sum;
  }
};

// ---------------------------------------------------------------- TQ2_0 / TQ1_0
// Sum of a Q8_K block's 256 activations, from its 16 partial sums.
inline int32_t q8k_sum(const __m256i bsums) {
  const __m256i s = _mm256_madd_epi16(bsums, _mm256_set1_epi16(1));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  return _mm_cvtsi128_si32(t);
}

// TQ2_0: element 128h + 32l + m is bits 2l of qs[32h + m]: plane l of the
// 64 qs bytes is [a(32l..), a(128+32l..)]. Level t - 1.
struct TQ20 {
  using Block = BlockTQ2_0;
  struct Prep {
    __m512i av[4];
    __m512i neg_sum;  // -sum(a) in lane 0
    explicit Prep(const BlockQ8_K& A) {
      for (int l = 0; l < 4; ++l) av[l] = join256(A.qs + 32 * l, A.qs + 128 + 32 * l);
      neg_sum = _mm512_zextsi128_si512(_mm_cvtsi32_si128(-q8k_sum(load256(A.bsums))));
    }
  };
  static float scale(const Block& W) { return f16(W.d); }
  static __m512i dot(const Block& W, const Prep& P) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i v = load512(W.qs);
    __m512i sum = P.neg_sum;
    for (int l = 0; l < 4; ++l)
      sum = _mm512_dpbusd_epi32(sum, _mm512_and_si512(_mm512_srli_epi16(v, 2 * l), m3), P.av[l]);
    return sum;
  }
};

// TQ1_0: qs[0..31] digit k -> elements 32k..32k+31; qs[32..47] digit k ->
// 160+16k..; qh[0..3] digit k (k < 4) -> 240+4k... The second group of bytes
// (qs[32..47], qh, 12 zero bytes) gives per digit k 16 + 4 elements whose
// activations are gathered once per block into c16[k] (zeros elsewhere).
struct TQ10 {
  using Block = BlockTQ1_0;
  struct Prep {
    __m512i a16[5], c16[5];  // activations as int16
    __m512i neg_sum;
    explicit Prep(const BlockQ8_K& A) {
      for (int k = 0; k < 5; ++k) {
        a16[k] = _mm512_cvtepi8_epi16(load256(A.qs + 32 * k));
        const __m128i tail = k < 4 ? _mm_cvtsi32_si128(static_cast<int>(load_u32(A.qs + 240 + 4 * k))) : _mm_setzero_si128();
        c16[k] = _mm512_cvtepi8_epi16(_mm256_set_m128i(tail, load128(A.qs + 160 + 16 * k)));
      }
      neg_sum = _mm512_zextsi128_si512(_mm_cvtsi32_si128(-q8k_sum(load256(A.bsums))));
    }
  };
  static float scale(const Block& W) { return f16(W.d); }
  // Digit k of each byte b held as b << 8 in a u16 lane: ((uint8_t)(b * 3^k) * 3) >> 8.
  static __m512i digit(__m512i b_hi, int pow3) {
    const __m512i x = pow3 == 1 ? b_hi : _mm512_mullo_epi16(b_hi, _mm512_set1_epi16(static_cast<int16_t>(pow3)));
    return _mm512_mulhi_epu16(x, _mm512_set1_epi16(3));
  }
  static __m512i dot(const Block& W, const Prep& P) {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    const __m512i b1 = _mm512_slli_epi16(_mm512_cvtepu8_epi16(load256(W.qs)), 8);
    // qs[32..47] and qh[0..3] (20 bytes; a masked load reads nothing past them).
    const __m512i b2 = _mm512_slli_epi16(_mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(0x000FFFFFu, W.qs + 32)), 8);
    __m512i sum = P.neg_sum;
    for (int k = 0; k < 5; ++k) {
      sum = _mm512_dpwssd_epi32(sum, digit(b1, kPow3[k]), P.a16[k]);
      sum = _mm512_dpwssd_epi32(sum, digit(b2, kPow3[k]), P.c16[k]);
    }
    return sum;
  }
};

}  // namespace

#define MS_ROWS(fn, Fmt)                                                                                   \
  void fn(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {                 \
    for_row_groups<SuperRows<Fmt>>(n, w, s, rows, a, out);                                                \
  }

MS_ROWS(vec_dot_rows_iq2_xxs_avx512, IQ2XXS)
MS_ROWS(vec_dot_rows_iq2_xs_avx512, IQ2XS)
MS_ROWS(vec_dot_rows_iq2_s_avx512, IQ2S)
MS_ROWS(vec_dot_rows_iq3_xxs_avx512, IQ3XXS)
MS_ROWS(vec_dot_rows_iq3_s_avx512, IQ3S)
MS_ROWS(vec_dot_rows_iq1_s_avx512, IQ1S)
MS_ROWS(vec_dot_rows_iq1_m_avx512, IQ1M)
MS_ROWS(vec_dot_rows_iq4_xs_avx512, IQ4XS)
MS_ROWS(vec_dot_rows_tq1_0_avx512, TQ10)
MS_ROWS(vec_dot_rows_tq2_0_avx512, TQ20)

#undef MS_ROWS

}  // namespace ms::simd
