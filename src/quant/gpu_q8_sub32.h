// Internal: GPU Q8 dots of the formats the CUDA kernels read one 32-element
// sub-block at a time (gpu_q8_sub32.cpp; the AVX2 kernels in
// gpu_q8_sub32_avx2.cpp follow the same per-block terms).
#pragma once
#include <cstdint>

#include "quant/gpu_q8.h"
#include "quant/types.h"

namespace ms {

// How OpSub32 combines a format's sub-block (cuda/quant_sub32.cuh).
struct GpuSub32Format {
  int block_elems;  // 32 or 256; 0: not a sub-block format
  int min_kind;     // 0 none, 1 one offset times the activations' s, 2 per-16 offsets (Q2_K)
  bool two_scales;  // a scale per 16 elements
};
GpuSub32Format gpu_sub32_format(DType t);

// A 32-element sub-block: value e = s[e / 16] * q[e] + m[e / 16].
struct GpuSub32 {
  int8_t q[32];
  float s[2];
  float m[2];
};
// All block_elems / 32 sub-blocks of one block into u[0..].
void gpu_sub32_decode_block(DType t, const uint8_t* blk, GpuSub32* u);

// One sub-block's term against activation block (a, d, s), in the GPU's order.
float gpu_sub32_term(const GpuSub32Format& f, const GpuSub32& u, const int8_t* a, float ad, float as);

// The dot of a row of n elements with a GPU Q8 row (quants aq, scales ad,
// sums as), the terms added in row order.
float dot_sub32_gpu_q8(DType t, const uint8_t* row, int64_t n, const int8_t* aq, const float* ad, const float* as);

namespace simd {
// The AVX2 kernels of these formats: the SIMD-decoding one where there is one
// (gpu_q8_sub32_fast_kernel_avx2: every sub-block format now), else the
// decode-then-dot one; nullptr for other formats.
GpuQ8RowsFn gpu_q8_sub32_rows_kernel_avx2(DType t);
// The decode-then-dot AVX2 kernels (gpu_q8_sub32_avx2.cpp: scalar
// gpu_sub32_decode_block, SIMD integer dots), every sub-block format.
GpuQ8RowsFn gpu_q8_sub32_generic_kernel_avx2(DType t);
// SIMD-decoding kernels (gpu_q8_sub32_simd.h) of every sub-block format and
// of Q6_K (gpu_q8_avx2.cpp has none; gpu_q8.cpp dispatches to this one):
// AVX2 (gpu_q8_sub32_fast_avx2.cpp) and AVX-512 VNNI
// (gpu_q8_sub32_fast_avx512.cpp, callable only where cpu_supports_avx512());
// nullptr for the other formats.
GpuQ8RowsFn gpu_q8_sub32_fast_kernel_avx2(DType t);
GpuQ8RowsFn gpu_q8_sub32_fast_kernel_avx512(DType t);
}  // namespace simd

}  // namespace ms
