// Per-format dot products of one "item" of a weight row (a fixed run of
// elements: 32 or 64 for the quantized formats, 8 or 1 for the float ones)
// against NV activation vectors. The matvec kernel strides items over the
// lanes of a row; these functions hold everything format-specific.
//
// Quantized formats take Q8 activations (int8 quants per block of 32 plus
// {d, d*sum(q)}), and use dp4a: the weight's integer quants are unpacked into
// int8x4 words, dotted with the activation's int8x4 words, and the block
// scales are applied once per 16/32 elements. Layouts are those of
// quant/blocks.h (GGUF).
#pragma once
#include "cuda/common.cuh"

namespace ms::cuda::dev {

template <int NV>
struct Acts {
  const int8_t* q[NV];   // Q8 quants of vector v (element 0)
  const float2* ds[NV];  // {d, d*sum} of vector v's block 0
  const float* f[NV];    // f32 vector v (float weight formats)
};

// Sum of dp4a over 4 int8x4 weight words and 4 activation words.
__device__ __forceinline__ int dot4(int w0, int w1, int w2, int w3, const int4& a) {
  return __dp4a(w3, a.w, __dp4a(w2, a.z, __dp4a(w1, a.y, __dp4a(w0, a.x, 0))));
}
__device__ __forceinline__ int4 ld_act16(const int8_t* p) {
  return __ldg(reinterpret_cast<const int4*>(p));
}
__device__ __forceinline__ uint32_t byte_of(uint32_t w, int k) { return (w >> (8 * k)) & 0xffu; }

// ---------------------------------------------------------------- Q4_K
// Item = a pair of 32-element sub-blocks (2p, 2p+1) of a 256-element
// super-block; their quants share 32 bytes of qs (low / high nibbles).
struct OpQ4K {
  static constexpr bool kQ8 = true;
  static constexpr int kItem = 64;
  static constexpr int kBlockBytes = 144;

  template <int NV>
  static __device__ __forceinline__ void dot(const uint8_t* row, int item, const Acts<NV>& a, float* acc) {
    const int b = item >> 2, p = item & 3;
    const uint8_t* blk = row + b * kBlockBytes;
    const uint4 q0 = ld16(blk + 16 + 32 * p), q1 = ld16(blk + 32 + 32 * p);
    const uint32_t dd = ld4(blk), s0 = ld4(blk + 4), s1 = ld4(blk + 8), s2 = ld4(blk + 12);
    const float d = f16_bits_to_f32(dd), dmin = f16_bits_to_f32(dd >> 16);
    // 6-bit scale and min of sub-blocks j = 2p + {0, 1} (GGUF get_scale_min_k4)
    const int j = (2 * p) & 3;
    float sc[2], mn[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t s, m;
      if (p < 2) {
        s = byte_of(s0, j + h) & 63;
        m = byte_of(s1, j + h) & 63;
      } else {
        s = (byte_of(s2, j + h) & 15) | ((byte_of(s0, j + h) >> 6) << 4);
        m = (byte_of(s2, j + h) >> 4) | ((byte_of(s1, j + h) >> 6) << 4);
      }
      sc[h] = d * static_cast<float>(s);
      mn[h] = dmin * static_cast<float>(m);
    }
    const uint32_t w[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    int lo[8], hi[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      lo[i] = static_cast<int>(w[i] & 0x0f0f0f0fu);
      hi[i] = static_cast<int>((w[i] >> 4) & 0x0f0f0f0fu);
    }
    const int ab = b * 8 + 2 * p;  // activation block of sub-block 2p
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int8_t* aq = a.q[v] + ab * 32;
      const int4 a0 = ld_act16(aq), a1 = ld_act16(aq + 16), a2 = ld_act16(aq + 32), a3 = ld_act16(aq + 48);
      const int dl = dot4(lo[4], lo[5], lo[6], lo[7], a1) + dot4(lo[0], lo[1], lo[2], lo[3], a0);
      const int dh = dot4(hi[4], hi[5], hi[6], hi[7], a3) + dot4(hi[0], hi[1], hi[2], hi[3], a2);
      const float2 dsl = __ldg(a.ds[v] + ab), dsh = __ldg(a.ds[v] + ab + 1);
      acc[v] += sc[0] * dsl.x * static_cast<float>(dl) + sc[1] * dsh.x * static_cast<float>(dh) -
                mn[0] * dsl.y - mn[1] * dsh.y;
    }
  }
};

// ---------------------------------------------------------------- Q5_K
// As Q4_K, plus the 5th bit of element l of sub-block j in bit j of qh[l].
struct OpQ5K {
  static constexpr bool kQ8 = true;
  static constexpr int kItem = 64;
  static constexpr int kBlockBytes = 176;

