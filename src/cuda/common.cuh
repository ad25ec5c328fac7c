// Device helpers shared by the kernels: loads with the alignment each block
// format guarantees, half/bfloat conversions, warp reductions.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ms::cuda::dev {

constexpr unsigned kFullMask = 0xffffffffu;

// 16 bytes; p must be 16-byte aligned. Read-only data path.
__device__ __forceinline__ uint4 ld16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }
// 4 bytes; p 4-byte aligned.
__device__ __forceinline__ uint32_t ld4(const void* p) { return __ldg(static_cast<const unsigned int*>(p)); }
// 2 bytes; p 2-byte aligned.
__device__ __forceinline__ uint32_t ld2(const void* p) { return __ldg(static_cast<const unsigned short*>(p)); }
// 4 bytes from a 2-byte-aligned address (blocks of 34, 18, 210 bytes).
__device__ __forceinline__ uint32_t ld4_a2(const uint8_t* p) { return ld2(p) | (ld2(p + 2) << 16); }
// 4 bytes from any address.
__device__ __forceinline__ uint32_t ld4_a1(const uint8_t* p) {
  return static_cast<uint32_t>(__ldg(p)) | (static_cast<uint32_t>(__ldg(p + 1)) << 8) |
         (static_cast<uint32_t>(__ldg(p + 2)) << 16) | (static_cast<uint32_t>(__ldg(p + 3)) << 24);
}

__device__ __forceinline__ float f16_bits_to_f32(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xffff)));
}
__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float((h & 0xffff) << 16); }

// 2^(e-127) for an E8M0 exponent byte, times 0.5 (MXFP4 values are kept doubled
// as integers); exact for every e (subnormal results for e < 2).
__device__ __forceinline__ float e8m0_half(uint32_t e) {
  return e >= 2 ? __uint_as_float((e - 1) << 23) : __uint_as_float(0x00400000u >> (1 - e));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024);
// every thread gets the result. `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// expf, not __expf: once per output element, and it keeps f32 weights within
// f32 rounding of a reference (__expf errs by up to ~2^-21 * |x| relative).
__device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }

}  // namespace ms::cuda::dev
