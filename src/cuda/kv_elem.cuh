// KV cache elements (f16, f32 or q8_0 blocks) as floats, for the attention
// kernels and the cache appends that are templated on the cache's element
// type. F16 halves the cache's bytes; F32 keeps keys and values exactly as
// computed (parity with f32 references); Q8_0 (ggml's block_q8_0: an f16
// scale and 32 int8, 34 bytes per 32 elements) takes 53% of f16's bytes.
//
// A row of head_dim elements is kv_row_units<T>(head_dim) units of T (an
// element, or a block of 32 for Q8_0); kernels that must serve every type
// address rows by units and elements within a row by index (ldg_at).
#pragma once
#include "cuda/common.cuh"
#include "quant/blocks.h"

namespace ms::cuda::dev {

template <class T>
struct KvElem;

// Units of T per row of hd elements.
template <class T>
__host__ __device__ constexpr int kv_row_units(int hd) {
  return hd;
}
template <>
__host__ __device__ constexpr int kv_row_units<BlockQ8_0>(int hd) {
  return hd / QK;
}

template <>
struct KvElem<__half> {
  static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
  // N (2, 4 or 8) consecutive elements at p, aligned to N * 2 bytes. Plain
  // loads (shared or global memory).
  template <int N>
  static __device__ __forceinline__ void load(const __half* p, float* f) {
    static_assert(N == 2 || N == 4 || N == 8, "2, 4 or 8 elements");
    if constexpr (N == 2) {
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(p));
      f[0] = a.x; f[1] = a.y;
    } else if constexpr (N == 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      unpack(u.x, f);
      unpack(u.y, f + 2);
    } else {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      unpack(u.x, f); unpack(u.y, f + 2); unpack(u.z, f + 4); unpack(u.w, f + 6);
    }
  }
  // As load, through the read-only data path (global memory not written by the kernel).
  template <int N>
  static __device__ __forceinline__ void ldg(const __half* p, float* f) {
    if constexpr (N == 2) {
      const uint32_t u = __ldg(reinterpret_cast<const unsigned int*>(p));
      unpack(u, f);
    } else if constexpr (N == 4) {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
      unpack(u.x, f);
      unpack(u.y, f + 2);
    } else {
      static_assert(N == 8, "2, 4 or 8 elements");
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
      unpack(u.x, f); unpack(u.y, f + 2); unpack(u.z, f + 4); unpack(u.w, f + 6);
    }
  }

  // N elements from element e of a row (e a multiple of N).
  template <int N>
  static __device__ __forceinline__ void ldg_at(const __half* row, int e, float* f) {
    ldg<N>(row + e, f);
  }

 private:
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w));
    f[0] = a.x; f[1] = a.y;
  }
};

template <>
struct KvElem<float> {
  static __device__ __forceinline__ float from_float(float x) { return x; }
  template <int N>
  static __device__ __forceinline__ void load(const float* p, float* f) {
    static_assert(N == 2 || N == 4 || N == 8, "2, 4 or 8 elements");
    if constexpr (N == 2) {
      const float2 a = *reinterpret_cast<const float2*>(p);
      f[0] = a.x; f[1] = a.y;
    } else {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        const float4 a = *reinterpret_cast<const float4*>(p + i);
        f[i] = a.x; f[i + 1] = a.y; f[i + 2] = a.z; f[i + 3] = a.w;
      }
    }
  }
  template <int N>
  static __device__ __forceinline__ void ldg(const float* p, float* f) {
    static_assert(N == 2 || N == 4 || N == 8, "2, 4 or 8 elements");
    if constexpr (N == 2) {
      const float2 a = __ldg(reinterpret_cast<const float2*>(p));
      f[0] = a.x; f[1] = a.y;
    } else {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(p + i));
        f[i] = a.x; f[i + 1] = a.y; f[i + 2] = a.z; f[i + 3] = a.w;
      }
    }
  }
  template <int N>
  static __device__ __forceinline__ void ldg_at(const float* row, int e, float* f) {
    ldg<N>(row + e, f);
  }
};

// Q8_0 blocks: x = d * q. Blocks are 34 bytes, so only 2-byte alignment
// holds for the quants: they are read as 16-bit pairs.
template <>
struct KvElem<BlockQ8_0> {
  // N (2, 4 or 8) elements from element e of a row (e a multiple of N, so
  // they share one block), through the read-only data path.
  template <int N>
  static __device__ __forceinline__ void ldg_at(const BlockQ8_0* row, int e, float* f) {
    static_assert(N == 2 || N == 4 || N == 8, "2, 4 or 8 elements");
    const BlockQ8_0* b = row + e / QK;
    const float d = __half2float(__ushort_as_half(__ldg(&b->d)));
    const auto* qs = reinterpret_cast<const unsigned short*>(b->qs + e % QK);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const unsigned short u = __ldg(qs + i);
      f[2 * i] = d * static_cast<float>(static_cast<int8_t>(u & 0xff));
      f[2 * i + 1] = d * static_cast<float>(static_cast<int8_t>(u >> 8));
    }
  }
};

}  // namespace ms::cuda::dev
