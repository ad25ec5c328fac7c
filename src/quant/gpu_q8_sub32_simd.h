// Internal, included only by gpu_q8_sub32_fast_avx2.cpp and
// gpu_q8_sub32_fast_avx512.cpp: GPU Q8 row kernels (quant/gpu_q8.h) of the
// sub-block formats (Q3_K, Q2_K, IQ4_XS, IQ4_NL, Q4_1, Q5_0, Q5_1, IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ2_0, TQ1_0), and of Q6_K
// (whose GPU term has the same shape), that decode the weights with SIMD
// instead of the scalar gpu_sub32_decode_block (the reference for Q6_K).
//
// The includer defines, before including this file, inside
// namespace ms::simd { namespace { ... } }:
//   __m256i dot_u8(__m256i w, __m256i a)   32 unsigned weights (0..127) x 32
//       int8 activations -> 8 int32 partial sums, sum k over bytes 4k..4k+3
//       (maddubs + madd on AVX2, dpbusd on AVX-512 VNNI).
// Everything here is in an anonymous namespace, so each ISA file gets its own
// copy compiled with its own flags (no inline function is shared with
// baseline files: see simd_kernels.h).
//
// The terms are gpu_sub32_term's, per 32-element sub-block j against
// activation block j (d_j, s_j) with S0, S1 the integer dots of its halves:
//   Q3_K    d_j * (s0 * S0 + s1 * S1)
//   Q2_K    d_j * (s0 * S0 + s1 * S1) + d_j * (m0 * H0 + m1 * H1)
//   IQ4_*, Q5_0               d_j * s * (S0 + S1)
//   Q4_1, Q5_1                d_j * s * (S0 + S1) + m * s_j
//   the grid formats, TQ2_0   as IQ4_XS, or as Q3_K where a scale is per 16
// with the same float scale expressions (s0 = d * sc etc.). The integer dots
// are exact, so S0, S1, H0, H1 are the reference's integers; the 8 sub-blocks
// of a super-block go through the float formula side by side (lane j =
// sub-block j) and each lane accumulates over the row, the 8 lanes added at
// the end. So only the order of the final float additions (and FMA
// contraction) differs from dot_sub32_gpu_q8, as in the other GPU Q8 kernels.
//
// Q3_K's quants q - 4*(1 - hbit) are dotted as the unsigned q' = q + 4*hbit
// (0..7), then 4*H subtracted per half (H: the activations' half sums): the
// same integer, one maddubs instead of the signed-operand trick.
//
// Signed weights and the grid formats' signs are moved onto the activations
// with sign_epi8, which leaves a -128 as -128: exact for activations in
// [-127, 127], what quantize_row_gpu_q8 makes for finite activations with a
// normal block scale (gpu_q8.h; not in its saturating edge cases); the
// decode-then-dot kernels had the same limit.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/gpu_q8.h"
#include "quant/iq_grids.h"

namespace ms::simd {
namespace {

inline __m256i s32_load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i s32_load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline uint32_t s32_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float s32_f16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Signed weights: the unsigned operand is |w|, the sign moves to a.
inline __m256i dot_s8(__m256i w, __m256i a) { return dot_u8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)); }

// p[j]: sub-block j's 8 partial sums (4 per half). h0 / h1 get the 8
// sub-blocks' first-half / second-half totals, lane j = sub-block j.
inline void s32_reduce_halves(const __m256i* p, __m256i* h0, __m256i* h1) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  // per 128-bit lane: [p0 p1 p2 p3]; lane 0 holds the first halves, lane 1 the second
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  *h0 = _mm256_permute2x128_si256(a, b, 0x20);
  *h1 = _mm256_permute2x128_si256(a, b, 0x31);
}
inline __m256i s32_reduce(const __m256i* p) {
  __m256i h0, h1;
  s32_reduce_halves(p, &h0, &h1);
  return _mm256_add_epi32(h0, h1);
}

// One super-block's activations (8 blocks of 32): quants, d, s, and for the
// K formats the halves' integer sums.
struct SuperAct {
  __m256i q[8];
  __m256 d, s;
  __m256i h0, h1;
};
inline void load_super(const int8_t* q, const float* d, const float* s, bool halves, SuperAct& a) {
  for (int j = 0; j < 8; ++j) a.q[j] = s32_load256(q + 32 * j);
  a.d = _mm256_loadu_ps(d);
  a.s = _mm256_loadu_ps(s);
  if (halves) {
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i p[8];
    for (int j = 0; j < 8; ++j) p[j] = dot_u8(ones, a.q[j]);
    s32_reduce_halves(p, &a.h0, &a.h1);
  }
}

