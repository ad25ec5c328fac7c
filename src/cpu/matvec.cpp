#include "cpu/matvec.h"

#include <algorithm>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/error.h"

namespace ms {
namespace {

// Rows per vec_dot_rows call inside a chunk: the kernels work on 4 rows at a
// time, so chunks are multiples of 4.
constexpr int64_t kRowQuantum = 4;

const TypeInfo& checked_type(DType wtype, int64_t rows, int64_t cols, const char* what) {
  const TypeInfo& info = type_info(wtype);
  if (!info.computable)
    throw Error(std::string(what) + ": weights of type " + info.name +
                " have no CPU kernel (re-quantize the model to a supported type, e.g. q4_K or q8_0)");
  if (rows < 0 || cols < 0)
    throw Error(std::string(what) + ": negative shape " + std::to_string(rows) + "x" + std::to_string(cols));
  if (cols % info.block_size != 0)
    throw Error(std::string(what) + ": " + std::to_string(cols) + " columns is not a multiple of " + info.name +
                "'s block size " + std::to_string(info.block_size));
  return info;
}

int64_t round_up(int64_t v, int64_t q) { return (v + q - 1) / q * q; }

// Rows per parallel_for chunk: about 2 chunks per thread -- long runs of
// consecutive rows keep each thread's read one stream (the kernels prefetch
// the next row group) while dynamic scheduling still evens out a slow thread
// -- at least one kernel group of 4 rows, at most 256.
int64_t matvec_grain(int64_t rows, int n_threads) {
  if (n_threads <= 1) return std::max<int64_t>(rows, 1);
  const int64_t per = (rows + 2 * n_threads - 1) / (2 * n_threads);
  return std::clamp<int64_t>(round_up(per, kRowQuantum), kRowQuantum, 256);
}

std::vector<uint8_t>& scratch() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

}  // namespace

int64_t act_row_bytes(DType wtype, int64_t cols) { return row_bytes(type_info(wtype).vec_dot_type, cols); }

void quantize_activations(DType wtype, const float* x, int64_t cols, int64_t n_tokens, void* dst) {
  const DType at = type_info(wtype).vec_dot_type;
  const int64_t rb = row_bytes(at, cols);
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize_row_act(at, x + t * cols, static_cast<uint8_t*>(dst) + t * rb, cols);
}

void matvec_quantized(ThreadPool& pool, DType wtype, const void* W, int64_t rows, int64_t cols,
                      const void* act, float* y) {
  checked_type(wtype, rows, cols, "matvec");
  if (rows == 0) return;
  const int64_t stride = row_bytes(wtype, cols);
  const auto* wp = static_cast<const uint8_t*>(W);
  pool.parallel_for(rows, matvec_grain(rows, pool.size()), [&](int64_t begin, int64_t end) {
    vec_dot_rows(wtype, cols, wp + begin * stride, stride, end - begin, act, y + begin);
  });
}

void matvec_batch(ThreadPool& pool, const MatvecJob* jobs, int64_t n_jobs) {
  int64_t total_rows = 0;
  for (int64_t j = 0; j < n_jobs; ++j) {
    checked_type(jobs[j].wtype, jobs[j].rows, jobs[j].cols, "matvec_batch");
    total_rows += jobs[j].rows;
  }
  if (total_rows == 0) return;
  // Chunks of consecutive rows of one job, sized over all jobs' rows.
  struct Chunk {
    int64_t job, begin, end;
  };
  thread_local std::vector<Chunk> chunks;
  chunks.clear();
  const int64_t grain = matvec_grain(total_rows, pool.size());
  for (int64_t j = 0; j < n_jobs; ++j)
    for (int64_t r = 0; r < jobs[j].rows; r += grain) chunks.push_back({j, r, std::min(jobs[j].rows, r + grain)});
  const Chunk* cp = chunks.data();
  pool.parallel_for(static_cast<int64_t>(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const MatvecJob& job = jobs[cp[c].job];
      const int64_t stride = row_bytes(job.wtype, job.cols);
      vec_dot_rows(job.wtype, job.cols, static_cast<const uint8_t*>(job.W) + cp[c].begin * stride, stride,
                   cp[c].end - cp[c].begin, job.act, job.y + cp[c].begin);
    }
  });
}

void matvec(ThreadPool& pool, DType wtype, const void* W, int64_t rows, int64_t cols, const float* x,
            float* y) {
  checked_type(wtype, rows, cols, "matvec");
  if (rows == 0) return;
  std::vector<uint8_t>& act = scratch();
  act.resize(static_cast<size_t>(act_row_bytes(wtype, cols)));
  quantize_activations(wtype, x, cols, 1, act.data());
  matvec_quantized(pool, wtype, W, rows, cols, act.data(), y);
}

void matmul_quantized(ThreadPool& pool, DType wtype, const void* W, int64_t rows, int64_t cols,
                      const void* acts, int64_t n_tokens, float* Y) {
  checked_type(wtype, rows, cols, "matmul");
  if (rows == 0 || n_tokens <= 0) return;
  const int64_t stride = row_bytes(wtype, cols);
  const int64_t act_stride = act_row_bytes(wtype, cols);
  const auto* wp = static_cast<const uint8_t*>(W);
  const auto* ap = static_cast<const uint8_t*>(acts);
  // A tile of rows stays in L1/L2 (~32 KiB) while every token is dotted with
  // it, so the weights come from DRAM once per batch.
  const int64_t tile = std::clamp<int64_t>(round_up((32 << 10) / std::max<int64_t>(stride, 1), kRowQuantum),
                                           kRowQuantum, 256);
  const int64_t n_tiles = (rows + tile - 1) / tile;
  pool.parallel_for(n_tiles, 1, [&](int64_t tb, int64_t te) {
    for (int64_t ti = tb; ti < te; ++ti) {
      const int64_t r0 = ti * tile, nr = std::min(tile, rows - r0);
      vec_dot_rows_tokens(wtype, cols, wp + r0 * stride, stride, nr, ap, act_stride, nullptr, n_tokens, Y + r0, rows);
    }
  });
}

void matmul(ThreadPool& pool, DType wtype, const void* W, int64_t rows, int64_t cols, const float* X,
            int64_t n_tokens, float* Y) {
  checked_type(wtype, rows, cols, "matmul");
  if (rows == 0 || n_tokens <= 0) return;
  const int64_t act_stride = act_row_bytes(wtype, cols);
  std::vector<uint8_t>& acts = scratch();
  acts.resize(static_cast<size_t>(act_stride * n_tokens));
  uint8_t* ap = acts.data();
  if (n_tokens == 1) {
    quantize_activations(wtype, X, cols, 1, ap);
  } else {
    pool.parallel_for(n_tokens, 1, [&](int64_t b, int64_t e) {
      quantize_activations(wtype, X + b * cols, cols, e - b, ap + b * act_stride);
    });
  }
  matmul_quantized(pool, wtype, W, rows, cols, ap, n_tokens, Y);
}

}  // namespace ms
