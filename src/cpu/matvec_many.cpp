#include "cpu/matvec_many.h"

#include <algorithm>
#include <string>
#include <vector>

#include "cpu/matvec.h"
#include "quant/gpu_q8.h"
#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/error.h"

namespace ms {
namespace {

struct Tile {
  int job;
  int64_t row0, n_rows;
};

}  // namespace

void matmul_many(ThreadPool& pool, const MatmulJob* jobs, int n_jobs) {
  int64_t total_rows = 0;
  for (int j = 0; j < n_jobs; ++j) {
    const TypeInfo& info = type_info(jobs[j].type);
    if (!info.computable)
      throw Error(std::string("matmul: weights of type ") + info.name + " have no CPU kernel");
    if (jobs[j].cols % info.block_size != 0)
      throw Error("matmul: " + std::to_string(jobs[j].cols) + " columns is not a multiple of " + info.name +
                  "'s block size");
    if (jobs[j].gpu_q8 && !gpu_q8_supported(jobs[j].type))
      throw Error(std::string("matmul: no GPU Q8 kernel for weights of type ") + info.name);
    if (jobs[j].n_tokens > 0) total_rows += jobs[j].rows;
  }
  if (total_rows == 0) return;
  // Tile rows: at most what gives ~4 tiles per thread, a multiple of 4 rows
  // (the kernels' row group), and for several tokens at most ~32 KiB of
  // weights (stays in L1/L2 while every token of the job passes over it).
  const int n_threads = pool.size();
  const int64_t balance = std::max<int64_t>(4, (total_rows + 4 * n_threads - 1) / (4 * n_threads));
  // (A thread_local buffer: the lambda must reach it through this reference,
  // since naming it inside would pick the running worker's own instance.)
  thread_local std::vector<Tile> tile_buffer;
  std::vector<Tile>& tiles = tile_buffer;
  tiles.clear();
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& job = jobs[j];
    if (job.n_tokens <= 0) continue;
    const int64_t stride = row_bytes(job.type, job.cols);
    // One token (decode) has nothing to keep in cache: only the balance
    // bound, so tiles are long runs of rows the kernels prefetch through.
    int64_t tile = job.n_tokens == 1
                       ? balance
                       : std::min<int64_t>(balance, std::max<int64_t>(4, (32 << 10) / std::max<int64_t>(stride, 1)));
    tile = std::clamp<int64_t>((tile + 3) / 4 * 4, 4, 256);
    for (int64_t r = 0; r < job.rows; r += tile) tiles.push_back({j, r, std::min(tile, job.rows - r)});
  }
  auto run = [&tiles, jobs](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const Tile& t = tiles[static_cast<size_t>(c)];
      const MatmulJob& job = jobs[t.job];
      const int64_t stride = row_bytes(job.type, job.cols);
      const uint8_t* w = static_cast<const uint8_t*>(job.W) + t.row0 * stride;
      const uint8_t* acts = static_cast<const uint8_t*>(job.acts);
      if (job.gpu_q8) {  // token by token over the tile (it stays in cache)
        const int64_t act_stride = gpu_q8_row_bytes(job.cols);
        for (int64_t i = 0; i < job.n_tokens; ++i) {
          const int64_t ai = job.act_index ? job.act_index[i] : i;
          vec_dot_rows_gpu_q8(job.type, job.cols, w, stride, t.n_rows, acts + ai * act_stride,
                              job.Y + i * job.rows + t.row0);
        }
        continue;
      }
      const int64_t act_stride = act_row_bytes(job.type, job.cols);
      vec_dot_rows_tokens(job.type, job.cols, w, stride, t.n_rows, acts, act_stride, job.act_index, job.n_tokens,
                          job.Y + t.row0, job.rows);
    }
  };
  pool.parallel_for(static_cast<int64_t>(tiles.size()), 1, run);
}

void quantize_rows(ThreadPool& pool, DType wtype, const float* x, int64_t n, int64_t cols, void* dst) {
  const int64_t rb = act_row_bytes(wtype, cols);
  auto* d = static_cast<uint8_t*>(dst);
  if (n < 8) {
    quantize_activations(wtype, x, cols, n, d);
    return;
  }
  pool.parallel_for(n, 4, [&](int64_t b, int64_t e) { quantize_activations(wtype, x + b * cols, cols, e - b, d + b * rb); });
}

bool input_takes_gpu_q8(DType wtype) { return wtype == DType::Q8_0; }

int64_t input_row_bytes(DType wtype, int64_t cols) {
  return input_takes_gpu_q8(wtype) ? gpu_q8_row_bytes(cols) : act_row_bytes(wtype, cols);
}

void quantize_inputs(ThreadPool& pool, DType wtype, const float* x, int64_t n, int64_t cols, void* dst) {
  if (input_takes_gpu_q8(wtype)) quantize_rows_gpu_q8(pool, x, n, cols, dst);
  else quantize_rows(pool, wtype, x, n, cols, dst);
}

void quantize_rows_gpu_q8(ThreadPool& pool, const float* x, int64_t n, int64_t cols, void* dst) {
  const int64_t rb = gpu_q8_row_bytes(cols);
  auto* d = static_cast<uint8_t*>(dst);
  auto rows = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) quantize_row_gpu_q8(x + i * cols, d + i * rb, cols);
  };
  if (n < 8) rows(0, n);
  else pool.parallel_for(n, 4, rows);
}

}  // namespace ms
