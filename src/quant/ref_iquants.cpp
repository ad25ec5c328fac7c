// Scalar reference of the ternary formats (TQ1_0, TQ2_0) and the IQ formats
// (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS, IQ4_NL):
// dequantization and dot products against Q8_K (Q8_0 for IQ4_NL).
//
// Every 256-element format is read through one unpack function into one
// integer form:
//   x[e] = (d * mult[e / 16] * factor) * q[e]
// with q an int8 level (a grid byte with its sign, 8*grid +- 1 for IQ1, a
// non-linear level for IQ4), mult the integer sub-block multiplier
// (2s+1, s-32, ...) and factor a power of two (1/8, 1/4, 1). That product order
// reproduces the formats' defining float expressions bit for bit (e.g. IQ2's
// d * (0.5 + s) * 0.25 * grid: multiplying by powers of two is exact, so both
// round the same real numbers once each), and it makes the dot an exact
// integer sum per super-block. The layouts live only in the unpack functions
// (and in the quantizers' pack functions, ref_iquants_quantize.cpp).
#include <cstring>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/iq_grids.h"
#include "quant/ref_formats.h"
#include "quant/ref_iquants.h"

namespace ms::ref {

namespace {

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint8_t grid_byte(uint64_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }

// Group of 8 elements from an 8-byte magnitude grid entry and a sign byte.
void put_group8(uint64_t entry, uint8_t signs, int8_t* q) {
  for (int j = 0; j < 8; ++j) {
    const int v = grid_byte(entry, j);
    q[j] = static_cast<int8_t>((signs >> j) & 1 ? -v : v);
  }
}
// Group of 8 from two 4-byte grid entries and a sign byte.
void put_group4x2(uint32_t e0, uint32_t e1, uint8_t signs, int8_t* q) {
  put_group8(static_cast<uint64_t>(e0) | static_cast<uint64_t>(e1) << 32, signs, q);
}
// IQ1 group: 8 * (int8 grid value) + delta sign (+1 or -1).
void put_group_iq1(uint64_t entry, bool negative_delta, int8_t* q) {
  for (int j = 0; j < 8; ++j)
    q[j] = static_cast<int8_t>(8 * static_cast<int8_t>(grid_byte(entry, j)) + (negative_delta ? -1 : 1));
}

// Base-3 digit k of a TQ1_0 byte (the byte is a fixed-point fraction of 3^5).
int trit(uint8_t b, int k) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t shifted = static_cast<uint8_t>(b * kPow3[k]);
  return (static_cast<uint16_t>(shifted) * 3) >> 8;
}

}  // namespace

// ------------------------------------------------------------------ unpack

LevelsIQ unpack(const BlockTQ1_0& b) {
  LevelsIQ u;
  for (int k = 0; k < 5; ++k)
    for (int m = 0; m < 32; ++m) u.q[32 * k + m] = static_cast<int8_t>(trit(b.qs[m], k) - 1);
  for (int k = 0; k < 5; ++k)
    for (int m = 0; m < 16; ++m) u.q[160 + 16 * k + m] = static_cast<int8_t>(trit(b.qs[32 + m], k) - 1);
  for (int k = 0; k < 4; ++k)
    for (int m = 0; m < 4; ++m) u.q[240 + 4 * k + m] = static_cast<int8_t>(trit(b.qh[m], k) - 1);
  u.d = f16_to_f32(b.d);
  return u;
}

LevelsIQ unpack(const BlockTQ2_0& b) {
  LevelsIQ u;
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 4; ++l)
      for (int m = 0; m < 32; ++m)
        u.q[128 * h + 32 * l + m] = static_cast<int8_t>(((b.qs[32 * h + m] >> (2 * l)) & 3) - 1);
  u.d = f16_to_f32(b.d);
  return u;
}

LevelsIQ unpack(const BlockIQ2_XXS& b) {
  LevelsIQ u;
  u.factor = 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t idx = b.qs[4 * ib] | static_cast<uint32_t>(b.qs[4 * ib + 1]) << 16;
    const uint32_t aux = b.qs[4 * ib + 2] | static_cast<uint32_t>(b.qs[4 * ib + 3]) << 16;
    for (int l = 0; l < 4; ++l)
      put_group8(kIQ2XXSGrid[(idx >> (8 * l)) & 255], kIQ2Signs[(aux >> (7 * l)) & 127], u.q + 32 * ib + 8 * l);
    u.mult[2 * ib] = u.mult[2 * ib + 1] = 2 * static_cast<int>(aux >> 28) + 1;
  }
  u.d = f16_to_f32(b.d);
  return u;
}

