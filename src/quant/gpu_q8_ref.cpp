// Scalar reference of GPU Q8 (quant/gpu_q8.h): the quantizer step for step as
// dev::warp_q8 computes it, and the dots as cuda/quant_dot.cuh's Op*::dot
// combine each block (float operations in the kernels' order; nvcc may fuse
// some into FMAs, so the last bits can still differ).
#include <climits>
#include <cmath>
#include <cstring>
#include <string>

#include "quant/blocks.h"
#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"
#include "quant/half.h"
#include "util/error.h"

namespace ms {
namespace {

// cvt.rni.s32.f32 (__float2int_rn): round half to even, NaN -> 0, out of
// range saturates.
int32_t f2i_rn(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483648.0f) return INT32_MAX;
  if (x <= -2147483648.0f) return INT32_MIN;
  return static_cast<int32_t>(std::nearbyint(x));  // default rounding: to nearest even
}

// warp_sum's butterfly (xor 16, 8, 4, 2, 1) as lane 0 ends up with it. Lanes
// i and i^o add the same two values, so all pairs stay equal and this
// sequence is exactly lane 0's. (It only matters when the sum is inexact,
// i.e. for saturated quants of a subnormal d.)
float butterfly_sum(const float* v32) {
  float v[32];
  std::memcpy(v, v32, sizeof(v));
  for (int o = 16; o > 0; o >>= 1) {
    float t[32];
    for (int i = 0; i < 32; ++i) t[i] = v[i] + v[i ^ o];
    std::memcpy(v, t, sizeof(v));
  }
  return v[0];
}

int q4k_scale(const uint8_t* s, int j) {  // GGUF get_scale_min_k4, scale part
  return j < 4 ? s[j] & 63 : (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
}
int q4k_min(const uint8_t* s, int j) {
  return j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
}

// Q4_K / Q5_K: quants of sub-block j (32 values, 0..15 or 0..31).
void k_quants(const uint8_t* qs, const uint8_t* qh, int j, int* q) {
  const int c = j / 2, hi = j % 2;
  for (int l = 0; l < 32; ++l) {
    q[l] = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
    if (qh) q[l] |= ((qh[l] >> j) & 1) << 4;
  }
}

int idot(const int* q, const int8_t* a, int len) {
  int s = 0;
  for (int l = 0; l < len; ++l) s += q[l] * a[l];
  return s;
}

// Q4_K and Q5_K as OpQ4K/OpQ5K: per sub-block j,
//   (d*sc_j) * a.d_j * idot_j - (dmin*m_j) * a.s_j
// summed per pair of sub-blocks as the GPU's item does.
float dot_k45(const uint8_t* row, int64_t nb, bool q5, const GpuQ8RowConst& a) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * (q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
    uint16_t dh, mh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&mh, blk + 2, 2);
    const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
    const uint8_t* sc = blk + 4;
    const uint8_t* qh = q5 ? blk + 16 : nullptr;
    const uint8_t* qs = q5 ? blk + 48 : blk + 16;
    for (int p = 0; p < 4; ++p) {
      float term[2][2];  // [h][scale part, min part]
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * p + h;
        const int64_t ab = b * 8 + j;
        int q[32];
        k_quants(qs, qh, j, q);
        const int s = idot(q, a.q + ab * 32, 32);
        term[h][0] = d * static_cast<float>(q4k_scale(sc, j)) * a.d[ab] * static_cast<float>(s);
        term[h][1] = dmin * static_cast<float>(q4k_min(sc, j)) * a.s[ab];
      }
      acc += term[0][0] + term[1][0] - term[0][1] - term[1][1];
    }
  }
  return acc;
}

// Q6_K as OpQ6K: 32-element chunk c of half h is activation block 8b+4h+c,
// with two 16-element scale groups: a.d * (d*sc0 * idot0 + d*sc1 * idot1).
// The GPU's item adds chunks c and c+2 of a half together.
float q6k_chunk(const BlockQ6_K* blk, float d, int64_t b, int h, int c, const GpuQ8RowConst& a) {
  int q[32];
  for (int l = 0; l < 32; ++l) {
    const int lo = (blk->ql[64 * h + 32 * (c & 1) + l] >> (4 * (c >> 1))) & 15;
    const int hi = (blk->qh[32 * h + l] >> (2 * c)) & 3;
    q[l] = (lo | (hi << 4)) - 32;
  }
  const int64_t ab = b * 8 + 4 * h + c;
  const int s0 = idot(q, a.q + ab * 32, 16), s1 = idot(q + 16, a.q + ab * 32 + 16, 16);
  const float sc0 = d * static_cast<float>(blk->scales[8 * h + 2 * c]);
  const float sc1 = d * static_cast<float>(blk->scales[8 * h + 2 * c + 1]);
  return a.d[ab] * (sc0 * static_cast<float>(s0) + sc1 * static_cast<float>(s1));
}
float dot_q6k(const uint8_t* row, int64_t nb, const GpuQ8RowConst& a) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(row + b * sizeof(BlockQ6_K));
    const float d = f16_to_f32(blk->d);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 2; ++k) acc += q6k_chunk(blk, d, b, h, k, a) + q6k_chunk(blk, d, b, h, k + 2, a);
  }
  return acc;
}

