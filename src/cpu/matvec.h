// Matrix x vector and matrix x small batch for quantized weights on the CPU:
// the decode step's expert FFN and projections. Bound by reading weight bytes,
// so each weight row is streamed from memory once per call: activations are
// quantized once (to the weight type's vec_dot_type), rows are split over the
// pool in chunks, and each chunk runs vec_dot_rows() on a few rows at a time.
//
// W is row-major: `rows` rows of `cols` elements, each row_bytes(wtype, cols)
// bytes, rows back to back. cols must be a multiple of the type's block size.
#pragma once
#include <cstdint>

#include "cpu/thread_pool.h"
#include "quant/types.h"

namespace ms {

// Bytes of one quantized activation row for weights of type wtype (the size
// quantize_activations writes per token).
int64_t act_row_bytes(DType wtype, int64_t cols);

// Quantizes n_tokens rows of `cols` floats (row-major) to wtype's vec_dot_type,
// act_row_bytes(wtype, cols) bytes per token, so several matvecs with the same
// input (gate and up) can share it.
void quantize_activations(DType wtype, const float* x, int64_t cols, int64_t n_tokens, void* dst);

// y[r] = W[r,:] . x for r < rows. Every y[r] is written. Quantizes x into a
// thread-local buffer of the calling thread.
void matvec(ThreadPool& pool, DType wtype, const void* W, int64_t rows, int64_t cols, const float* x,
            float* y);
// Same with x already quantized by quantize_activations(wtype, x, cols, 1, act).
void matvec_quantized(ThreadPool& pool, DType wtype, const void* W, int64_t rows, int64_t cols,
                      const void* act, float* y);

// One matrix x vector of a batch: y = W . act, act already quantized by
// quantize_activations(wtype, x, cols, 1, act).
struct MatvecJob {
  DType wtype;
  const void* W;
  int64_t rows, cols;
  const void* act;
  float* y;
};

// Runs every job in one parallel loop (the rows of all jobs split into
// chunks), so many small matrices -- the gate and up of several experts, then
// their downs -- pay the pool's start-up cost once instead of once each; for
// matrices of a few hundred KiB that cost is most of a matvec on 16 threads.
void matvec_batch(ThreadPool& pool, const MatvecJob* jobs, int64_t n_jobs);

// Y[t, r] = W[r,:] . X[t,:] for a small batch: X is n_tokens x cols, Y is
// n_tokens x rows, both row-major. Each tile of weight rows is read from
// memory once and dotted with every token while it is in cache.
void matmul(ThreadPool& pool, DType wtype, const void* W, int64_t rows, int64_t cols, const float* X,
            int64_t n_tokens, float* Y);
// Same with X already quantized (n_tokens rows of act_row_bytes each).
void matmul_quantized(ThreadPool& pool, DType wtype, const void* W, int64_t rows, int64_t cols,
                      const void* acts, int64_t n_tokens, float* Y);

}  // namespace ms
