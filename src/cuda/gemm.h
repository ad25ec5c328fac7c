// Quantized matrix x matrix for prompt batches, on tensor cores: weight tiles
// are dequantized to f16 in shared memory (from the file's quant format),
// activations converted from f32 to f16, products accumulated in f32 (WMMA
// 16x16x16). Same addressing as matvec (matvec.h): one dense matrix or expert
// groups, so prefill can run each expert once over all of its tokens.
//
// This is the first, straightforward version (element-wise dequantization
// into the tile); kernel_bench compares it with the multi-vector matvec.
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/matvec.h"

namespace ms::cuda {

bool matmul_supported(DType t);

// y[p*y_stride + r] = sum_c W_g[r][c] * x.f32[p/x_div][c] (+ residual), for
// every output vector p of every group (see MatvecGroups). Takes f32
// activations (x.f32, x.f32_stride) for every weight type. Inputs are rounded
// to f16: keep activations within f16 range (normalised hidden states are).
void matmul(const MatrixSet& w, const MatvecInput& x, const MatvecGroups& groups, float* y, int64_t y_stride,
            const float* residual, cudaStream_t stream);

}  // namespace ms::cuda
