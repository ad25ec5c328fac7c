// Formats decoded one 32-element sub-block at a time into int8 quants with
// float scales: value e of the sub-block is s[e / 16] * q[e] + m[e / 16].
// Every format that is not hand-unrolled in quant_dot.cuh / gemm_q8.cu goes
// through this one form (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, TQ1_0, TQ2_0 here; the
// IQ formats in quant_sub32_iq.cuh), so the decode matvec (OpSub32), the int8
// GEMM tiles (gemm_q8.cu's FmtSub32), the fused MoE decode and the element-wise
// dequant (quant_dequant.cuh) all read a format through the same decoder.
//
// A decoder D has:
//   kBlockElems, kBlockBytes   the GGUF block (32 or 256 elements)
//   kTwoScales                 s[0] and s[1] may differ (16-element scales)
//   kMin                       0: no offset; 1: m[0] == m[1] (per 32);
//                              2: m[0], m[1] per 16 elements (Q2_K)
//   decode(blk, j, Sub32&)     sub-block j (0 .. kBlockElems/32 - 1) of blk
// Layouts as quant/blocks.h (GGUF). Blocks of these formats are only
// 2-byte aligned in general (18, 22, 54, 66, 110 bytes ...), so words are
// read with ld4_a2.
#pragma once
#include "cuda/common.cuh"
#include "cuda/quant_sub32_types.h"
#include "quant/types.h"

namespace ms::cuda::dev {

struct Sub32 {
  int q[8];  // int8x4 words: q[i] holds elements 4i .. 4i+3
  float s[2];
  float m[2];
};

__device__ __forceinline__ uint32_t u8at(const uint8_t* p) { return __ldg(p); }
__device__ __forceinline__ uint32_t byte_of_word(uint32_t w, int k) { return (w >> (8 * k)) & 0xffu; }

// Bits 0..3 of x to bit 4 of bytes 0..3 (the 5th bit of Q5_0 / Q5_1 quants).
__device__ __forceinline__ uint32_t spread_bit4(uint32_t x) {
  return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

// ---------------------------------------------------------------- Q4_1
// {d, m, qs[16]}: x = d * q + m; qs[l] low nibble = element l, high = l + 16.
struct DecQ4_1 {
  static constexpr int kBlockElems = 32, kBlockBytes = 20, kMin = 1;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int, Sub32& u) {
    const float d = f16_bits_to_f32(ld2(blk)), m = f16_bits_to_f32(ld2(blk + 2));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld4_a2(blk + 4 + 4 * i);
      u.q[i] = static_cast<int>(w & 0x0f0f0f0fu);
      u.q[4 + i] = static_cast<int>((w >> 4) & 0x0f0f0f0fu);
    }
    u.s[0] = u.s[1] = d;
    u.m[0] = u.m[1] = m;
  }
};

// ---------------------------------------------------------------- Q5_0 / Q5_1
// {d, [m,] qh (u32), qs[16]}: 5th bit of element l is bit l of qh.
// Q5_0: x = d * (q - 16); Q5_1: x = d * q + m.
template <bool kWithMin>
struct DecQ5 {
  static constexpr int kBlockElems = 32, kBlockBytes = kWithMin ? 24 : 22, kMin = kWithMin ? 1 : 0;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int, Sub32& u) {
    constexpr int kQh = kWithMin ? 4 : 2, kQs = kQh + 4;
    const float d = f16_bits_to_f32(ld2(blk));
    const uint32_t qh = ld4_a2(blk + kQh);
    const uint32_t off = kWithMin ? 0u : 0x10101010u;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld4_a2(blk + kQs + 4 * i);
      u.q[i] = static_cast<int>(__vsub4((w & 0x0f0f0f0fu) | spread_bit4(qh >> (4 * i)), off));
      u.q[4 + i] = static_cast<int>(__vsub4(((w >> 4) & 0x0f0f0f0fu) | spread_bit4(qh >> (16 + 4 * i)), off));
    }
    u.s[0] = u.s[1] = d;
    const float m = kWithMin ? f16_bits_to_f32(ld2(blk + 2)) : 0.f;
    u.m[0] = u.m[1] = m;
  }
};
using DecQ5_0 = DecQ5<false>;
using DecQ5_1 = DecQ5<true>;

