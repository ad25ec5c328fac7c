// Element-wise dequantization on the device: value i (0..block_size-1) of one
// block, straight from the format definitions of quant/blocks.h. Used where
// elements are needed one at a time (embedding rows, GEMM tiles); the matvec
// path decodes whole items instead (quant_dot.cuh).
#pragma once
#include "cuda/common.cuh"
#include "cuda/quant_sub32_iq.cuh"
#include "quant/types.h"

namespace ms::cuda::dev {

__device__ __forceinline__ uint32_t u8(const uint8_t* p) { return __ldg(p); }

// 6-bit scale / min of sub-block j (0..7) from the 12 packed bytes of Q4_K / Q5_K.
__device__ __forceinline__ void k_scale_min(const uint8_t* s, int j, uint32_t& sc, uint32_t& m) {
  if (j < 4) {
    sc = u8(s + j) & 63;
    m = u8(s + j + 4) & 63;
  } else {
    sc = (u8(s + j + 4) & 15) | ((u8(s + j - 4) >> 6) << 4);
    m = (u8(s + j + 4) >> 4) | ((u8(s + j) >> 6) << 4);
  }
}

template <DType T>
struct Dequant;

template <>
struct Dequant<DType::F32> {
  static constexpr int kBlock = 1, kBytes = 4;
  static __device__ __forceinline__ float at(const uint8_t* b, int) { return __ldg(reinterpret_cast<const float*>(b)); }
};
template <>
struct Dequant<DType::F16> {
  static constexpr int kBlock = 1, kBytes = 2;
  static __device__ __forceinline__ float at(const uint8_t* b, int) { return f16_bits_to_f32(ld2(b)); }
};
template <>
struct Dequant<DType::BF16> {
  static constexpr int kBlock = 1, kBytes = 2;
  static __device__ __forceinline__ float at(const uint8_t* b, int) { return bf16_bits_to_f32(ld2(b)); }
};
template <>
struct Dequant<DType::Q8_0> {
  static constexpr int kBlock = 32, kBytes = 34;
  static __device__ __forceinline__ float at(const uint8_t* b, int i) {
    return f16_bits_to_f32(ld2(b)) * static_cast<float>(static_cast<int8_t>(u8(b + 2 + i)));
  }
};
template <>
struct Dequant<DType::Q4_0> {
  static constexpr int kBlock = 32, kBytes = 18;
  static __device__ __forceinline__ float at(const uint8_t* b, int i) {
    const uint32_t byte = u8(b + 2 + (i & 15));
    const int q = static_cast<int>(i < 16 ? byte & 15 : byte >> 4) - 8;
    return f16_bits_to_f32(ld2(b)) * static_cast<float>(q);
  }
};
template <>
struct Dequant<DType::MXFP4> {
  static constexpr int kBlock = 32, kBytes = 17;
  static __device__ __forceinline__ float at(const uint8_t* b, int i) {
    const uint32_t byte = u8(b + 1 + (i & 15));
    const uint32_t code = i < 16 ? byte & 15 : byte >> 4;
    const int mag2[8] = {0, 1, 2, 3, 4, 6, 8, 12};  // E2M1 magnitudes, doubled
    const float v = static_cast<float>(mag2[code & 7]);
    return (code & 8 ? -v : v) * e8m0_half(u8(b));
  }
};
template <>
struct Dequant<DType::Q4_K> {
  static constexpr int kBlock = 256, kBytes = 144;
  static __device__ __forceinline__ float at(const uint8_t* b, int i) {
    const int j = i / 32, l = i % 32;
    uint32_t sc, m;
    k_scale_min(b + 4, j, sc, m);
    const uint32_t byte = u8(b + 16 + 32 * (j / 2) + l);
    const uint32_t q = (j & 1) ? byte >> 4 : byte & 15;
    return f16_bits_to_f32(ld2(b)) * static_cast<float>(sc) * static_cast<float>(q) -
           f16_bits_to_f32(ld2(b + 2)) * static_cast<float>(m);
  }
};
template <>
struct Dequant<DType::Q5_K> {
  static constexpr int kBlock = 256, kBytes = 176;
  static __device__ __forceinline__ float at(const uint8_t* b, int i) {
    const int j = i / 32, l = i % 32;
    uint32_t sc, m;
    k_scale_min(b + 4, j, sc, m);
    const uint32_t byte = u8(b + 48 + 32 * (j / 2) + l);
    const uint32_t q = ((j & 1) ? byte >> 4 : byte & 15) | (((u8(b + 16 + l) >> j) & 1) << 4);
    return f16_bits_to_f32(ld2(b)) * static_cast<float>(sc) * static_cast<float>(q) -
           f16_bits_to_f32(ld2(b + 2)) * static_cast<float>(m);
  }
};
template <>
struct Dequant<DType::Q6_K> {
  static constexpr int kBlock = 256, kBytes = 210;
  static __device__ __forceinline__ float at(const uint8_t* b, int i) {
    const int h = i / 128, r = i % 128, k = r / 32, l = r % 32;
    const uint32_t lb = u8(b + 64 * h + 32 * (k & 1) + l);
    const uint32_t lo = (k >> 1) ? lb >> 4 : lb & 15;
    const uint32_t hi = (u8(b + 128 + 32 * h + l) >> (2 * k)) & 3;
    const int q = static_cast<int>(lo | (hi << 4)) - 32;
    const int sc = static_cast<int8_t>(u8(b + 192 + 8 * h + 2 * k + l / 16));
    return f16_bits_to_f32(ld2(b + 208)) * static_cast<float>(sc * q);
  }
};

// The sub-block formats, through their decoders (quant_sub32*.cuh).
#define MS_DEQUANT_SUB32(T, D)                                                                          \
  template <>                                                                                           \
  struct Dequant<DType::T> {                                                                            \
    static constexpr int kBlock = D::kBlockElems, kBytes = D::kBlockBytes;                              \
    static __device__ __forceinline__ float at(const uint8_t* b, int i) { return sub32_elem<D>(b, i); } \
  };
MS_SUB32_TYPES(MS_DEQUANT_SUB32)
#undef MS_DEQUANT_SUB32

// Element c of a row of `T` (row pointer 2-byte aligned where T needs it).
template <DType T>
__device__ __forceinline__ float dequant_elem(const uint8_t* row, int64_t c) {
  using D = Dequant<T>;
  return D::at(row + (c / D::kBlock) * D::kBytes, static_cast<int>(c % D::kBlock));
}

}  // namespace ms::cuda::dev
