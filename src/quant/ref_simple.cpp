// Scalar reference of the float formats (F32, F16, BF16) and of the 32-wide
// block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, MXFP4).
//
// Each block format is read through one unpack function that turns a block
// into 32 integer levels q and the pair (d, m) with x = d*q + m: dequant and
// dot products share it, so the layout is written down once per format (and
// checked on hand-built blocks by the tests).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/ref_formats.h"
#include "quant/ref_kquant_search.h"

namespace ms::ref {

const int8_t kE2M1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float e8m0_half(uint8_t e) {
  // 2^(e-128): a normal float for e >= 2, the subnormals 2^-128, 2^-127 below.
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

struct Levels32 {
  int8_t q[QK];
  float d = 0;  // x = d*q + m
  float m = 0;
  bool affine = false;  // has m (Q4_1, Q5_1); else x = d*q, keeping d*0's sign (-0 for d < 0)
};

// ------------------------------------------------------------------ unpack

// Low nibble of qs[j] is element j, high nibble element j+16.
void unpack_nibbles(const uint8_t* qs, int8_t* q) {
  for (int j = 0; j < QK / 2; ++j) {
    q[j] = static_cast<int8_t>(qs[j] & 0xF);
    q[j + QK / 2] = static_cast<int8_t>(qs[j] >> 4);
  }
}

// The 5th bit of element j is bit j of qh read as a little-endian u32.
void add_fifth_bits(const uint8_t* qh, int8_t* q) {
  for (int j = 0; j < QK; ++j) q[j] = static_cast<int8_t>(q[j] | (((qh[j / 8] >> (j % 8)) & 1) << 4));
}

Levels32 unpack(const BlockQ4_0& b) {
  Levels32 u;
  unpack_nibbles(b.qs, u.q);
  for (int8_t& v : u.q) v = static_cast<int8_t>(v - 8);
  u.d = f16_to_f32(b.d);
  return u;
}
Levels32 unpack(const BlockQ4_1& b) {
  Levels32 u;
  u.affine = true;
  unpack_nibbles(b.qs, u.q);
  u.d = f16_to_f32(b.d);
  u.m = f16_to_f32(b.m);
  return u;
}
Levels32 unpack(const BlockQ5_0& b) {
  Levels32 u;
  unpack_nibbles(b.qs, u.q);
  add_fifth_bits(b.qh, u.q);
  for (int8_t& v : u.q) v = static_cast<int8_t>(v - 16);
  u.d = f16_to_f32(b.d);
  return u;
}
Levels32 unpack(const BlockQ5_1& b) {
  Levels32 u;
  u.affine = true;
  unpack_nibbles(b.qs, u.q);
  add_fifth_bits(b.qh, u.q);
  u.d = f16_to_f32(b.d);
  u.m = f16_to_f32(b.m);
  return u;
}
Levels32 unpack(const BlockQ8_0& b) {
  Levels32 u;
  std::memcpy(u.q, b.qs, QK);
  u.d = f16_to_f32(b.d);
  return u;
}
Levels32 unpack(const BlockQ8_1& b) {
  Levels32 u;
  std::memcpy(u.q, b.qs, QK);
  u.d = f16_to_f32(b.d);
  return u;
}
Levels32 unpack(const BlockMXFP4& b) {
  Levels32 u;
  unpack_nibbles(b.qs, u.q);
  for (int8_t& v : u.q) v = kE2M1Doubled[v];
  u.d = e8m0_half(b.e);
  return u;
}

// ------------------------------------------------------------------ pack

void pack_nibbles(const int8_t* L, uint8_t* qs) {  // L in 0..15
  for (int j = 0; j < QK / 2; ++j) qs[j] = static_cast<uint8_t>((L[j] & 0xF) | ((L[j + QK / 2] & 0xF) << 4));
}
void pack_fifth_bits(const int8_t* L, uint8_t* qh) {  // L in 0..31
  std::memset(qh, 0, 4);
  for (int j = 0; j < QK; ++j) qh[j / 8] = static_cast<uint8_t>(qh[j / 8] | (((L[j] >> 4) & 1) << (j % 8)));
}

// ------------------------------------------------------------------ generic row loops

template <typename Block>
void dequantize_blocks(const void* src, float* dst, int64_t n) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / QK; ++i) {
    const Levels32 u = unpack(b[i]);
    for (int j = 0; j < QK; ++j) dst[i * QK + j] = u.affine ? u.d * u.q[j] + u.m : u.d * u.q[j];
  }
}

