// The CUDA kernels' Q8 activation format on the CPU ("GPU Q8"), so CPU-computed
// experts of the hybrid mode round activations exactly as the GPU does.
//
// The CPU's own activation formats follow each weight type's vec_dot_type
// (Q8_K: one scale per 256 for the K-quants; Q8_0 with an f16 scale for
// Q8_0/Q4_0/MXFP4). The GPU quantizes every activation per block of 32 with
// an f32 scale (cuda/warp_q8.cuh), so the same expert computed on both sides
// differed by ~1e-3 relative, enough to flip greedy decoding. With GPU Q8 the
// int8 quants and scales are bit-identical to the GPU's; the dots then differ
// only in float summation order.
//
// The rule (dev::warp_q8): per block of 32,
//   amax = fmaxf-reduction of |x| (NaNs ignored unless all are NaN)
//   d    = amax / 127                      (IEEE f32 division)
//   q    = amax > 0 ? cvt.rni.s32(x / d) : 0, stored truncated to int8
//          (cvt.rni: round half to even, NaN -> 0, saturating to int32)
//   s    = d * (float sum of the int32 q, added in the warp's butterfly order)
// For finite activations with a normal d, |q| <= 127 and the sum is exact;
// the other cases are reproduced too, as the GPU computes them.
//
// Row layout (CPU side only; the GPU keeps q and {d, s} in separate arrays):
// n int8 quants, then n/32 floats d, then n/32 floats s, so that a SIMD
// kernel loads 8 consecutive block scales at once.
//
// The dots mirror the per-block formulas of cuda/quant_dot.cuh: an integer
// dot per 32 (per 16 for Q6_K) times the weight's block scale and d, minus
// dmin*min*s for Q4_K/Q5_K and 8*d*s for Q4_0.
#pragma once
#include <cstdint>

#include "quant/types.h"

namespace ms {

constexpr int kGpuQ8Block = 32;

// A row's parts in its bytes (n a multiple of 32).
struct GpuQ8Row {
  int8_t* q;
  float* d;
  float* s;
};
struct GpuQ8RowConst {
  const int8_t* q;
  const float* d;
  const float* s;
};
inline GpuQ8Row gpu_q8_row(void* p, int64_t n) {
  auto* b = static_cast<uint8_t*>(p);
  return {reinterpret_cast<int8_t*>(b), reinterpret_cast<float*>(b + n), reinterpret_cast<float*>(b + n) + n / 32};
}
inline GpuQ8RowConst gpu_q8_row(const void* p, int64_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  return {reinterpret_cast<const int8_t*>(b), reinterpret_cast<const float*>(b + n),
          reinterpret_cast<const float*>(b + n) + n / 32};
}

// Bytes of one GPU Q8 row of n elements. Throws ms::Error unless n is a
// non-negative multiple of 32. Rows must start 4-byte aligned (the floats).
int64_t gpu_q8_row_bytes(int64_t n);

// The weight types whose GPU kernels take Q8 activations and that this file
// has dots for: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, and the formats the GPU
// reads through sub-block decoders (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, TQ1_0,
// TQ2_0, every IQ type: gpu_q8_sub32.h) -- cuda::matvec_takes_q8 among
// cuda::matvec_supported. F32/F16/BF16 take f32 activations on both sides
// and need nothing.
bool gpu_q8_supported(DType wtype);

// ---- scalar reference (gpu_q8_ref.cpp)
void quantize_row_gpu_q8_ref(const float* x, void* dst, int64_t n);
// Dot of one weight row (n elements, n a multiple of the type's block) with
// a GPU Q8 row. Throws ms::Error for a type gpu_q8_supported() rejects.
float vec_dot_gpu_q8_ref(DType wtype, int64_t n, const void* w, const void* a);

// ---- dispatched (gpu_q8.cpp): the AVX2 kernels where this CPU has them
// (and MOESTREAM_ISA allows), else the reference. Results of the fast and
// the reference paths differ only in float summation order; quantization is
// bit-identical.
void quantize_row_gpu_q8(const float* x, void* dst, int64_t n);
// out[r] = dot(weight row at w + r*row_stride, a) for r < rows.
void vec_dot_rows_gpu_q8(DType wtype, int64_t n, const void* w, int64_t row_stride, int64_t rows, const void* a,
                         float* out);
// "avx512", "avx2" or "scalar": the path vec_dot_rows_gpu_q8 takes for wtype here.
const char* gpu_q8_path(DType wtype);

// ---- the ISA kernels, for tests (gpu_q8_avx2.cpp); nullptr where none.
namespace simd {
using GpuQ8RowsFn = void (*)(int64_t n, const void* w, int64_t row_stride, int64_t rows, const void* a,
                             float* out);
using GpuQ8QuantFn = void (*)(const float* x, void* dst, int64_t n);
GpuQ8RowsFn gpu_q8_rows_kernel_avx2(DType wtype);
GpuQ8QuantFn gpu_q8_quantize_kernel_avx2();
}  // namespace simd

}  // namespace ms