// ---------------------------------------------------------------- Q3_K
struct SuperQ3K {
  static constexpr int64_t kBytes = sizeof(BlockQ3_K);
  static constexpr bool kHalves = true;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    // 16 signed 6-bit scales: low nibbles in bytes 0-7, high 2 bits in 8-11.
    const uint32_t a0 = s32_u32(blk + 96), a1 = s32_u32(blk + 100), hi = s32_u32(blk + 104);
    const uint32_t w0 = (a0 & 0x0f0f0f0fu) | ((hi & 0x03030303u) << 4);
    const uint32_t w1 = (a1 & 0x0f0f0f0fu) | (((hi >> 2) & 0x03030303u) << 4);
    const uint32_t w2 = ((a0 >> 4) & 0x0f0f0f0fu) | (((hi >> 4) & 0x03030303u) << 4);
    const uint32_t w3 = ((a1 >> 4) & 0x0f0f0f0fu) | (((hi >> 6) & 0x03030303u) << 4);
    __m128i sc = _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(w0), static_cast<int>(w1), static_cast<int>(w2),
                                             static_cast<int>(w3)),
                              _mm_set1_epi8(32));
    sc = _mm_shuffle_epi8(sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m256 d = _mm256_set1_ps(s32_f16(blk + 108));
    const __m256 s0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
    const __m256 s1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))));

    // Sub-block j's high bits are bit j of each hmask byte, moved to bit 2
    // (the value 4) by a 16-bit shift: both bytes of a word move by the same
    // amount and bit 2 of each comes from bit j of the same byte (j <= 7).
    const __m256i hm = s32_load256(blk), three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i hb[8] = {_mm256_slli_epi16(hm, 2), _mm256_slli_epi16(hm, 1), hm,
                           _mm256_srli_epi16(hm, 1), _mm256_srli_epi16(hm, 2), _mm256_srli_epi16(hm, 3),
                           _mm256_srli_epi16(hm, 4), _mm256_srli_epi16(hm, 5)};
    __m256i p[8];
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = s32_load256(blk + 32 + 32 * h);
      for (int c = 0; c < 4; ++c) {
        const int j = 4 * h + c;
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * c), three);
        p[j] = dot_u8(_mm256_or_si256(low, _mm256_and_si256(hb[j], four)), a.q[j]);
      }
    }
    __m256i i0, i1;
    s32_reduce_halves(p, &i0, &i1);
    i0 = _mm256_sub_epi32(i0, _mm256_slli_epi32(a.h0, 2));
    i1 = _mm256_sub_epi32(i1, _mm256_slli_epi32(a.h1, 2));
    const __m256 inner = _mm256_add_ps(_mm256_mul_ps(s0, _mm256_cvtepi32_ps(i0)), _mm256_mul_ps(s1, _mm256_cvtepi32_ps(i1)));
    return _mm256_mul_ps(a.d, inner);
  }
};

// ---------------------------------------------------------------- Q6_K
// Not a sub-block format of the CUDA kernels (OpQ6K), but its GPU term has
// the same shape (gpu_q8_ref.cpp's q6k_chunk): chunk j = 4h + c of 32
// elements against activation block j, d_j * (s0 * S0 + s1 * S1) with
// s = d * scales[2j], d * scales[2j + 1] and q = (low 4 bits | high 2 bits
// << 4) - 32, dotted as the unsigned 0..63 minus 32 * H per half.
struct SuperQ6K {
  static constexpr int64_t kBytes = sizeof(BlockQ6_K);
  static constexpr bool kHalves = true;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    const __m128i sc = _mm_shuffle_epi8(s32_load128(blk + 192),
                                        _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m256 d = _mm256_set1_ps(s32_f16(blk + 208));
    const __m256 s0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
    const __m256 s1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))));
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x30);
    __m256i p[8];
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = s32_load256(blk + 64 * h), ql1 = s32_load256(blk + 64 * h + 32);
      const __m256i qh = s32_load256(blk + 128 + 32 * h);
      // chunk c: low bits from ql[64h + 32(c & 1)] nibble c >> 1, high bits bits 2c of qh
      const __m256i lo[4] = {_mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4),
                             _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4)};
      const __m256i hi[4] = {_mm256_and_si256(_mm256_slli_epi16(qh, 4), m3),
                             _mm256_and_si256(_mm256_slli_epi16(qh, 2), m3), _mm256_and_si256(qh, m3),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m3)};
      for (int c = 0; c < 4; ++c) p[4 * h + c] = dot_u8(_mm256_or_si256(lo[c], hi[c]), a.q[4 * h + c]);
    }
    __m256i i0, i1;
    s32_reduce_halves(p, &i0, &i1);
    i0 = _mm256_sub_epi32(i0, _mm256_slli_epi32(a.h0, 5));
    i1 = _mm256_sub_epi32(i1, _mm256_slli_epi32(a.h1, 5));
    const __m256 inner = _mm256_add_ps(_mm256_mul_ps(s0, _mm256_cvtepi32_ps(i0)), _mm256_mul_ps(s1, _mm256_cvtepi32_ps(i1)));
    return _mm256_mul_ps(a.d, inner);
  }
};