LevelsIQ unpack(const BlockIQ2_XS& b) {
  LevelsIQ u;
  u.factor = 0.125f;
  for (int g = 0; g < 32; ++g) put_group8(kIQ2XSGrid[b.qs[g] & 511], kIQ2Signs[b.qs[g] >> 9], u.q + 8 * g);
  for (int ib = 0; ib < 8; ++ib) {
    u.mult[2 * ib] = 2 * (b.scales[ib] & 15) + 1;
    u.mult[2 * ib + 1] = 2 * (b.scales[ib] >> 4) + 1;
  }
  u.d = f16_to_f32(b.d);
  return u;
}

LevelsIQ unpack(const BlockIQ2_S& b) {
  LevelsIQ u;
  u.factor = 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int g = 4 * ib + l;
      const int idx = b.qs[g] | (((b.qh[ib] >> (2 * l)) & 3) << 8);
      put_group8(kIQ2SGrid[idx], b.qs[32 + g], u.q + 8 * g);
    }
    u.mult[2 * ib] = 2 * (b.scales[ib] & 15) + 1;
    u.mult[2 * ib + 1] = 2 * (b.scales[ib] >> 4) + 1;
  }
  u.d = f16_to_f32(b.d);
  return u;
}

LevelsIQ unpack(const BlockIQ3_XXS& b) {
  LevelsIQ u;
  u.factor = 0.25f;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t aux = load_u32(b.qs + 64 + 4 * ib);
    const uint8_t* idx = b.qs + 8 * ib;
    for (int l = 0; l < 4; ++l)
      put_group4x2(kIQ3XXSGrid[idx[2 * l]], kIQ3XXSGrid[idx[2 * l + 1]], kIQ2Signs[(aux >> (7 * l)) & 127],
                   u.q + 32 * ib + 8 * l);
    u.mult[2 * ib] = u.mult[2 * ib + 1] = 2 * static_cast<int>(aux >> 28) + 1;
  }
  u.d = f16_to_f32(b.d);
  return u;
}

LevelsIQ unpack(const BlockIQ3_S& b) {
  LevelsIQ u;
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int k0 = 8 * ib + 2 * l, k1 = k0 + 1;  // grid index numbers 0..63
      const int i0 = b.qs[k0] | (((b.qh[ib] >> (2 * l)) & 1) << 8);
      const int i1 = b.qs[k1] | (((b.qh[ib] >> (2 * l + 1)) & 1) << 8);
      put_group4x2(kIQ3SGrid[i0], kIQ3SGrid[i1], b.signs[4 * ib + l], u.q + 32 * ib + 8 * l);
    }
    u.mult[2 * ib] = u.mult[2 * ib + 1] = 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
  }
  u.d = f16_to_f32(b.d);
  return u;
}

LevelsIQ unpack(const BlockIQ1_S& b) {
  LevelsIQ u;
  u.factor = 0.125f;
  for (int ib = 0; ib < 8; ++ib) {
    const int qh = b.qh[ib];
    for (int l = 0; l < 4; ++l) {
      const int idx = b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
      put_group_iq1(kIQ1SGrid[idx], qh & 0x8000, u.q + 32 * ib + 8 * l);
    }
    u.mult[2 * ib] = u.mult[2 * ib + 1] = 2 * ((qh >> 12) & 7) + 1;
  }
  u.d = f16_to_f32(b.d);
  return u;
}

uint16_t iq1m_scale_bits(const BlockIQ1_M& b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

LevelsIQ unpack(const BlockIQ1_M& b) {
  LevelsIQ u;
  u.factor = 0.125f;
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int nib = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
      const int idx = b.qs[4 * ib + l] | ((nib & 7) << 8);
      put_group_iq1(kIQ1SGrid[idx], nib & 8, u.q + 32 * ib + 8 * l);
    }
    const int shift = 6 * (ib % 2);
    u.mult[2 * ib] = 2 * ((sc[ib / 2] >> shift) & 7) + 1;
    u.mult[2 * ib + 1] = 2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1;
  }
  u.d = f16_to_f32(iq1m_scale_bits(b));
  return u;
}