// ---------------------------------------------------------------- Q2_K
// {scales[16], qs[64], d, dmin}: element l of sub-block j (half h = j/4,
// jj = j%4) is bits 2jj.. of qs[32h + l]; 16-element group i = 2j + l/16 has
// scale nibble scales[i] & 15 and min nibble scales[i] >> 4;
// x = d * sc * q - dmin * mn.
struct DecQ2K {
  static constexpr int kBlockElems = 256, kBlockBytes = 84, kMin = 2;
  static constexpr bool kTwoScales = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const int h = j >> 2, sh = 2 * (j & 3);
#pragma unroll
    for (int i = 0; i < 8; ++i) u.q[i] = static_cast<int>((ld4_a2(blk + 16 + 32 * h + 4 * i) >> sh) & 0x03030303u);
    const uint32_t sc = ld2(blk + 2 * j);  // scales[2j], scales[2j+1]
    const float d = f16_bits_to_f32(ld2(blk + 80)), dmin = f16_bits_to_f32(ld2(blk + 82));
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t b = (sc >> (8 * k)) & 0xffu;
      u.s[k] = d * static_cast<float>(b & 15);
      u.m[k] = -dmin * static_cast<float>(b >> 4);
    }
  }
};

// ---------------------------------------------------------------- Q3_K
// {hmask[32], qs[64], scales[12], d}: low 2 bits as Q2_K, the high bit of
// element l of sub-block j is bit (4h + jj) of hmask[l] (clear: q - 4);
// 16 signed 6-bit scales (offset 32): low nibble of 16-group i in byte i % 8
// (low nibble for i < 8, else high), top 2 bits at bit 2(i/4) of byte 8 + i%4.
struct DecQ3K {
  static constexpr int kBlockElems = 256, kBlockBytes = 110, kMin = 0;
  static constexpr bool kTwoScales = true;
  static __device__ __forceinline__ int scale(const uint8_t* s, int i) {
    const uint32_t lo = i < 8 ? u8at(s + i) & 15 : u8at(s + i - 8) >> 4;
    const uint32_t hi = (u8at(s + 8 + (i & 3)) >> (2 * (i >> 2))) & 3;
    return static_cast<int>(lo | (hi << 4)) - 32;
  }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const int h = j >> 2, jj = j & 3;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = (ld4_a2(blk + 32 + 32 * h + 4 * i) >> (2 * jj)) & 0x03030303u;
      const uint32_t hb = (ld4_a2(blk + 4 * i) >> (4 * h + jj)) & 0x01010101u;
      u.q[i] = static_cast<int>(__vsub4(lo | (hb << 2), 0x04040404u));
    }
    const float d = f16_bits_to_f32(ld2(blk + 108));
    u.s[0] = d * static_cast<float>(scale(blk + 96, 2 * j));
    u.s[1] = d * static_cast<float>(scale(blk + 96, 2 * j + 1));
    u.m[0] = u.m[1] = 0.f;
  }
};

// ---------------------------------------------------------------- TQ2_0
// {qs[64], d}: element l of sub-block j as Q2_K's layout; x = d * (q - 1).
struct DecTQ2_0 {
  static constexpr int kBlockElems = 256, kBlockBytes = 66, kMin = 0;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const int h = j >> 2, sh = 2 * (j & 3);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      u.q[i] = static_cast<int>(__vsub4((ld4_a2(blk + 32 * h + 4 * i) >> sh) & 0x03030303u, 0x01010101u));
    u.s[0] = u.s[1] = f16_bits_to_f32(ld2(blk + 64));
    u.m[0] = u.m[1] = 0.f;
  }
};

