// AVX2 row-dot kernels of the ternary and IQ formats against Q8_K
// activations (Q8_0 for IQ4_NL). Each super-block is rebuilt 32 elements at
// a time as bytes -- grid magnitudes looked up by index, non-linear levels by
// pshufb, trits by fixed-point multiplies -- and dotted with the activations
// by maddubs (u8 x s8 -> s16 pairs) and madd (x the sub-block's integer
// scale -> s32). The integer sums are exact, as the reference's
// (ref_iquants.cpp); only the final float scaling and summation order differ.
//
// Sign bits are applied to the activations, not the weights (sign_epi8), so
// these kernels need activations in [-127, 127] (what quantize_row_act makes).
//
// Built with -mavx2 -mfma -mf16c: see the note in simd_kernels.h (iq_grids.h
// holds only extern tables and constants).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/simd_avx2_util.h"
#include "quant/simd_kernels.h"
#include "quant/simd_row_groups.h"

namespace ms::simd {
namespace {

// 0xFF in byte 8g+j where bit j of byte g of `bits` is set, else 0.
inline __m256i bits_to_mask(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// a with its byte 8g+j negated where that bit of `bits` is set.
inline __m256i apply_signs(__m256i a, uint32_t bits) {
  return _mm256_sign_epi8(a, _mm256_or_si256(bits_to_mask(bits), _mm256_set1_epi8(1)));
}

// Four sign bytes from four 7-bit sign indices (bit 7 restores even parity).
inline uint32_t signs_from_indices(uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  return kIQ2Signs[i0] | static_cast<uint32_t>(kIQ2Signs[i1]) << 8 | static_cast<uint32_t>(kIQ2Signs[i2]) << 16 |
         static_cast<uint32_t>(kIQ2Signs[i3]) << 24;
}

// Unsigned bytes u times signed bytes a, pairs weighted by the int16 lanes of
// scale: 8 int32 lanes.
inline __m256i dot_u8(__m256i u, __m256i a, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), scale);
}
// Signed bytes q (|q| <= 127) times signed a (|a| <= 127).
inline __m256i dot_s8(__m256i q, __m256i a, __m256i scale) {
  return dot_u8(_mm256_abs_epi8(q), _mm256_sign_epi8(a, q), scale);
}

inline __m256i iq4_levels(__m256i nibbles) {
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIQ4NLValues));
  return _mm256_shuffle_epi8(table, nibbles);
}

// Sum of a Q8_K block's 256 activations, from its 16 partial sums.
inline int32_t q8k_sum(const BlockQ8_K& a) {
  const __m256i s = _mm256_madd_epi16(load256(a.bsums), _mm256_set1_epi16(1));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  return _mm_cvtsi128_si32(t);
}

// ---------------------------------------------------------------- IQ2_XXS
struct IQ2XXS {
  using Weight = BlockIQ2_XXS;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t idx = load_u32(&w.qs[4 * ib]);
      const uint32_t aux = load_u32(&w.qs[4 * ib + 2]);
      const __m256i q = _mm256_set_epi64x(static_cast<int64_t>(kIQ2XXSGrid[idx >> 24]),
                                          static_cast<int64_t>(kIQ2XXSGrid[(idx >> 16) & 255]),
                                          static_cast<int64_t>(kIQ2XXSGrid[(idx >> 8) & 255]),
                                          static_cast<int64_t>(kIQ2XXSGrid[idx & 255]));
      const uint32_t signs = signs_from_indices(aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
      const __m256i av = apply_signs(load256(a.qs + 32 * ib), signs);
      sum = _mm256_add_epi32(sum, dot_u8(q, av, _mm256_set1_epi16(static_cast<int16_t>(2 * (aux >> 28) + 1))));
    }
    return scaled(f16(w.d) * a.d * 0.125f, sum);
  }
};

// ---------------------------------------------------------------- IQ2_XS
struct IQ2XS {
  using Weight = BlockIQ2_XS;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      uint64_t g;  // the 4 groups' u16 (9-bit grid index | 7-bit sign index << 9)
      std::memcpy(&g, w.qs + 4 * ib, 8);
      const __m256i q = _mm256_set_epi64x(static_cast<int64_t>(kIQ2XSGrid[(g >> 48) & 511]),
                                          static_cast<int64_t>(kIQ2XSGrid[(g >> 32) & 511]),
                                          static_cast<int64_t>(kIQ2XSGrid[(g >> 16) & 511]),
                                          static_cast<int64_t>(kIQ2XSGrid[g & 511]));
      const uint32_t signs = signs_from_indices((g >> 9) & 127, (g >> 25) & 127, (g >> 41) & 127, g >> 57);
      const __m256i av = apply_signs(load256(a.qs + 32 * ib), signs);
      const int sc = w.scales[ib];
      sum = _mm256_add_epi32(sum, dot_u8(q, av, scale_pair(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1)));
    }
    return scaled(f16(w.d) * a.d * 0.125f, sum);
  }
};