LevelsIQ unpack(const BlockIQ4_XS& b) {
  LevelsIQ u;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    u.mult[2 * ib] = u.mult[2 * ib + 1] = ls - 32;
    for (int j = 0; j < 16; ++j) {
      u.q[32 * ib + j] = kIQ4NLValues[b.qs[16 * ib + j] & 15];
      u.q[32 * ib + 16 + j] = kIQ4NLValues[b.qs[16 * ib + j] >> 4];
    }
  }
  u.d = f16_to_f32(b.d);
  return u;
}

// ------------------------------------------------------------------ generic row loops

namespace {

template <typename Block>
void dequantize_blocks(const void* src, float* dst, int64_t n) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const LevelsIQ u = unpack(b[i]);
    for (int s = 0; s < 16; ++s) {
      const float dl = u.d * static_cast<float>(u.mult[s]) * u.factor;
      for (int l = 0; l < 16; ++l) dst[i * QK_K + 16 * s + l] = dl * static_cast<float>(u.q[16 * s + l]);
    }
  }
}

// Per super-block: the exact integer sum of mult * q * a over its sub-blocks,
// scaled once by d_w * d_a * factor.
template <typename Block>
float dot_blocks(int64_t n, const void* w, const void* a) {
  const Block* x = static_cast<const Block*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  double total = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const LevelsIQ u = unpack(x[i]);
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t sub = 0;
      for (int l = 0; l < 16; ++l) sub += static_cast<int32_t>(u.q[16 * s + l]) * y[i].qs[16 * s + l];
      isum += u.mult[s] * sub;
    }
    total += static_cast<double>(u.d * y[i].d * u.factor) * isum;
  }
  return static_cast<float>(total);
}

}  // namespace

#define MS_IQ_REF(name, Block)                                                                              \
  void dequantize_##name(const void* s, float* d, int64_t n) { dequantize_blocks<Block>(s, d, n); }         \
  float vec_dot_##name(int64_t n, const void* w, const void* a) { return dot_blocks<Block>(n, w, a); }

MS_IQ_REF(tq1_0, BlockTQ1_0)
MS_IQ_REF(tq2_0, BlockTQ2_0)
MS_IQ_REF(iq2_xxs, BlockIQ2_XXS)
MS_IQ_REF(iq2_xs, BlockIQ2_XS)
MS_IQ_REF(iq2_s, BlockIQ2_S)
MS_IQ_REF(iq3_xxs, BlockIQ3_XXS)
MS_IQ_REF(iq3_s, BlockIQ3_S)
MS_IQ_REF(iq1_s, BlockIQ1_S)
MS_IQ_REF(iq1_m, BlockIQ1_M)
MS_IQ_REF(iq4_xs, BlockIQ4_XS)

#undef MS_IQ_REF

// IQ4_NL: 32-wide blocks like Q4_0, dotted with Q8_0 activations.
void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
  const BlockIQ4_NL* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / QK; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < QK / 2; ++j) {
      dst[i * QK + j] = d * static_cast<float>(kIQ4NLValues[b[i].qs[j] & 15]);
      dst[i * QK + j + QK / 2] = d * static_cast<float>(kIQ4NLValues[b[i].qs[j] >> 4]);
    }
  }
}

float vec_dot_iq4_nl(int64_t n, const void* w, const void* a) {
  const BlockIQ4_NL* x = static_cast<const BlockIQ4_NL*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  double total = 0;
  for (int64_t i = 0; i < n / QK; ++i) {
    int32_t isum = 0;
    for (int j = 0; j < QK / 2; ++j)
      isum += kIQ4NLValues[x[i].qs[j] & 15] * y[i].qs[j] + kIQ4NLValues[x[i].qs[j] >> 4] * y[i].qs[j + QK / 2];
    total += (f16_to_f32(x[i].d) * f16_to_f32(y[i].d)) * static_cast<float>(isum);
  }
  return static_cast<float>(total);
}

}  // namespace ms::ref