  template <int NV>
  static __device__ __forceinline__ void dot(const uint8_t* row, int item, const Acts<NV>& a, float* acc) {
    const int b = item >> 2, p = item & 3;
    const uint8_t* blk = row + b * kBlockBytes;
    const uint4 q0 = ld16(blk + 48 + 32 * p), q1 = ld16(blk + 64 + 32 * p);
    const uint4 h0 = ld16(blk + 16), h1 = ld16(blk + 32);
    const uint32_t dd = ld4(blk), s0 = ld4(blk + 4), s1 = ld4(blk + 8), s2 = ld4(blk + 12);
    const float d = f16_bits_to_f32(dd), dmin = f16_bits_to_f32(dd >> 16);
    const int j = (2 * p) & 3;
    float sc[2], mn[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t s, m;
      if (p < 2) {
        s = byte_of(s0, j + h) & 63;
        m = byte_of(s1, j + h) & 63;
      } else {
        s = (byte_of(s2, j + h) & 15) | ((byte_of(s0, j + h) >> 6) << 4);
        m = (byte_of(s2, j + h) >> 4) | ((byte_of(s1, j + h) >> 6) << 4);
      }
      sc[h] = d * static_cast<float>(s);
      mn[h] = dmin * static_cast<float>(m);
    }
    const uint32_t w[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    const uint32_t qh[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    int lo[8], hi[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      lo[i] = static_cast<int>((w[i] & 0x0f0f0f0fu) | (((qh[i] >> (2 * p)) & 0x01010101u) << 4));
      hi[i] = static_cast<int>(((w[i] >> 4) & 0x0f0f0f0fu) | (((qh[i] >> (2 * p + 1)) & 0x01010101u) << 4));
    }
    const int ab = b * 8 + 2 * p;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int8_t* aq = a.q[v] + ab * 32;
      const int4 a0 = ld_act16(aq), a1 = ld_act16(aq + 16), a2 = ld_act16(aq + 32), a3 = ld_act16(aq + 48);
      const int dl = dot4(lo[4], lo[5], lo[6], lo[7], a1) + dot4(lo[0], lo[1], lo[2], lo[3], a0);
      const int dh = dot4(hi[4], hi[5], hi[6], hi[7], a3) + dot4(hi[0], hi[1], hi[2], hi[3], a2);
      const float2 dsl = __ldg(a.ds[v] + ab), dsh = __ldg(a.ds[v] + ab + 1);
      acc[v] += sc[0] * dsl.x * static_cast<float>(dl) + sc[1] * dsh.x * static_cast<float>(dh) -
                mn[0] * dsl.y - mn[1] * dsh.y;
    }
  }
};

// ---------------------------------------------------------------- Q6_K
// Super-block of two halves of 128; in half h, 32-element chunk k (0..3) has
// low 4 bits in ql[64h + 32(k&1) + l] (nibble k>>1) and high 2 bits in
// qh[32h + l] >> 2k; 16-element scale groups sc[8h + 2k + l/16]; x = d*sc*(q-32).
// Item = chunks k and k+2 of a half (they share ql and qh bytes). Blocks are
// 210 bytes, so only 2-byte aligned.
struct OpQ6K {
  static constexpr bool kQ8 = true;
  static constexpr int kItem = 64;
  static constexpr int kBlockBytes = 210;