// ---------------------------------------------------------------- Q2_K
struct SuperQ2K {
  static constexpr int64_t kBytes = sizeof(BlockQ2_K);
  static constexpr bool kHalves = true;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    // scales[2j + k]: low nibble scale, high nibble min of half k of sub-block j
    const __m128i raw = _mm_shuffle_epi8(s32_load128(blk),
                                         _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i sc = _mm_and_si128(raw, m4), mn = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
    const __m256 d = _mm256_set1_ps(s32_f16(blk + 80)), ndmin = _mm256_set1_ps(-s32_f16(blk + 82));
    auto cvt = [](__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); };
    const __m256 s0 = _mm256_mul_ps(d, cvt(sc)), s1 = _mm256_mul_ps(d, cvt(_mm_srli_si128(sc, 8)));
    const __m256 n0 = _mm256_mul_ps(ndmin, cvt(mn)), n1 = _mm256_mul_ps(ndmin, cvt(_mm_srli_si128(mn, 8)));

    const __m256i three = _mm256_set1_epi8(3);
    __m256i p[8];
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = s32_load256(blk + 16 + 32 * h);
      for (int c = 0; c < 4; ++c)
        p[4 * h + c] = dot_u8(_mm256_and_si256(_mm256_srli_epi16(qs, 2 * c), three), a.q[4 * h + c]);
    }
    __m256i i0, i1;
    s32_reduce_halves(p, &i0, &i1);
    const __m256 inner = _mm256_add_ps(_mm256_mul_ps(s0, _mm256_cvtepi32_ps(i0)), _mm256_mul_ps(s1, _mm256_cvtepi32_ps(i1)));
    const __m256 mins =
        _mm256_add_ps(_mm256_mul_ps(n0, _mm256_cvtepi32_ps(a.h0)), _mm256_mul_ps(n1, _mm256_cvtepi32_ps(a.h1)));
    return _mm256_add_ps(_mm256_mul_ps(a.d, inner), _mm256_mul_ps(a.d, mins));
  }
};

// ---------------------------------------------------------------- IQ4_XS / IQ4_NL
inline __m256i iq4_lut() {
  return _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,  //
                          -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}
// The 32 nibbles of 16 bytes in element order (low nibbles are elements
// 0-15, high nibbles 16-31).
inline __m256i nibbles32(__m128i x) {
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0F));
}
// 16 bytes of nibbles -> the 32 IQ4 levels in element order.
inline __m256i iq4_levels(__m128i x, __m256i lut) { return _mm256_shuffle_epi8(lut, nibbles32(x)); }

struct SuperIQ4XS {
  static constexpr int64_t kBytes = sizeof(BlockIQ4_XS);
  static constexpr bool kHalves = false;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    // ls_j = (4 bits of scales_l) | (2 bits of scales_h) << 4; s_j = d * (ls_j - 32)
    const uint32_t sl = s32_u32(blk + 4), sh = static_cast<uint32_t>(blk[2]) | (static_cast<uint32_t>(blk[3]) << 8);
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i lo = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sl)), _mm256_slli_epi32(idx, 2)), _mm256_set1_epi32(15));
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sh)), _mm256_slli_epi32(idx, 1)), _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    const __m256 s = _mm256_mul_ps(_mm256_set1_ps(s32_f16(blk)), _mm256_cvtepi32_ps(ls));

    const __m256i lut = iq4_lut();
    __m256i p[8];
    for (int j = 0; j < 8; ++j) p[j] = dot_s8(iq4_levels(s32_load128(blk + 8 + 16 * j), lut), a.q[j]);
    return _mm256_mul_ps(_mm256_mul_ps(a.d, s), _mm256_cvtepi32_ps(s32_reduce(p)));
  }
};

// ---------------------------------------------------------------- grid formats
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ2_0: each sub-block's 32
// weights rebuilt as bytes (grid magnitudes looked up by index, the signs
// moved onto the activations with sign_epi8, as simd_iquants_avx2.cpp does),
// dotted to 8 partial sums p[j]; the scales are the reference's
// d * mult * factor (ref_iquants.cpp's unpack), one per 32 or per 16.