// ---------------------------------------------------------------- IQ2_S
struct IQ2S {
  using Weight = BlockIQ2_S;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = w.qs + 4 * ib;
      const int qh = w.qh[ib];
      const __m256i q = _mm256_set_epi64x(static_cast<int64_t>(kIQ2SGrid[qs[3] | ((qh << 2) & 0x300)]),
                                          static_cast<int64_t>(kIQ2SGrid[qs[2] | ((qh << 4) & 0x300)]),
                                          static_cast<int64_t>(kIQ2SGrid[qs[1] | ((qh << 6) & 0x300)]),
                                          static_cast<int64_t>(kIQ2SGrid[qs[0] | ((qh << 8) & 0x300)]));
      const __m256i av = apply_signs(load256(a.qs + 32 * ib), load_u32(w.qs + 32 + 4 * ib));
      const int sc = w.scales[ib];
      sum = _mm256_add_epi32(sum, dot_u8(q, av, scale_pair(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1)));
    }
    return scaled(f16(w.d) * a.d * 0.125f, sum);
  }
};

// ---------------------------------------------------------------- IQ3_XXS
struct IQ3XXS {
  using Weight = BlockIQ3_XXS;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* g = w.qs + 8 * ib;
      const __m256i q = _mm256_set_epi32(
          static_cast<int>(kIQ3XXSGrid[g[7]]), static_cast<int>(kIQ3XXSGrid[g[6]]),
          static_cast<int>(kIQ3XXSGrid[g[5]]), static_cast<int>(kIQ3XXSGrid[g[4]]),
          static_cast<int>(kIQ3XXSGrid[g[3]]), static_cast<int>(kIQ3XXSGrid[g[2]]),
          static_cast<int>(kIQ3XXSGrid[g[1]]), static_cast<int>(kIQ3XXSGrid[g[0]]));
      const uint32_t aux = load_u32(w.qs + 64 + 4 * ib);
      const uint32_t signs = signs_from_indices(aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
      const __m256i av = apply_signs(load256(a.qs + 32 * ib), signs);
      sum = _mm256_add_epi32(sum, dot_u8(q, av, _mm256_set1_epi16(static_cast<int16_t>(2 * (aux >> 28) + 1))));
    }
    return scaled(f16(w.d) * a.d * 0.25f, sum);
  }
};

// ---------------------------------------------------------------- IQ3_S
struct IQ3S {
  using Weight = BlockIQ3_S;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      // The 8 grid indices: qs bytes with bit k of qh[ib] as their 9th bit.
      const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.qs + 8 * ib)));
      const __m256i hi = _mm256_and_si256(
          _mm256_sllv_epi32(_mm256_set1_epi32(w.qh[ib]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)),
          _mm256_set1_epi32(0x100));
      const __m256i q = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIQ3SGrid), _mm256_or_si256(lo, hi), 4);
      const __m256i av = apply_signs(load256(a.qs + 32 * ib), load_u32(w.signs + 4 * ib));
      const int s = (w.scales[ib / 2] >> (4 * (ib % 2))) & 15;
      sum = _mm256_add_epi32(sum, dot_u8(q, av, _mm256_set1_epi16(static_cast<int16_t>(2 * s + 1))));
    }
    return scaled(f16(w.d) * a.d, sum);
  }
};

// ---------------------------------------------------------------- IQ1_S / IQ1_M
// Levels 8 * grid + delta (delta = +-1, grid in {-1, 0, 1}): never zero, at
// most 9 in magnitude.
inline __m256i iq1_levels(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, __m256i delta) {
  __m256i g = _mm256_set_epi64x(static_cast<int64_t>(g3), static_cast<int64_t>(g2), static_cast<int64_t>(g1),
                                static_cast<int64_t>(g0));
  g = _mm256_add_epi8(g, g);
  g = _mm256_add_epi8(g, g);
  g = _mm256_add_epi8(g, g);
  return _mm256_add_epi8(g, delta);
}

