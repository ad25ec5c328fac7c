// Several matrix x vector (or x small batch) products in one parallel region:
// the decode step's q/k/v projections, or the gate and up rows of every
// routed expert of a batch, cost one thread-pool dispatch instead of one
// each. Rows of all jobs are cut into tiles handed out dynamically, so small
// and large matrices mix; a tile is read from memory once and dotted with
// every token of its job while it is in cache.
#pragma once
#include <cstdint>

#include "cpu/thread_pool.h"
#include "quant/types.h"

namespace ms {

struct MatmulJob {
  DType type = DType::F32;
  const void* W = nullptr;    // rows x cols, row_bytes(type, cols) per row
  int64_t rows = 0, cols = 0;
  // Inputs already quantized by quantize_activations(type, ...): token i of
  // the job is act row act_index[i] (identity when act_index is null), rows
  // act_row_bytes(type, cols) apart.
  const void* acts = nullptr;
  const int32_t* act_index = nullptr;
  int64_t n_tokens = 1;
  float* Y = nullptr;         // n_tokens x rows (row-major)
  // Inputs in the GPU's Q8 form instead (quant/gpu_q8.h: quantize_rows_gpu_q8,
  // rows gpu_q8_row_bytes(cols) apart), for CPU results that round like the
  // GPU's. The type must be gpu_q8_supported().
  bool gpu_q8 = false;
};

// Y_j[i, r] = W_j[r,:] . act_j[i] for every job. Throws ms::Error for a type
// without a CPU kernel or cols not a multiple of its block.
void matmul_many(ThreadPool& pool, const MatmulJob* jobs, int n_jobs);

// The input form the CPU backend gives a matrix of type wtype by default: the
// GPU's Q8 (per 32 with an f32 scale, quant/gpu_q8.h) for Q8_0 weights,
// every other type its vec_dot_type. Q8_0's own activation block (llama.cpp's
// block_q8_0) rounds each block's scale to f16, which the CUDA kernels do
// not; with that one extra rounding a Q8_0 model on the CPU drifted away from
// the same model on the GPU (and from its f32-dequantized twin computed with
// the GPU's rounding) by a few percent of the logits on tiny, sensitive models
// (issue 41, bench/results/precision.md). With the GPU's form the CPU rounds
// exactly as the CUDA backend does (and the Q8_0 dots got faster: its GPU Q8
// kernel reads 8 block scales at once). The other formats keep theirs, which
// differ from the GPU's too: the K-quants' Q8_K (one scale per 256; their GPU
// Q8 dots are slower, expert_ffn.h) and Q4_0/MXFP4's f16 scales (not
// measured for speed).
bool input_takes_gpu_q8(DType wtype);
// Bytes of one input row of `cols` in that form.
int64_t input_row_bytes(DType wtype, int64_t cols);
// Quantizes n rows to that form (quantize_rows or quantize_rows_gpu_q8).
void quantize_inputs(ThreadPool& pool, DType wtype, const float* x, int64_t n, int64_t cols, void* dst);

// Quantizes n rows of `cols` floats for weights of type wtype (to its
// vec_dot_type), in parallel over rows when there are many.
void quantize_rows(ThreadPool& pool, DType wtype, const float* x, int64_t n, int64_t cols, void* dst);
// Same to the GPU's Q8 form (gpu_q8_row_bytes(cols) bytes per row).
void quantize_rows_gpu_q8(ThreadPool& pool, const float* x, int64_t n, int64_t cols, void* dst);

}  // namespace ms