// 0xFF in byte 8g+k where bit k of byte g of `bits` is set, else 0.
inline __m256i s32_bits_to_mask(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}
// a with byte 8g+k negated where that bit of `bits` is set.
inline __m256i s32_apply_signs(__m256i a, uint32_t bits) {
  return _mm256_sign_epi8(a, _mm256_or_si256(s32_bits_to_mask(bits), _mm256_set1_epi8(1)));
}
// Four sign bytes from four 7-bit sign indices.
inline uint32_t s32_signs(uint32_t aux) {
  return kIQ2Signs[aux & 127] | static_cast<uint32_t>(kIQ2Signs[(aux >> 7) & 127]) << 8 |
         static_cast<uint32_t>(kIQ2Signs[(aux >> 14) & 127]) << 16 |
         static_cast<uint32_t>(kIQ2Signs[(aux >> 21) & 127]) << 24;
}
inline __m256i s32_grid64(const uint64_t* grid, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  return _mm256_set_epi64x(static_cast<long long>(grid[i3]), static_cast<long long>(grid[i2]),
                           static_cast<long long>(grid[i1]), static_cast<long long>(grid[i0]));
}
// d * mult_j * factor for the 8 lanes, in the reference's order.
inline __m256 s32_scales(float d, const int* mult, float factor) {
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s32_load256(mult))),
                       _mm256_set1_ps(factor));
}
// d_j * s_j * (S0 + S1)
inline __m256 s32_one_scale(const SuperAct& a, __m256 s, const __m256i* p) {
  return _mm256_mul_ps(_mm256_mul_ps(a.d, s), _mm256_cvtepi32_ps(s32_reduce(p)));
}
// d_j * (s0_j * S0 + s1_j * S1)
inline __m256 s32_two_scales(const SuperAct& a, __m256 s0, __m256 s1, const __m256i* p) {
  __m256i i0, i1;
  s32_reduce_halves(p, &i0, &i1);
  return _mm256_mul_ps(a.d, _mm256_add_ps(_mm256_mul_ps(s0, _mm256_cvtepi32_ps(i0)),
                                          _mm256_mul_ps(s1, _mm256_cvtepi32_ps(i1))));
}

struct SuperIQ2XXS {
  static constexpr int64_t kBytes = sizeof(BlockIQ2_XXS);
  static constexpr bool kHalves = false;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    alignas(32) int m[8];
    __m256i p[8];
    for (int ib = 0; ib < 8; ++ib) {  // per sub-block: u32 grid bytes, u32 signs | scale << 28
      const uint32_t idx = s32_u32(blk + 2 + 8 * ib), aux = s32_u32(blk + 6 + 8 * ib);
      const __m256i q = s32_grid64(kIQ2XXSGrid, idx & 255, (idx >> 8) & 255, (idx >> 16) & 255, idx >> 24);
      p[ib] = dot_u8(q, s32_apply_signs(a.q[ib], s32_signs(aux)));
      m[ib] = 2 * static_cast<int>(aux >> 28) + 1;
    }
    return s32_one_scale(a, s32_scales(s32_f16(blk), m, 0.125f), p);
  }
};

struct SuperIQ2XS {
  static constexpr int64_t kBytes = sizeof(BlockIQ2_XS);
  static constexpr bool kHalves = false;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    BlockIQ2_XS b;
    std::memcpy(&b, blk, sizeof b);
    alignas(32) int m0[8], m1[8];
    __m256i p[8];
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t* g = b.qs + 4 * ib;  // 9-bit grid index | 7-bit sign index << 9
      const __m256i q = s32_grid64(kIQ2XSGrid, g[0] & 511u, g[1] & 511u, g[2] & 511u, g[3] & 511u);
      const uint32_t signs = kIQ2Signs[g[0] >> 9] | static_cast<uint32_t>(kIQ2Signs[g[1] >> 9]) << 8 |
                             static_cast<uint32_t>(kIQ2Signs[g[2] >> 9]) << 16 |
                             static_cast<uint32_t>(kIQ2Signs[g[3] >> 9]) << 24;
      p[ib] = dot_u8(q, s32_apply_signs(a.q[ib], signs));
      m0[ib] = 2 * (b.scales[ib] & 15) + 1;
      m1[ib] = 2 * (b.scales[ib] >> 4) + 1;
    }
    const float d = _cvtsh_ss(b.d);
    return s32_two_scales(a, s32_scales(d, m0, 0.125f), s32_scales(d, m1, 0.125f), p);
  }
};

