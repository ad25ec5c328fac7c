// AVX2 GPU Q8 row kernels of the sub-block formats with SIMD decoding (the
// bodies: gpu_q8_sub32_simd.h), in place of the decode-then-dot kernels of
// gpu_q8_sub32_avx2.cpp.
//
// Built with -mavx2 -mfma -mf16c (see simd_kernels.h).
#include <immintrin.h>

#include "quant/gpu_q8_sub32.h"

namespace ms::simd {
namespace {
// 32 unsigned weights x 32 int8 activations -> 8 int32 partial sums (the
// weights stay below 128, so maddubs's int16 pairs cannot saturate).
inline __m256i dot_u8(__m256i w, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}
}  // namespace
}  // namespace ms::simd

#include "quant/gpu_q8_sub32_simd.h"

namespace ms::simd {
GpuQ8RowsFn gpu_q8_sub32_fast_kernel_avx2(DType t) { return sub32_fast_kernel(t); }
}  // namespace ms::simd
