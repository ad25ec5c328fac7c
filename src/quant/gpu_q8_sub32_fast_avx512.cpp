// AVX-512 VNNI GPU Q8 row kernels of the sub-block formats: the bodies of
// gpu_q8_sub32_simd.h (256-bit vectors) with each 32-byte integer dot one
// vpdpbusd (AVX512VL + VNNI) instead of maddubs + madd. Dispatched only on
// CPUs with AVX-512 VNNI (gpu_q8.cpp).
//
// Built with the AVX-512 flags (see simd_kernels.h).
#include <immintrin.h>

#include "quant/gpu_q8_sub32.h"

namespace ms::simd {
namespace {
// 32 unsigned weights x 32 int8 activations -> 8 int32 partial sums, sum k
// over bytes 4k..4k+3 as on AVX2 (exact: no int16 intermediate).
inline __m256i dot_u8(__m256i w, __m256i a) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a); }
}  // namespace
}  // namespace ms::simd

#include "quant/gpu_q8_sub32_simd.h"

namespace ms::simd {
GpuQ8RowsFn gpu_q8_sub32_fast_kernel_avx512(DType t) { return sub32_fast_kernel(t); }
}  // namespace ms::simd
