// Dispatch of GPU Q8 (quant/gpu_q8.h): the AVX-512 VNNI kernels of the
// formats that have one where this CPU has VNNI, else the AVX2 kernels where
// it has AVX2 (both capped by MOESTREAM_ISA through cpu_features()), else the
// reference.
#include <string>

#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"
#include "quant/simd_kernels.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace ms {
namespace {

bool use_avx2() {
  static const bool yes = cpu_features().avx2 && simd::cpu_supports_avx2();
  return yes;
}

// The AVX-512 VNNI kernels (gpu_q8_sub32_fast_avx512.cpp) of the formats
// that have them, on CPUs with VNNI (as dispatch.cpp decides for the integer
// formats).
bool use_avx512() {
  static const bool yes = cpu_features().avx512 && cpu_features().avx512_vnni && simd::cpu_supports_avx512();
  return yes;
}

simd::GpuQ8RowsFn rows_kernel_avx512(DType t) {
  return use_avx512() ? simd::gpu_q8_sub32_fast_kernel_avx512(t) : nullptr;
}

simd::GpuQ8RowsFn rows_kernel(DType t) {
  if (simd::GpuQ8RowsFn fn = rows_kernel_avx512(t)) return fn;
  if (!use_avx2()) return nullptr;
  if (simd::GpuQ8RowsFn fn = simd::gpu_q8_rows_kernel_avx2(t)) return fn;
  return simd::gpu_q8_sub32_fast_kernel_avx2(t);  // Q6_K (gpu_q8_sub32_simd.h)
}

}  // namespace

void quantize_row_gpu_q8(const float* x, void* dst, int64_t n) {
  gpu_q8_row_bytes(n);  // throws for a partial block
  if (use_avx2()) return simd::gpu_q8_quantize_kernel_avx2()(x, dst, n);
  quantize_row_gpu_q8_ref(x, dst, n);
}

void vec_dot_rows_gpu_q8(DType t, int64_t n, const void* w, int64_t row_stride, int64_t rows, const void* a,
                         float* out) {
  if (!gpu_q8_supported(t))
    throw Error(std::string("GPU Q8 activations: no dot for weights of type ") + type_name(t));
  row_bytes(t, n);  // throws for a partial block
  if (rows <= 0) return;
  if (simd::GpuQ8RowsFn fn = rows_kernel(t)) return fn(n, w, row_stride, rows, a, out);
  const auto* wp = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < rows; ++r) out[r] = vec_dot_gpu_q8_ref(t, n, wp + r * row_stride, a);
}

const char* gpu_q8_path(DType t) {
  if (rows_kernel_avx512(t)) return "avx512";
  return rows_kernel(t) ? "avx2" : "scalar";
}

}  // namespace ms