// Activations of the 32-wide dots: levels, their scale, and (Q8_1) d*sum(q).
struct Act32 {
  const int8_t* q;
  float d;
  float s;
};
Act32 act(const BlockQ8_0& b) { return {b.qs, f16_to_f32(b.d), 0.0f}; }
Act32 act(const BlockQ8_1& b) { return {b.qs, f16_to_f32(b.d), f16_to_f32(b.s)}; }

// Per block: int32 sum of level products, scaled by d_w*d_a; the offset m of
// the affine formats multiplies the activations' sum, which Q8_1 carries.
template <typename Block, typename ActBlock>
float dot_blocks(int64_t n, const void* w, const void* a) {
  const Block* wb = static_cast<const Block*>(w);
  const ActBlock* ab = static_cast<const ActBlock*>(a);
  double total = 0;
  for (int64_t i = 0; i < n / QK; ++i) {
    const Levels32 u = unpack(wb[i]);
    const Act32 y = act(ab[i]);
    int32_t isum = 0;
    for (int j = 0; j < QK; ++j) isum += static_cast<int32_t>(u.q[j]) * y.q[j];
    float block = (u.d * y.d) * static_cast<float>(isum);
    if (u.m != 0) block += u.m * y.s;
    total += block;
  }
  return static_cast<float>(total);
}

// ------------------------------------------------------------------ quantizers

float abs_max(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}
float signed_abs_max(const float* x, int n) {  // the value of largest magnitude
  float m = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  return m;
}

// Symmetric formats Q4_0 / Q5_0: the value of largest magnitude lands on the
// longer (negative) end -nneg, so the scale carries its sign.
template <typename Block>
void quantize_symmetric(const float* src, void* dst, int64_t n, int nneg) {
  Block* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) {
    const float* x = src + i * QK;
    b[i].d = f32_to_f16(signed_abs_max(x, QK) / -static_cast<float>(nneg));
    int8_t L[QK];
    levels_symmetric(x, QK, f16_to_f32(b[i].d), nneg, nneg - 1, L);
    for (int8_t& v : L) v = static_cast<int8_t>(v + nneg);
    pack_nibbles(L, b[i].qs);
    if constexpr (std::is_same_v<Block, BlockQ5_0>) pack_fifth_bits(L, b[i].qh);
  }
}

// Affine formats Q4_1 / Q5_1: min..max over levels 0..nmax.
template <typename Block>
void quantize_min_max(const float* src, void* dst, int64_t n, int nmax) {
  Block* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) {
    const float* x = src + i * QK;
    float lo = x[0], hi = x[0];
    for (int j = 0; j < QK; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    b[i].d = f32_to_f16((hi - lo) / nmax);
    b[i].m = f32_to_f16(lo);
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    int8_t L[QK];
    for (int j = 0; j < QK; ++j) {
      const float v = (x[j] - m) * inv;
      L[j] = static_cast<int8_t>(std::clamp(round_even(std::isfinite(v) ? v : 0.0f), 0, nmax));
    }
    pack_nibbles(L, b[i].qs);
    if constexpr (std::is_same_v<Block, BlockQ5_1>) pack_fifth_bits(L, b[i].qh);
  }
}

// The activation rule of ref_formats.h; returns the float d (before f16).
float quantize_act32(const float* x, int8_t* q) {
  const float d = abs_max(x, QK) / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < QK; ++j) {
    const float v = x[j] * id;
    q[j] = static_cast<int8_t>(std::clamp(round_even(std::isfinite(v) ? v : 0.0f), -127, 127));
  }
  return d;
}

// Index of the E2M1 value nearest to v (v in units of the block scale,
// doubled to match kE2M1Doubled).
int nearest_e2m1(float v2) {
  int best = 0;
  float best_d = std::fabs(v2);
  for (int k = 1; k < 16; ++k) {
    const float d = std::fabs(v2 - kE2M1Doubled[k]);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

}  // namespace

// ------------------------------------------------------------------ float formats

void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
float vec_dot_f32(int64_t n, const void* w, const void* a) {
  const float* x = static_cast<const float*>(w);
  const float* y = static_cast<const float*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return static_cast<float>(s);
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
}
void quantize_f16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
}
float vec_dot_f16(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const float* y = static_cast<const float*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(f16_to_f32(x[i])) * y[i];
  return static_cast<float>(s);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}