struct SuperIQ2S {
  static constexpr int64_t kBytes = sizeof(BlockIQ2_S);
  static constexpr bool kHalves = false;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    BlockIQ2_S b;
    std::memcpy(&b, blk, sizeof b);
    alignas(32) int m0[8], m1[8];
    __m256i p[8];
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = b.qs + 4 * ib;
      const uint32_t qh = b.qh[ib];
      const __m256i q = s32_grid64(kIQ2SGrid, qs[0] | ((qh << 8) & 0x300), qs[1] | ((qh << 6) & 0x300),
                                   qs[2] | ((qh << 4) & 0x300), qs[3] | ((qh << 2) & 0x300));
      p[ib] = dot_u8(q, s32_apply_signs(a.q[ib], s32_u32(b.qs + 32 + 4 * ib)));
      m0[ib] = 2 * (b.scales[ib] & 15) + 1;
      m1[ib] = 2 * (b.scales[ib] >> 4) + 1;
    }
    const float d = _cvtsh_ss(b.d);
    return s32_two_scales(a, s32_scales(d, m0, 0.125f), s32_scales(d, m1, 0.125f), p);
  }
};

struct SuperIQ3XXS {
  static constexpr int64_t kBytes = sizeof(BlockIQ3_XXS);
  static constexpr bool kHalves = false;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    alignas(32) int m[8];
    __m256i p[8];
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* g = blk + 2 + 8 * ib;
      const __m256i q = _mm256_setr_epi32(
          static_cast<int>(kIQ3XXSGrid[g[0]]), static_cast<int>(kIQ3XXSGrid[g[1]]),
          static_cast<int>(kIQ3XXSGrid[g[2]]), static_cast<int>(kIQ3XXSGrid[g[3]]),
          static_cast<int>(kIQ3XXSGrid[g[4]]), static_cast<int>(kIQ3XXSGrid[g[5]]),
          static_cast<int>(kIQ3XXSGrid[g[6]]), static_cast<int>(kIQ3XXSGrid[g[7]]));
      const uint32_t aux = s32_u32(blk + 2 + 64 + 4 * ib);
      p[ib] = dot_u8(q, s32_apply_signs(a.q[ib], s32_signs(aux)));
      m[ib] = 2 * static_cast<int>(aux >> 28) + 1;
    }
    return s32_one_scale(a, s32_scales(s32_f16(blk), m, 0.25f), p);
  }
};

struct SuperIQ3S {
  static constexpr int64_t kBytes = sizeof(BlockIQ3_S);
  static constexpr bool kHalves = false;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    BlockIQ3_S b;
    std::memcpy(&b, blk, sizeof b);
    alignas(32) int m[8];
    __m256i p[8];
    for (int ib = 0; ib < 8; ++ib) {
      // the 8 grid indices: qs bytes with bit k of qh[ib] as their 9th bit
      const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * ib)));
      const __m256i hi = _mm256_and_si256(
          _mm256_sllv_epi32(_mm256_set1_epi32(b.qh[ib]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)),
          _mm256_set1_epi32(0x100));
      const __m256i q = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIQ3SGrid), _mm256_or_si256(lo, hi), 4);
      p[ib] = dot_u8(q, s32_apply_signs(a.q[ib], s32_u32(b.signs + 4 * ib)));
      m[ib] = 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
    }
    return s32_one_scale(a, s32_scales(_cvtsh_ss(b.d), m, 1.0f), p);
  }
};

struct SuperIQ1S {  // levels 8 * grid + delta (grid in {-1, 0, 1}, delta +-1)
  static constexpr int64_t kBytes = sizeof(BlockIQ1_S);
  static constexpr bool kHalves = false;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    BlockIQ1_S b;
    std::memcpy(&b, blk, sizeof b);
    alignas(32) int m[8];
    __m256i p[8];
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t qh = b.qh[ib];
      const uint8_t* qs = b.qs + 4 * ib;
      __m256i g = s32_grid64(kIQ1SGrid, qs[0] | ((qh << 8) & 0x700), qs[1] | ((qh << 5) & 0x700),
                             qs[2] | ((qh << 2) & 0x700), qs[3] | ((qh >> 1) & 0x700));
      g = _mm256_add_epi8(g, g);  // x8 per byte (a 16-bit shift would carry -1's bits across)
      g = _mm256_add_epi8(g, g);
      g = _mm256_add_epi8(g, g);
      g = _mm256_add_epi8(g, _mm256_set1_epi8(static_cast<char>(qh & 0x8000 ? -1 : 1)));
      p[ib] = dot_s8(g, a.q[ib]);
      m[ib] = 2 * static_cast<int>((qh >> 12) & 7) + 1;
    }
    return s32_one_scale(a, s32_scales(_cvtsh_ss(b.d), m, 0.125f), p);
  }
};

