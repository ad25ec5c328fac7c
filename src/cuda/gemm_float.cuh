// Internal launcher of the f32 matmul for float weights (gemm_float.cu),
// reached through matmul() (gemm.h).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/matvec.h"

namespace ms::cuda::detail {

bool gemm_float_supported(DType t);

// As matmul (gemm.h) for F32 / F16 / BF16 weights: x.f32 activations, f32 products and sums.
void gemm_float_launch(const MatrixSet& w, const MatvecInput& x, const MatvecGroups& g, float* y, int64_t y_stride,
                       const float* residual, cudaStream_t stream);

}  // namespace ms::cuda::detail