struct IQ1S {
  using Weight = BlockIQ1_S;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const int qh = w.qh[ib];
      const uint8_t* qs = w.qs + 4 * ib;
      const __m256i delta = _mm256_set1_epi8(static_cast<char>(1 - ((qh >> 14) & 2)));  // bit 15: -1
      const __m256i q = iq1_levels(kIQ1SGrid[qs[0] | ((qh << 8) & 0x700)], kIQ1SGrid[qs[1] | ((qh << 5) & 0x700)],
                                   kIQ1SGrid[qs[2] | ((qh << 2) & 0x700)], kIQ1SGrid[qs[3] | ((qh >> 1) & 0x700)],
                                   delta);
      const int s = 2 * ((qh >> 12) & 7) + 1;
      sum = _mm256_add_epi32(sum, dot_s8(q, load256(a.qs + 32 * ib), _mm256_set1_epi16(static_cast<int16_t>(s))));
    }
    return scaled(f16(w.d) * a.d * 0.125f, sum);
  }
};

struct IQ1M {
  using Weight = BlockIQ1_M;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  // 8 bytes of +1, or of -1 where bit 3 of nib is set (branch-free: the bits are random).
  static int64_t delta8(int nib) {
    const int64_t neg = -static_cast<int64_t>((nib >> 3) & 1);
    return 0x0101010101010101 + (neg & static_cast<int64_t>(0xFEFEFEFEFEFEFEFEull));
  }
  static __m256 block(const Weight& w, const Act& a) {
    uint16_t sc[4];
    std::memcpy(sc, w.scales, 8);
    const uint16_t dbits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                                 (sc[3] & 0xf000));
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = w.qs + 4 * ib;
      const int h0 = w.qh[2 * ib], h1 = w.qh[2 * ib + 1];
      const __m256i delta = _mm256_set_epi64x(delta8(h1 >> 4), delta8(h1), delta8(h0 >> 4), delta8(h0));
      const __m256i q = iq1_levels(kIQ1SGrid[qs[0] | ((h0 << 8) & 0x700)], kIQ1SGrid[qs[1] | ((h0 << 4) & 0x700)],
                                   kIQ1SGrid[qs[2] | ((h1 << 8) & 0x700)], kIQ1SGrid[qs[3] | ((h1 << 4) & 0x700)],
                                   delta);
      const int shift = 6 * (ib % 2);
      const int s0 = 2 * ((sc[ib / 2] >> shift) & 7) + 1, s1 = 2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1;
      sum = _mm256_add_epi32(sum, dot_s8(q, load256(a.qs + 32 * ib), scale_pair(s0, s1)));
    }
    return scaled(f16(dbits) * a.d * 0.125f, sum);
  }
};

// ---------------------------------------------------------------- IQ4_NL / IQ4_XS
struct IQ4NL {
  using Weight = BlockIQ4_NL;
  using Act = BlockQ8_0;
  static constexpr int kBlock = QK;
  static __m256 block(const Weight& w, const Act& a) {
    const __m256i q = iq4_levels(unpack_nibbles_32(w.qs));
    return scaled(f16(w.d) * f16(a.d), dot_s8(q, load256(a.qs), _mm256_set1_epi16(1)));
  }
};

struct IQ4XS {
  using Weight = BlockIQ4_XS;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((w.scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((w.scales_h >> (2 * ib)) & 3) << 4);
      const __m256i q = iq4_levels(unpack_nibbles_32(w.qs + 16 * ib));
      sum = _mm256_add_epi32(sum, dot_s8(q, load256(a.qs + 32 * ib), _mm256_set1_epi16(static_cast<int16_t>(ls - 32))));
    }
    return scaled(f16(w.d) * a.d, sum);
  }
};

// ---------------------------------------------------------------- TQ2_0 / TQ1_0
// Stored levels t in 0..2 (0..3 for TQ2_0's 2-bit fields); x = d * (t - 1):
// sum (t - 1) a = sum t a - sum a.
struct TQ20 {
  using Weight = BlockTQ2_0;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    const __m256i ones = _mm256_set1_epi16(1), m3 = _mm256_set1_epi8(3);
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i v = load256(w.qs + 32 * h);
      for (int l = 0; l < 4; ++l) {
        const __m256i t = _mm256_and_si256(_mm256_srli_epi16(v, 2 * l), m3);
        sum = _mm256_add_epi32(sum, dot_u8(t, load256(a.qs + 128 * h + 32 * l), ones));
      }
    }
    sum = _mm256_sub_epi32(sum, _mm256_setr_epi32(q8k_sum(a), 0, 0, 0, 0, 0, 0, 0));
    return scaled(f16(w.d) * a.d, sum);
  }
};