struct SuperIQ1M {  // as IQ1_S with a delta sign per 8 and a 3-bit scale per 16
  static constexpr int64_t kBytes = sizeof(BlockIQ1_M);
  static constexpr bool kHalves = false;
  // 8 bytes of +1, or of -1 where bit 3 of nib is set
  static long long delta8(int nib) {
    const long long neg = -static_cast<long long>((nib >> 3) & 1);
    return 0x0101010101010101LL + (neg & static_cast<long long>(0xFEFEFEFEFEFEFEFEull));
  }
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    BlockIQ1_M b;
    std::memcpy(&b, blk, sizeof b);
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    // the f16 super-block scale: the top nibbles of the 4 scale words
    const auto dbits = static_cast<unsigned short>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                                   ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    alignas(32) int m0[8], m1[8];
    __m256i p[8];
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = b.qs + 4 * ib;
      const int h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
      __m256i g = s32_grid64(kIQ1SGrid, qs[0] | ((h0 << 8) & 0x700), qs[1] | ((h0 << 4) & 0x700),
                             qs[2] | ((h1 << 8) & 0x700), qs[3] | ((h1 << 4) & 0x700));
      g = _mm256_add_epi8(g, g);  // x8 per byte
      g = _mm256_add_epi8(g, g);
      g = _mm256_add_epi8(g, g);
      g = _mm256_add_epi8(g, _mm256_set_epi64x(delta8(h1 >> 4), delta8(h1), delta8(h0 >> 4), delta8(h0)));
      p[ib] = dot_s8(g, a.q[ib]);
      const int shift = 6 * (ib % 2);
      m0[ib] = 2 * ((sc[ib / 2] >> shift) & 7) + 1;
      m1[ib] = 2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1;
    }
    const float d = _cvtsh_ss(dbits);
    return s32_two_scales(a, s32_scales(d, m0, 0.125f), s32_scales(d, m1, 0.125f), p);
  }
};

struct SuperTQ2 {  // q = 2-bit field - 1, laid out as Q2_K's quants; one scale d
  static constexpr int64_t kBytes = sizeof(BlockTQ2_0);
  static constexpr bool kHalves = true;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    const __m256i three = _mm256_set1_epi8(3);
    __m256i p[8];
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = s32_load256(blk + 32 * h);
      for (int c = 0; c < 4; ++c)
        p[4 * h + c] = dot_u8(_mm256_and_si256(_mm256_srli_epi16(qs, 2 * c), three), a.q[4 * h + c]);
    }
    // sum (f - 1) a = sum f a - (H0 + H1), exact
    const __m256i isum = _mm256_sub_epi32(s32_reduce(p), _mm256_add_epi32(a.h0, a.h1));
    const __m256 s = _mm256_set1_ps(s32_f16(blk + 64));  // d * 1 * 1
    return _mm256_mul_ps(_mm256_mul_ps(a.d, s), _mm256_cvtepi32_ps(isum));
  }
};

// TQ1_0: base-3 digits (trits t in 0..2, q = t - 1) of bytes that hold a
// fixed-point fraction of 3^5: digit k of b is ((uint8_t)(b * 3^k) * 3) >> 8.
// Sub-blocks 0-4: digit j of qs[0..31]; 5 and 6: digits 0,1 and 2,3 of
// qs[32..47] (16 elements each); 7: digit 4 of qs[32..47], then the 4 digits
// of qh[0..3] (elements 240 + 4k + m). As for TQ2_0, 1 * H is subtracted.
inline __m256i s32_trits16(__m256i b16, int pow3) {  // 16 bytes held as u16 lanes
  const __m256i m = _mm256_and_si256(_mm256_mullo_epi16(b16, _mm256_set1_epi16(static_cast<short>(pow3))),
                                     _mm256_set1_epi16(0xFF));
  return _mm256_srli_epi16(_mm256_mullo_epi16(m, _mm256_set1_epi16(3)), 8);
}
// Two sets of 16 u16 digits as 32 bytes, x's first.
inline __m256i s32_pack_trits(__m256i x, __m256i y) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(x, y), 0xD8);
}