float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const float* y = static_cast<const float*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(bf16_to_f32(x[i])) * y[i];
  return static_cast<float>(s);
}

// ------------------------------------------------------------------ 32-wide blocks

void dequantize_q4_0(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ4_0>(s, d, n); }
void dequantize_q4_1(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ4_1>(s, d, n); }
void dequantize_q5_0(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ5_0>(s, d, n); }
void dequantize_q5_1(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ5_1>(s, d, n); }
void dequantize_q8_0(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ8_0>(s, d, n); }
void dequantize_q8_1(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ8_1>(s, d, n); }
void dequantize_mxfp4(const void* s, float* d, int64_t n) { dequantize_blocks<BlockMXFP4>(s, d, n); }

float vec_dot_q4_0(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ4_0, BlockQ8_0>(n, w, a); }
float vec_dot_q4_1(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ4_1, BlockQ8_1>(n, w, a); }
float vec_dot_q5_0(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ5_0, BlockQ8_0>(n, w, a); }
float vec_dot_q5_1(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ5_1, BlockQ8_1>(n, w, a); }
float vec_dot_q8_0(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ8_0, BlockQ8_0>(n, w, a); }
float vec_dot_q8_1(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ8_1, BlockQ8_1>(n, w, a); }
float vec_dot_mxfp4(int64_t n, const void* w, const void* a) { return dot_blocks<BlockMXFP4, BlockQ8_0>(n, w, a); }

void quantize_q4_0(const float* s, void* d, int64_t n) { quantize_symmetric<BlockQ4_0>(s, d, n, 8); }
void quantize_q5_0(const float* s, void* d, int64_t n) { quantize_symmetric<BlockQ5_0>(s, d, n, 16); }
void quantize_q4_1(const float* s, void* d, int64_t n) { quantize_min_max<BlockQ4_1>(s, d, n, 15); }
void quantize_q5_1(const float* s, void* d, int64_t n) { quantize_min_max<BlockQ5_1>(s, d, n, 31); }

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) b[i].d = f32_to_f16(quantize_act32(src + i * QK, b[i].qs));
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  BlockQ8_1* b = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) {
    const float d = quantize_act32(src + i * QK, b[i].qs);
    int32_t sum = 0;
    for (int j = 0; j < QK; ++j) sum += b[i].qs[j];
    b[i].d = f32_to_f16(d);
    b[i].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

// MXFP4: the scale is a power of two. With 2^e0 the largest one putting the
// block's max-abs at 4..8 (so values above 6 clip to 6) or 2^(e0+1) (no
// clipping, half the resolution), keep whichever has the smaller squared error.
void quantize_mxfp4(const float* src, void* dst, int64_t n) {
  BlockMXFP4* b = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) {
    const float* x = src + i * QK;
    const float amax = abs_max(x, QK);
    int best_e = 0;
    if (amax > 0 && std::isfinite(amax)) {
      const int e0 = std::ilogb(amax) - 2 + 127;  // biased exponent of the scale
      double best_err = INFINITY;
      for (int e = e0; e <= e0 + 1; ++e) {
        const int eb = std::clamp(e, 0, 254);
        const float half = e8m0_half(static_cast<uint8_t>(eb));
        double err = 0;
        for (int j = 0; j < QK; ++j) {
          const double r = static_cast<double>(x[j]) - kE2M1Doubled[nearest_e2m1(x[j] / half)] * static_cast<double>(half);
          err += r * r;
        }
        if (err < best_err) {
          best_err = err;
          best_e = eb;
        }
      }
    }
    b[i].e = static_cast<uint8_t>(best_e);
    const float half = e8m0_half(b[i].e);
    int8_t L[QK];
    for (int j = 0; j < QK; ++j) L[j] = static_cast<int8_t>(amax > 0 ? nearest_e2m1(x[j] / half) : 0);
    pack_nibbles(L, b[i].qs);
  }
}

}  // namespace ms::ref