// Base-3 digit k of 16 bytes held as u16 lanes: ((uint8_t)(b * 3^k) * 3) >> 8.
inline __m256i trits16(__m256i b16, int pow3) {
  const __m256i m = _mm256_and_si256(_mm256_mullo_epi16(b16, _mm256_set1_epi16(static_cast<int16_t>(pow3))),
                                     _mm256_set1_epi16(0xFF));
  return _mm256_srli_epi16(_mm256_mullo_epi16(m, _mm256_set1_epi16(3)), 8);
}
// 32 digits k of 32 bytes, as bytes in element order.
inline __m256i trits32(__m256i lo16, __m256i hi16, int pow3) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(trits16(lo16, pow3), trits16(hi16, pow3)), 0xD8);
}

struct TQ10 {
  using Weight = BlockTQ1_0;
  using Act = BlockQ8_K;
  static constexpr int kBlock = QK_K;
  static __m256 block(const Weight& w, const Act& a) {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum = _mm256_setzero_si256();
    // qs[0..31], digit k: elements 32k..32k+31.
    const __m256i lo = _mm256_cvtepu8_epi16(load128(w.qs)), hi = _mm256_cvtepu8_epi16(load128(w.qs + 16));
    for (int k = 0; k < 5; ++k) sum = _mm256_add_epi32(sum, dot_u8(trits32(lo, hi, kPow3[k]), load256(a.qs + 32 * k), ones));
    // qs[32..47], digit k: elements 160+16k..; digits k and k+1 make 32 in a row.
    const __m256i mid = _mm256_cvtepu8_epi16(load128(w.qs + 32));
    for (int k = 0; k < 4; k += 2) {
      const __m256i t = _mm256_permute4x64_epi64(_mm256_packus_epi16(trits16(mid, kPow3[k]), trits16(mid, kPow3[k + 1])), 0xD8);
      sum = _mm256_add_epi32(sum, dot_u8(t, load256(a.qs + 160 + 16 * k), ones));
    }
    // Digit 4 of qs[32..47] (elements 224..239) and qh (240..255) make the last 32.
    alignas(32) uint8_t tail[32];
    const __m256i d4 = trits16(mid, kPow3[4]);
    _mm_store_si128(reinterpret_cast<__m128i*>(tail),
                    _mm_packus_epi16(_mm256_castsi256_si128(d4), _mm256_extracti128_si256(d4, 1)));
    for (int k = 0; k < 4; ++k)
      for (int m = 0; m < 4; ++m) {
        const uint8_t b = static_cast<uint8_t>(w.qh[m] * kPow3[k]);
        tail[16 + 4 * k + m] = static_cast<uint8_t>((b * 3) >> 8);
      }
    sum = _mm256_add_epi32(sum, dot_u8(load256(tail), load256(a.qs + 224), ones));
    sum = _mm256_sub_epi32(sum, _mm256_setr_epi32(q8k_sum(a), 0, 0, 0, 0, 0, 0, 0));
    return scaled(f16(w.d) * a.d, sum);
  }
};

}  // namespace

#define MS_ROWS(fn, Fmt)                                                                                   \
  void fn(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {                 \
    for_row_groups<BlockRows<Fmt>>(n, w, s, rows, a, out);                                                \
  }

MS_ROWS(vec_dot_rows_iq2_xxs_avx2, IQ2XXS)
MS_ROWS(vec_dot_rows_iq2_xs_avx2, IQ2XS)
MS_ROWS(vec_dot_rows_iq2_s_avx2, IQ2S)
MS_ROWS(vec_dot_rows_iq3_xxs_avx2, IQ3XXS)
MS_ROWS(vec_dot_rows_iq3_s_avx2, IQ3S)
MS_ROWS(vec_dot_rows_iq1_s_avx2, IQ1S)
MS_ROWS(vec_dot_rows_iq1_m_avx2, IQ1M)
MS_ROWS(vec_dot_rows_iq4_nl_avx2, IQ4NL)
MS_ROWS(vec_dot_rows_iq4_xs_avx2, IQ4XS)
MS_ROWS(vec_dot_rows_tq1_0_avx2, TQ10)
MS_ROWS(vec_dot_rows_tq2_0_avx2, TQ20)

#undef MS_ROWS

}  // namespace ms::simd