struct SuperTQ1 {
  static constexpr int64_t kBytes = sizeof(BlockTQ1_0);
  static constexpr bool kHalves = true;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    __m256i p[8];
    const __m256i lo = _mm256_cvtepu8_epi16(s32_load128(blk)), hi = _mm256_cvtepu8_epi16(s32_load128(blk + 16));
    for (int k = 0; k < 5; ++k)
      p[k] = dot_u8(s32_pack_trits(s32_trits16(lo, kPow3[k]), s32_trits16(hi, kPow3[k])), a.q[k]);
    const __m256i mid = _mm256_cvtepu8_epi16(s32_load128(blk + 32));
    p[5] = dot_u8(s32_pack_trits(s32_trits16(mid, 1), s32_trits16(mid, 3)), a.q[5]);
    p[6] = dot_u8(s32_pack_trits(s32_trits16(mid, 9), s32_trits16(mid, 27)), a.q[6]);
    // qh's 4 bytes, each repeated for the 4 digits k (lane 4k + m = qh[m]),
    // times 3^k per lane
    const __m256i qh = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(s32_u32(blk + 48))),
                                                             _mm_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3)));
    const __m256i pw = _mm256_setr_epi16(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27);
    const __m256i m = _mm256_and_si256(_mm256_mullo_epi16(qh, pw), _mm256_set1_epi16(0xFF));
    const __m256i tq = _mm256_srli_epi16(_mm256_mullo_epi16(m, _mm256_set1_epi16(3)), 8);
    p[7] = dot_u8(s32_pack_trits(s32_trits16(mid, 81), tq), a.q[7]);
    const __m256i isum = _mm256_sub_epi32(s32_reduce(p), _mm256_add_epi32(a.h0, a.h1));
    const __m256 s = _mm256_set1_ps(s32_f16(blk + 52));
    return _mm256_mul_ps(_mm256_mul_ps(a.d, s), _mm256_cvtepi32_ps(isum));
  }
};

// ---------------------------------------------------------------- 32-element blocks
// Q4_1, Q5_0, Q5_1, IQ4_NL: 8 consecutive blocks side by side as one
// "super-block" (lane j = block j). Fmt::dot(b, a): the block's integer dot
// as 8 partial sums; Fmt::scale(b): its float scale; Fmt::kMin: the block
// has an offset m (f16 at byte 2), the term d_j * s * S + m * s_j.

// Bit l of the 32-bit qh as 0x10 in byte l (the 5th bit of element l).
inline __m256i fifth_bits(uint32_t qh) {
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}

struct FmtIQ4NL {
  static constexpr int64_t kBytes = sizeof(BlockIQ4_NL);
  static constexpr bool kMin = false;
  static __m256i dot(const uint8_t* b, __m256i a) {
    return dot_s8(iq4_levels(s32_load128(b + 2), iq4_lut()), a);
  }
};
struct FmtQ4_1 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_1);
  static constexpr bool kMin = true;
  static __m256i dot(const uint8_t* b, __m256i a) { return dot_u8(nibbles32(s32_load128(b + 4)), a); }
};
struct FmtQ5_0 {  // q = (nibble | bit << 4) - 16, signed
  static constexpr int64_t kBytes = sizeof(BlockQ5_0);
  static constexpr bool kMin = false;
  static __m256i dot(const uint8_t* b, __m256i a) {
    const __m256i q = _mm256_or_si256(nibbles32(s32_load128(b + 6)), fifth_bits(s32_u32(b + 2)));
    return dot_s8(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), a);
  }
};
struct FmtQ5_1 {  // q = nibble | bit << 4, unsigned
  static constexpr int64_t kBytes = sizeof(BlockQ5_1);
  static constexpr bool kMin = true;
  static __m256i dot(const uint8_t* b, __m256i a) {
    return dot_u8(_mm256_or_si256(nibbles32(s32_load128(b + 8)), fifth_bits(s32_u32(b + 4))), a);
  }
};

template <class Fmt>
struct Blocks8 {
  static constexpr int64_t kBytes = 8 * Fmt::kBytes;  // per 256 elements
  static constexpr bool kHalves = false;
  static __m256 term(const uint8_t* blk, const SuperAct& a) {
    __m256i p[8];
    alignas(32) float sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      const uint8_t* b = blk + j * Fmt::kBytes;
      sc[j] = s32_f16(b);
      if constexpr (Fmt::kMin) mn[j] = s32_f16(b + 2);
      p[j] = Fmt::dot(b, a.q[j]);
    }
    const __m256 t = _mm256_mul_ps(_mm256_mul_ps(a.d, _mm256_load_ps(sc)), _mm256_cvtepi32_ps(s32_reduce(p)));
    if constexpr (Fmt::kMin) return _mm256_add_ps(t, _mm256_mul_ps(_mm256_load_ps(mn), a.s));
    return t;
  }
  // A single block (the row's last n/32 % 8), as gpu_sub32_term adds it.
  static float tail(const uint8_t* b, const int8_t* q, float ad, float as) {
    const __m256i p = Fmt::dot(b, s32_load256(q));
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
    float r = ad * s32_f16(b) * static_cast<float>(_mm_cvtsi128_si32(v));
    if constexpr (Fmt::kMin) r += s32_f16(b + 2) * as;
    return r;
  }
};

