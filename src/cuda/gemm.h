// Matrix x matrix for prompt batches (tensor cores for quantized weights). Same
// addressing as matvec (matvec.h): one dense matrix or expert groups, so
// prefill can run each expert once over all of its tokens.
//
// Three kernels:
// - int8 (gemm_q8.cu), the fast one: Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, MXFP4
//   weights x Q8Act activations (x.q8), mma.sync s8 x s8 -> s32 (m16n8k32;
//   Q6_K m16n8k16), weight blocks unpacked to int8 in shared memory, the
//   per-32 (Q6_K: per-16) weight scales and the activation scales applied to
//   the int32 partial sums in f32. Many times the dp4a matvec and the WMMA
//   kernel on prompt batches (figures: bench/results/cuda_kernels.md, the
//   kernel_bench "Prompt batch" table). An f16 mma.sync variant with
//   dequantized tiles was not written: int8 moves half the shared-memory
//   bytes per product and needs no float dequantization per element, and it
//   met the target. Use it from about 16 vectors (at 8 the matvec is faster).
//   Needs sm_80 or newer.
// - f32 SIMT (gemm_float.cu): F32, F16 and BF16 weights with f32 activations,
//   f32 products and f32 sums, so float-weight models keep f32 accuracy in
//   prompt batches (the f16 WMMA kernel rounded F32 weights and every
//   activation to f16: ~1e-3 relative error in the logits). Tensor-core
//   formats cannot do that: TF32 and f16 keep 10-11 mantissa bits.
// - f16 WMMA (gemm.cu), the fallback for quantized weights: f32 activations
//   rounded to f16, weight tiles dequantized element by element. Used when
//   x.q8 is not given, or before sm_80.
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/matvec.h"

namespace ms::cuda {

bool matmul_supported(DType t);
// Whether matmul takes the int8 tensor-core path for weight type t (given
// x.q8 and a device of compute capability 8.0+).
bool matmul_int8_supported(DType t);

// y[p*y_stride + r] = sum_c W_g[r][c] * x.f32[p/x_div][c] (+ residual), for
// every output vector p of every group (see MatvecGroups). Float weights:
// the f32 kernel (x.f32). With x.q8 set (n = cols) and an int8 type, the int8
// kernel runs (activations as quantized in x.q8; x.f32 unused). Otherwise f32
// activations (x.f32, x.f32_stride) are rounded to f16: keep them within f16
// range (normalised hidden states are).
void matmul(const MatrixSet& w, const MatvecInput& x, const MatvecGroups& groups, float* y, int64_t y_stride,
            const float* residual, cudaStream_t stream);

// One dense matrix of stacked row blocks (e.g. Wq|Wk|Wv) times n vectors (as
// matmul; one matmul per block where the int8 path cannot run), each row block
// into its own output: rows [0, rows[0]) to y[0] (row stride rows[0]), the
// next rows[1] to y[1], and so on (segments <= 3, summing to w.rows). One
// launch instead of one per block, so small blocks (k, v) share its waves.
void matmul_stacked(const MatrixSet& w, const MatvecInput& x, int n, int segments, const int64_t* rows,
                    float* const* y, cudaStream_t stream);

}  // namespace ms::cuda