float dot_q8_0(const uint8_t* row, int64_t nb, const GpuQ8RowConst& a) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row + b * sizeof(BlockQ8_0));
    int s = 0;
    for (int l = 0; l < 32; ++l) s += blk->qs[l] * a.q[b * 32 + l];
    acc += f16_to_f32(blk->d) * a.d[b] * static_cast<float>(s);
  }
  return acc;
}

// Q4_0 as OpQ4_0: sum (q - 8) * a = sum q*a - 8 * sum a.
float dot_q4_0(const uint8_t* row, int64_t nb, const GpuQ8RowConst& a) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(row + b * sizeof(BlockQ4_0));
    int s = 0;
    for (int l = 0; l < 16; ++l)
      s += (blk->qs[l] & 15) * a.q[b * 32 + l] + (blk->qs[l] >> 4) * a.q[b * 32 + 16 + l];
    acc += f16_to_f32(blk->d) * (a.d[b] * static_cast<float>(s) - 8.f * a.s[b]);
  }
  return acc;
}

// MXFP4 as OpMXFP4: E2M1 values doubled are integers; scale 2^(e-127) / 2.
float e8m0_half(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00400000u >> (1 - e);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
float dot_mxfp4(const uint8_t* row, int64_t nb, const GpuQ8RowConst& a) {
  static constexpr int kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const auto* blk = reinterpret_cast<const BlockMXFP4*>(row + b * sizeof(BlockMXFP4));
    int s = 0;
    for (int l = 0; l < 16; ++l)
      s += kE2M1x2[blk->qs[l] & 15] * a.q[b * 32 + l] + kE2M1x2[blk->qs[l] >> 4] * a.q[b * 32 + 16 + l];
    acc += e8m0_half(blk->e) * a.d[b] * static_cast<float>(s);
  }
  return acc;
}

}  // namespace

int64_t gpu_q8_row_bytes(int64_t n) {
  if (n < 0 || n % kGpuQ8Block != 0)
    throw Error("GPU Q8 activations: row of " + std::to_string(n) + " elements is not a multiple of 32");
  return n + n / kGpuQ8Block * 2 * static_cast<int64_t>(sizeof(float));
}

bool gpu_q8_supported(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q8_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::MXFP4:
      return true;
    default:
      return gpu_sub32_format(t).block_elems != 0;
  }
}

void quantize_row_gpu_q8_ref(const float* x, void* dst, int64_t n) {
  const GpuQ8Row r = gpu_q8_row(dst, n);
  for (int64_t b = 0; b < n / kGpuQ8Block; ++b) {
    const float* v = x + b * kGpuQ8Block;
    float amax = NAN;  // fmaxf ignores a NaN operand: stays NaN only if all are
    for (int l = 0; l < kGpuQ8Block; ++l) amax = std::fmax(amax, std::fabs(v[l]));
    const float d = amax / 127.f;
    float qf[kGpuQ8Block];
    for (int l = 0; l < kGpuQ8Block; ++l) {
      const int32_t qi = amax > 0.f ? f2i_rn(v[l] / d) : 0;
      r.q[b * kGpuQ8Block + l] = static_cast<int8_t>(qi);  // low byte, as the GPU's static_cast
      qf[l] = static_cast<float>(qi);
    }
    r.d[b] = d;
    r.s[b] = d * butterfly_sum(qf);
  }
}

float vec_dot_gpu_q8_ref(DType t, int64_t n, const void* w, const void* act) {
  if (!gpu_q8_supported(t))
    throw Error(std::string("GPU Q8 activations: no dot for weights of type ") + type_name(t));
  row_bytes(t, n);  // throws for a partial block
  const auto* row = static_cast<const uint8_t*>(w);
  const GpuQ8RowConst a = gpu_q8_row(act, n);
  switch (t) {
    case DType::Q4_K: return dot_k45(row, n / 256, false, a);
    case DType::Q5_K: return dot_k45(row, n / 256, true, a);
    case DType::Q6_K: return dot_q6k(row, n / 256, a);
    case DType::Q8_0: return dot_q8_0(row, n / 32, a);
    case DType::Q4_0: return dot_q4_0(row, n / 32, a);
    case DType::MXFP4: return dot_mxfp4(row, n / 32, a);
    default: return dot_sub32_gpu_q8(t, row, n, a.q, a.d, a.s);
  }
}

}  // namespace ms