  template <int NV>
  static __device__ __forceinline__ void dot(const uint8_t* row, int item, const Acts<NV>& a, float* acc) {
    const int b = item >> 2, t = item & 3, h = t >> 1, k = t & 1;
    const uint8_t* blk = row + b * kBlockBytes;
    const uint8_t* ql = blk + 64 * h + 32 * k;
    const uint8_t* qh = blk + 128 + 32 * h;
    const uint32_t sa = ld2(blk + 192 + 8 * h + 2 * k), sb = ld2(blk + 192 + 8 * h + 2 * k + 4);
    const float d = f16_bits_to_f32(ld2(blk + 208));
    const float sA0 = d * static_cast<float>(static_cast<int8_t>(sa & 0xff));
    const float sA1 = d * static_cast<float>(static_cast<int8_t>(sa >> 8));
    const float sB0 = d * static_cast<float>(static_cast<int8_t>(sb & 0xff));
    const float sB1 = d * static_cast<float>(static_cast<int8_t>(sb >> 8));
    int qa[8], qb[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t l4 = ld4_a2(ql + 4 * i), h2 = ld4_a2(qh + 4 * i);
      const uint32_t va = (l4 & 0x0f0f0f0fu) | (((h2 >> (2 * k)) & 0x03030303u) << 4);
      const uint32_t vb = ((l4 >> 4) & 0x0f0f0f0fu) | (((h2 >> (2 * k + 4)) & 0x03030303u) << 4);
      qa[i] = static_cast<int>(__vsub4(va, 0x20202020u));
      qb[i] = static_cast<int>(__vsub4(vb, 0x20202020u));
    }
    const int abA = b * 8 + 4 * h + k, abB = abA + 2;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int8_t* pA = a.q[v] + abA * 32;
      const int8_t* pB = a.q[v] + abB * 32;
      const int dA0 = dot4(qa[0], qa[1], qa[2], qa[3], ld_act16(pA));
      const int dA1 = dot4(qa[4], qa[5], qa[6], qa[7], ld_act16(pA + 16));
      const int dB0 = dot4(qb[0], qb[1], qb[2], qb[3], ld_act16(pB));
      const int dB1 = dot4(qb[4], qb[5], qb[6], qb[7], ld_act16(pB + 16));
      const float dA = __ldg(a.ds[v] + abA).x, dB = __ldg(a.ds[v] + abB).x;
      acc[v] += dA * (sA0 * static_cast<float>(dA0) + sA1 * static_cast<float>(dA1)) +
                dB * (sB0 * static_cast<float>(dB0) + sB1 * static_cast<float>(dB1));
    }
  }
};

// ---------------------------------------------------------------- Q8_0
struct OpQ8_0 {
  static constexpr bool kQ8 = true;
  static constexpr int kItem = 32;
  static constexpr int kBlockBytes = 34;

  template <int NV>
  static __device__ __forceinline__ void dot(const uint8_t* row, int item, const Acts<NV>& a, float* acc) {
    const uint8_t* blk = row + item * kBlockBytes;
    const float d = f16_bits_to_f32(ld2(blk));
    int q[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = static_cast<int>(ld4_a2(blk + 2 + 4 * i));
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int8_t* aq = a.q[v] + item * 32;
      const int s = dot4(q[0], q[1], q[2], q[3], ld_act16(aq)) + dot4(q[4], q[5], q[6], q[7], ld_act16(aq + 16));
      acc[v] += d * __ldg(a.ds[v] + item).x * static_cast<float>(s);
    }
  }
};

// ---------------------------------------------------------------- Q4_0
// x = d * (q - 8); qs[j] low nibble = element j, high nibble = element j+16.
struct OpQ4_0 {
  static constexpr bool kQ8 = true;
  static constexpr int kItem = 32;
  static constexpr int kBlockBytes = 18;

  template <int NV>
  static __device__ __forceinline__ void dot(const uint8_t* row, int item, const Acts<NV>& a, float* acc) {
    const uint8_t* blk = row + item * kBlockBytes;
    const float d = f16_bits_to_f32(ld2(blk));
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld4_a2(blk + 2 + 4 * i);
      lo[i] = static_cast<int>(w & 0x0f0f0f0fu);
      hi[i] = static_cast<int>((w >> 4) & 0x0f0f0f0fu);
    }
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int8_t* aq = a.q[v] + item * 32;
      const int s = dot4(lo[0], lo[1], lo[2], lo[3], ld_act16(aq)) + dot4(hi[0], hi[1], hi[2], hi[3], ld_act16(aq + 16));
      const float2 ds = __ldg(a.ds[v] + item);
      // sum (q - 8) * a = sum q*a - 8 * sum a
      acc[v] += d * (ds.x * static_cast<float>(s) - 8.f * ds.y);
    }
  }
};

// ---------------------------------------------------------------- MXFP4
// E8M0 block exponent e, E2M1 nibbles (same nibble order as Q4_0). The E2M1
// values doubled are the integers {0,1,2,3,4,6,8,12} (sign in bit 3), so the
// dot runs in int8 and the scale is 2^(e-127) / 2.
__device__ __forceinline__ int mxfp4_to_int8x4(uint32_t nib) {  // 4 codes in the low nibbles of bytes
  const uint32_t mag_idx = nib & 0x07070707u;
  const uint32_t sel = ((mag_idx | (mag_idx >> 4)) & 0xffu) | ((((mag_idx >> 16) | (mag_idx >> 20)) & 0xffu) << 8);
  const uint32_t mag = __byte_perm(0x03020100u, 0x0c080604u, sel);
  const uint32_t neg_mask = ((nib >> 3) & 0x01010101u) * 0xffu;
  const uint32_t neg = __vsub4(0u, mag);
  return static_cast<int>((mag & ~neg_mask) | (neg & neg_mask));
}