inline float s32_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R rows at once, the activation super-block loaded once for all of them.
// Super::kBytes is the weight bytes of 256 elements; a format with 32-element
// blocks (IQ4_NL) finishes the row's last n/32 % 8 blocks with Super::tail.
template <class Super, int R>
void super_rows(int64_t n, const uint8_t* w, int64_t stride, const int8_t* aq, const float* ad, const float* as,
                float* out) {
  __m256 acc[R];
  float tail[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), tail[r] = 0.f;
  const int64_t supers = n / 256;
  for (int64_t i = 0; i < supers; ++i) {
    // Software prefetch into L2 of the row group 2 groups ahead, at the rate
    // this one is read (as simd_row_groups.h does for the Q8_K kernels): R
    // rows side by side are R short streams the hardware prefetcher misses.
    const char* pf = reinterpret_cast<const char*>(w + 2 * R * stride + i * R * Super::kBytes);
    for (int64_t k = 0; k < R * Super::kBytes; k += 64) _mm_prefetch(pf + k, _MM_HINT_T1);
    SuperAct a;
    load_super(aq + 256 * i, ad + 8 * i, as + 8 * i, Super::kHalves, a);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_add_ps(acc[r], Super::term(w + r * stride + i * Super::kBytes, a));
  }
  if constexpr (requires { Super::tail(w, aq, 0.f, 0.f); }) {
    constexpr int64_t kBlk = Super::kBytes / 8;
    for (int64_t b = 8 * supers; b < n / 32; ++b)
      for (int r = 0; r < R; ++r) tail[r] += Super::tail(w + r * stride + b * kBlk, aq + 32 * b, ad[b], as[b]);
  }
  for (int r = 0; r < R; ++r) out[r] = s32_hsum(acc[r]) + tail[r];
}

template <class Super>
void super_rows_all(int64_t n, const void* w, int64_t stride, int64_t rows, const void* act, float* out) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* aq = static_cast<const int8_t*>(act);
  const auto* ad = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + n);
  const float* as = ad + n / 32;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) super_rows<Super, 4>(n, wp + r * stride, stride, aq, ad, as, out + r);
  if (rows - r >= 2) {
    super_rows<Super, 2>(n, wp + r * stride, stride, aq, ad, as, out + r);
    r += 2;
  }
  if (rows - r == 1) super_rows<Super, 1>(n, wp + r * stride, stride, aq, ad, as, out + r);
}

// The kernels of this header for t, nullptr for the other formats.
inline GpuQ8RowsFn sub32_fast_kernel(DType t) {
  switch (t) {
    case DType::Q3_K: return super_rows_all<SuperQ3K>;
    case DType::Q6_K: return super_rows_all<SuperQ6K>;
    case DType::Q2_K: return super_rows_all<SuperQ2K>;
    case DType::IQ4_XS: return super_rows_all<SuperIQ4XS>;
    case DType::IQ4_NL: return super_rows_all<Blocks8<FmtIQ4NL>>;
    case DType::IQ2_XXS: return super_rows_all<SuperIQ2XXS>;
    case DType::IQ2_XS: return super_rows_all<SuperIQ2XS>;
    case DType::IQ2_S: return super_rows_all<SuperIQ2S>;
    case DType::IQ3_XXS: return super_rows_all<SuperIQ3XXS>;
    case DType::IQ3_S: return super_rows_all<SuperIQ3S>;
    case DType::IQ1_S: return super_rows_all<SuperIQ1S>;
    case DType::IQ1_M: return super_rows_all<SuperIQ1M>;
    case DType::TQ2_0: return super_rows_all<SuperTQ2>;
    case DType::TQ1_0: return super_rows_all<SuperTQ1>;
    case DType::Q4_1: return super_rows_all<Blocks8<FmtQ4_1>>;
    case DType::Q5_0: return super_rows_all<Blocks8<FmtQ5_0>>;
    case DType::Q5_1: return super_rows_all<Blocks8<FmtQ5_1>>;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace ms::simd
