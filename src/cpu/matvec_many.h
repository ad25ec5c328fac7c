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

// Quantizes n rows of `cols` floats for weights of type wtype (to its
// vec_dot_type), in parallel over rows when there are many.
void quantize_rows(ThreadPool& pool, DType wtype, const float* x, int64_t n, int64_t cols, void* dst);
// Same to the GPU's Q8 form (gpu_q8_row_bytes(cols) bytes per row).
void quantize_rows_gpu_q8(ThreadPool& pool, const float* x, int64_t n, int64_t cols, void* dst);

}  // namespace ms
