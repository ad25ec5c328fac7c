// GPU Q8 dots (quant/gpu_q8.h) of the formats the CUDA kernels read through
// sub-block decoders (cuda/quant_sub32*.cuh, OpSub32): Q4_1, Q5_0, Q5_1, Q2_K,
// Q3_K, TQ1_0, TQ2_0 and the IQ formats. Each 32-element sub-block is int8
// quants q with a float scale per 16 elements (s0, s1) and optionally an
// offset (m); per activation block j of 32 the GPU adds
//   d_j * (s0 * S0 + s1 * S1)       formats with 16-element scales
//   d_j * s0 * (S0 + S1)            one scale per 32
//   + m * s_j                       Q4_1, Q5_1 (s_j = d_j * sum of the quants)
//   + d_j * (m0 * H0 + m1 * H1)     Q2_K (H: the halves' sums of the quants)
// with S0, S1 the integer dots of the two halves. The scales are the CUDA
// decoders' float expressions (for the IQ formats the same numbers as
// ref_iquants.cpp's d * mult * factor: they differ by powers of two only).
#include <cstring>

#include "quant/blocks.h"
#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"
#include "quant/half.h"
#include "quant/ref_iquants.h"

namespace ms {
namespace {

using ref::LevelsIQ;

void k3_scales(const uint8_t* s, int* sc) {  // Q3_K's 16 signed 6-bit scales
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
    const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    sc[i] = (low | (high << 4)) - 32;
  }
}

// The 32-element blocks: Q4_1, Q5_0, Q5_1.
void decode32(DType t, const uint8_t* blk, GpuSub32& u) {
  uint16_t dh;
  std::memcpy(&dh, blk, 2);
  const float d = f16_to_f32(dh);
  const bool five = t != DType::Q4_1, with_min = t != DType::Q5_0;
  const uint8_t* qh = blk + (with_min ? 4 : 2);
  const uint8_t* qs = five ? qh + 4 : blk + 4;
  for (int l = 0; l < 16; ++l) {
    u.q[l] = static_cast<int8_t>(qs[l] & 15);
    u.q[l + 16] = static_cast<int8_t>(qs[l] >> 4);
  }
  if (five)
    for (int l = 0; l < 32; ++l) {
      u.q[l] = static_cast<int8_t>(u.q[l] | (((qh[l / 8] >> (l % 8)) & 1) << 4));
      if (!with_min) u.q[l] = static_cast<int8_t>(u.q[l] - 16);
    }
  u.s[0] = u.s[1] = d;
  if (with_min) {
    uint16_t mh;
    std::memcpy(&mh, blk + 2, 2);
    u.m[0] = u.m[1] = f16_to_f32(mh);
  }
}

void decode_q2_K(const BlockQ2_K& b, int j, GpuSub32& u) {
  const int h = j / 4, c = j % 4;  // element 128h + 32c + l is bits 2c.. of qs[32h + l]
  for (int l = 0; l < 32; ++l) u.q[l] = static_cast<int8_t>((b.qs[32 * h + l] >> (2 * c)) & 3);
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int k = 0; k < 2; ++k) {
    const int sc = b.scales[2 * j + k];
    u.s[k] = d * static_cast<float>(sc & 15);
    u.m[k] = -dmin * static_cast<float>(sc >> 4);
  }
}

void decode_q3_K(const BlockQ3_K& b, int j, GpuSub32& u) {
  const int h = j / 4, c = j % 4;
  for (int l = 0; l < 32; ++l) {
    const int low = (b.qs[32 * h + l] >> (2 * c)) & 3;
    const int high = (b.hmask[l] >> (4 * h + c)) & 1;
    u.q[l] = static_cast<int8_t>(low - (high ? 0 : 4));
  }
  int sc[16];
  k3_scales(b.scales, sc);
  const float d = f16_to_f32(b.d);
  u.s[0] = d * static_cast<float>(sc[2 * j]);
  u.s[1] = d * static_cast<float>(sc[2 * j + 1]);
}

void from_levels(const LevelsIQ& v, int j, GpuSub32& u) {
  std::memcpy(u.q, v.q + 32 * j, 32);
  u.s[0] = v.d * static_cast<float>(v.mult[2 * j]) * v.factor;
  u.s[1] = v.d * static_cast<float>(v.mult[2 * j + 1]) * v.factor;
}