// ---------------------------------------------------------------- TQ1_0
// {qs[48], qh[4], d}: base-3 digits (blocks.h): digit n of byte b is
// ((uint8_t)(b * 3^n) * 3) >> 8, x = d * (digit - 1). Sub-blocks 0..4 are
// digit j of qs[0..31]; sub-blocks 5, 6 digits 2(j-5), 2(j-5)+1 of
// qs[32..47]; sub-block 7 digit 4 of qs[32..47], then digit (l-16)/4 of
// qh[(l-16) % 4].
struct DecTQ1_0 {
  static constexpr int kBlockElems = 256, kBlockBytes = 54, kMin = 0;
  static constexpr bool kTwoScales = false;
  // Digit n of byte b, minus 1 (-1, 0, 1; as a byte after & 0xff). 3^n from
  // a packed table: no branches.
  static __device__ __forceinline__ uint32_t trit_m1(uint32_t b, uint32_t n) {
    constexpr uint64_t kPow3 = 0x51'1b'09'03'01ull;  // 81, 27, 9, 3, 1
    const uint32_t p = static_cast<uint32_t>(kPow3 >> (8 * n)) & 0xffu;
    return ((((b * p) & 0xffu) * 3u) >> 8) - 1u;
  }
  // The item's sub-block j differs from lane to lane, so every byte's source
  // and digit are selected arithmetically (l is a constant once unrolled):
  // the whole block is read as 13 words, which stay in L1 across the items.
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    uint32_t lo[8], hi[4];
#pragma unroll
    for (int w = 0; w < 8; ++w) lo[w] = ld4_a2(blk + 4 * w);
#pragma unroll
    for (int w = 0; w < 4; ++w) hi[w] = ld4_a2(blk + 32 + 4 * w);
    const uint32_t qh = ld4_a2(blk + 48);
    const uint32_t jj = static_cast<uint32_t>(j);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t w = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int l = 4 * i + k;
        const uint32_t b_lo = byte_of_word(lo[l / 4], l % 4), b_hi = byte_of_word(hi[(l & 15) / 4], l % 4);
        const uint32_t b_qh = byte_of_word(qh, (l - 16) & 3);
        uint32_t b, n;
        if (l < 16) {  // sub-blocks 5..7 take qs[32 + l]
          b = jj < 5 ? b_lo : b_hi;
          n = jj < 5 ? jj : jj < 7 ? 2 * (jj - 5) : 4u;
        } else {       // sub-blocks 5, 6 take qs[32 + l - 16], 7 takes qh
          b = jj < 5 ? b_lo : jj < 7 ? b_hi : b_qh;
          n = jj < 5 ? jj : jj < 7 ? 2 * (jj - 5) + 1 : static_cast<uint32_t>((l - 16) >> 2);
        }
        w |= (trit_m1(b, n) & 0xffu) << (8 * k);
      }
      u.q[i] = static_cast<int>(w);
    }
    u.s[0] = u.s[1] = f16_bits_to_f32(ld2(blk + 52));
    u.m[0] = u.m[1] = 0.f;
  }
};

// ---------------------------------------------------------------- the dot over sub-blocks
template <int NV>
struct Acts;  // quant_dot.cuh

// Matvec item = one sub-block of 32 (activation block `item`).
template <class D>
struct OpSub32 {
  static constexpr bool kQ8 = true;
  static constexpr int kItem = 32;
  static constexpr int kBlockBytes = D::kBlockBytes;
  static constexpr int kSubs = D::kBlockElems / 32;

  template <int NV>
  static __device__ __forceinline__ void dot(const uint8_t* row, int item, const Acts<NV>& a, float* acc) {
    Sub32 u;
    D::decode(row + (item / kSubs) * kBlockBytes, item % kSubs, u);
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int8_t* aq = a.q[v] + item * 32;
      const int4 a0 = __ldg(reinterpret_cast<const int4*>(aq)), a1 = __ldg(reinterpret_cast<const int4*>(aq + 16));
      const int s0 = __dp4a(u.q[3], a0.w, __dp4a(u.q[2], a0.z, __dp4a(u.q[1], a0.y, __dp4a(u.q[0], a0.x, 0))));
      const int s1 = __dp4a(u.q[7], a1.w, __dp4a(u.q[6], a1.z, __dp4a(u.q[5], a1.y, __dp4a(u.q[4], a1.x, 0))));
      const float2 ds = __ldg(a.ds[v] + item);
      float r;
      if constexpr (D::kTwoScales)
        r = ds.x * (u.s[0] * static_cast<float>(s0) + u.s[1] * static_cast<float>(s1));
      else
        r = ds.x * u.s[0] * static_cast<float>(s0 + s1);
      if constexpr (D::kMin == 1) r += u.m[0] * ds.y;  // sum_k m x_k = m * d * sum q
      if constexpr (D::kMin == 2) {                   // per-16 offsets: the two halves' sums of q
        constexpr int k1 = 0x01010101;
        const int h0 = __dp4a(k1, a0.w, __dp4a(k1, a0.z, __dp4a(k1, a0.y, __dp4a(k1, a0.x, 0))));
        const int h1 = __dp4a(k1, a1.w, __dp4a(k1, a1.z, __dp4a(k1, a1.y, __dp4a(k1, a1.x, 0))));
        r += ds.x * (u.m[0] * static_cast<float>(h0) + u.m[1] * static_cast<float>(h1));
      }
      acc[v] += r;
    }
  }
};

// Element i (0 .. kBlockElems-1) of a block, through the decoder (decodes
// the whole sub-block: for one-at-a-time uses, embedding rows and the
// dequantising f32 GEMM's tiles).
template <class D>
__device__ __forceinline__ float sub32_elem(const uint8_t* blk, int i) {
  Sub32 u;
  D::decode(blk, i / 32, u);
  const int e = i % 32, h = e / 16;
  const int q = static_cast<int8_t>((static_cast<uint32_t>(u.q[e / 4]) >> (8 * (e % 4))) & 0xffu);
  return u.s[h] * static_cast<float>(q) + (D::kMin != 0 ? u.m[h] : 0.f);
}

}  // namespace ms::cuda::dev