struct OpMXFP4 {
  static constexpr bool kQ8 = true;
  static constexpr int kItem = 32;
  static constexpr int kBlockBytes = 17;

  template <int NV>
  static __device__ __forceinline__ void dot(const uint8_t* row, int item, const Acts<NV>& a, float* acc) {
    const uint8_t* blk = row + item * kBlockBytes;
    const float scale = e8m0_half(__ldg(blk));
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld4_a1(blk + 1 + 4 * i);
      lo[i] = mxfp4_to_int8x4(w & 0x0f0f0f0fu);
      hi[i] = mxfp4_to_int8x4((w >> 4) & 0x0f0f0f0fu);
    }
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int8_t* aq = a.q[v] + item * 32;
      const int s = dot4(lo[0], lo[1], lo[2], lo[3], ld_act16(aq)) + dot4(hi[0], hi[1], hi[2], hi[3], ld_act16(aq + 16));
      acc[v] += scale * __ldg(a.ds[v] + item).x * static_cast<float>(s);
    }
  }
};

// ---------------------------------------------------------------- float formats
// F16 / BF16 / F32 weights with f32 activations. VEC: item = 8 elements read
// with 16-byte loads (needs cols % 8 == 0 and aligned rows); else 1 element.
template <int kType, bool VEC>  // kType: 0 = F32, 1 = F16, 2 = BF16
struct OpFloat {
  static constexpr bool kQ8 = false;
  static constexpr int kItem = VEC ? 8 : 1;
  static constexpr int kElemBytes = kType == 0 ? 4 : 2;
  static constexpr int kBlockBytes = kElemBytes;

  static __device__ __forceinline__ float2 pair(uint32_t w) {
    if constexpr (kType == 1) {
      return __half22float2(*reinterpret_cast<const __half2*>(&w));
    } else {
      return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    }
  }

  template <int NV>
  static __device__ __forceinline__ void dot(const uint8_t* row, int item, const Acts<NV>& a, float* acc) {
    if constexpr (VEC) {
      float w[8];
      if constexpr (kType == 0) {
        const uint4 u0 = ld16(row + item * 32), u1 = ld16(row + item * 32 + 16);
        w[0] = __uint_as_float(u0.x); w[1] = __uint_as_float(u0.y);
        w[2] = __uint_as_float(u0.z); w[3] = __uint_as_float(u0.w);
        w[4] = __uint_as_float(u1.x); w[5] = __uint_as_float(u1.y);
        w[6] = __uint_as_float(u1.z); w[7] = __uint_as_float(u1.w);
      } else {
        const uint4 u = ld16(row + item * 16);
        const float2 p0 = pair(u.x), p1 = pair(u.y), p2 = pair(u.z), p3 = pair(u.w);
        w[0] = p0.x; w[1] = p0.y; w[2] = p1.x; w[3] = p1.y;
        w[4] = p2.x; w[5] = p2.y; w[6] = p3.x; w[7] = p3.y;
      }
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        const float4 x0 = __ldg(reinterpret_cast<const float4*>(a.f[v] + item * 8));
        const float4 x1 = __ldg(reinterpret_cast<const float4*>(a.f[v] + item * 8 + 4));
        acc[v] += w[0] * x0.x + w[1] * x0.y + w[2] * x0.z + w[3] * x0.w +
                  w[4] * x1.x + w[5] * x1.y + w[6] * x1.z + w[7] * x1.w;
      }
    } else {
      float w;
      if constexpr (kType == 0) {
        w = __ldg(reinterpret_cast<const float*>(row) + item);
      } else if constexpr (kType == 1) {
        w = f16_bits_to_f32(ld2(row + 2 * item));
      } else {
        w = bf16_bits_to_f32(ld2(row + 2 * item));
      }
#pragma unroll
      for (int v = 0; v < NV; ++v) acc[v] += w * __ldg(a.f[v] + item);
    }
  }
};

}  // namespace ms::cuda::dev

// The formats read through sub-block decoders (OpSub32).
#include "cuda/quant_sub32.cuh"