template <typename Block>
void decode_iq(const uint8_t* blk, GpuSub32* u) {
  Block b;
  std::memcpy(&b, blk, sizeof b);
  const LevelsIQ v = ref::unpack(b);
  for (int j = 0; j < 8; ++j) from_levels(v, j, u[j]);
}

}  // namespace

GpuSub32Format gpu_sub32_format(DType t) {
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: return {32, 1, false};
    case DType::Q5_0: case DType::IQ4_NL: return {32, 0, false};
    case DType::Q2_K: return {256, 2, true};
    case DType::Q3_K: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ1_M: return {256, 0, true};
    case DType::TQ1_0: case DType::TQ2_0: case DType::IQ2_XXS: case DType::IQ3_XXS: case DType::IQ3_S:
    case DType::IQ1_S: case DType::IQ4_XS:
      return {256, 0, false};
    default: return {0, 0, false};
  }
}

void gpu_sub32_decode_block(DType t, const uint8_t* blk, GpuSub32* u) {
  const int subs = gpu_sub32_format(t).block_elems / 32;
  for (int j = 0; j < subs; ++j) u[j] = GpuSub32{};
  switch (t) {
    case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: return decode32(t, blk, u[0]);
    case DType::Q2_K: {
      BlockQ2_K b;
      std::memcpy(&b, blk, sizeof b);
      for (int j = 0; j < 8; ++j) decode_q2_K(b, j, u[j]);
      return;
    }
    case DType::Q3_K: {
      BlockQ3_K b;
      std::memcpy(&b, blk, sizeof b);
      for (int j = 0; j < 8; ++j) decode_q3_K(b, j, u[j]);
      return;
    }
    case DType::IQ4_NL: {
      BlockIQ4_NL b;
      std::memcpy(&b, blk, sizeof b);
      static constexpr int8_t kV[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
      for (int l = 0; l < 16; ++l) {
        u[0].q[l] = kV[b.qs[l] & 15];
        u[0].q[l + 16] = kV[b.qs[l] >> 4];
      }
      u[0].s[0] = u[0].s[1] = f16_to_f32(b.d);
      return;
    }
    case DType::TQ1_0: return decode_iq<BlockTQ1_0>(blk, u);
    case DType::TQ2_0: return decode_iq<BlockTQ2_0>(blk, u);
    case DType::IQ2_XXS: return decode_iq<BlockIQ2_XXS>(blk, u);
    case DType::IQ2_XS: return decode_iq<BlockIQ2_XS>(blk, u);
    case DType::IQ2_S: return decode_iq<BlockIQ2_S>(blk, u);
    case DType::IQ3_XXS: return decode_iq<BlockIQ3_XXS>(blk, u);
    case DType::IQ3_S: return decode_iq<BlockIQ3_S>(blk, u);
    case DType::IQ1_S: return decode_iq<BlockIQ1_S>(blk, u);
    case DType::IQ1_M: return decode_iq<BlockIQ1_M>(blk, u);
    case DType::IQ4_XS: return decode_iq<BlockIQ4_XS>(blk, u);
    default: return;
  }
}

float gpu_sub32_term(const GpuSub32Format& f, const GpuSub32& u, const int8_t* a, float ad, float as) {
  int s0 = 0, s1 = 0, h0 = 0, h1 = 0;
  for (int l = 0; l < 16; ++l) {
    s0 += u.q[l] * a[l];
    s1 += u.q[l + 16] * a[l + 16];
    h0 += a[l];
    h1 += a[l + 16];
  }
  float r = f.two_scales ? ad * (u.s[0] * static_cast<float>(s0) + u.s[1] * static_cast<float>(s1))
                         : ad * u.s[0] * static_cast<float>(s0 + s1);
  if (f.min_kind == 1) r += u.m[0] * as;
  if (f.min_kind == 2) r += ad * (u.m[0] * static_cast<float>(h0) + u.m[1] * static_cast<float>(h1));
  return r;
}

float dot_sub32_gpu_q8(DType t, const uint8_t* row, int64_t n, const int8_t* aq, const float* ad, const float* as) {
  const GpuSub32Format f = gpu_sub32_format(t);
  const int64_t bytes = type_info(t).type_size, subs = f.block_elems / 32;
  float acc = 0.f;
  GpuSub32 u[8];
  for (int64_t item = 0; item < n / 32; ++item) {
    if (item % subs == 0) gpu_sub32_decode_block(t, row + (item / subs) * bytes, u);
    acc += gpu_sub32_term(f, u[item % subs], aq + 32 * item, ad[item], as[item]);
  }
  return acc;
}

}  // namespace ms
