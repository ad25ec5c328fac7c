// expert_rows_act / expert_rows_down_bias (expert_bias.h).
#include "cuda/expert_bias.h"

#include <string>

#include "cuda/common.cuh"
#include "cuda/device.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t row_expert(const int32_t* __restrict__ ids, const int32_t* __restrict__ pair_of_row,
                                              int64_t row, int n_expert) {
  const int64_t pair = pair_of_row != nullptr ? pair_of_row[row] : row;
  return min(max(ids[pair], 0), n_expert - 1);
}

__global__ void rows_act_kernel(float* __restrict__ gate, const float* __restrict__ up,
                                const int32_t* __restrict__ ids, const int32_t* __restrict__ pair_of_row,
                                int n_expert, int64_t d_ff, int64_t n, const float* __restrict__ bg,
                                const float* __restrict__ bu, bool clamped, float alpha, float limit) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / d_ff, col = i % d_ff;
  const int64_t e = row_expert(ids, pair_of_row, row, n_expert);
  float g = gate[i], u = up[i];
  if (bg != nullptr) g += bg[e * d_ff + col];
  if (bu != nullptr) u += bu[e * d_ff + col];
  if (clamped) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    gate[i] = g / (1.f + expf(-alpha * g)) * (u + 1.f);
  } else {
    gate[i] = dev::silu(g) * u;
  }
}

__global__ void rows_bias_kernel(float* __restrict__ y, const int32_t* __restrict__ ids,
                                 const int32_t* __restrict__ pair_of_row, int n_expert, int64_t d, int64_t n,
                                 const float* __restrict__ bias) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / d;
  y[i] += bias[row_expert(ids, pair_of_row, row, n_expert) * d + i % d];
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void check_rows(const ExpertWeights& w, const ExpertRows& rows, const char* what) {
  if (rows.ids == nullptr) throw Error(std::string(what) + ": no expert ids");
  if (w.n_expert <= 0) throw Error(std::string(what) + ": n_expert " + std::to_string(w.n_expert));
}

}  // namespace

void expert_rows_act(const ExpertWeights& w, float* gate, const float* up, const ExpertRows& rows,
                     cudaStream_t stream) {
  if (rows.n_rows <= 0) return;
  check_rows(w, rows, "expert_rows_act");
  const int64_t d_ff = w.gate.rows, n = d_ff * rows.n_rows;
  rows_act_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, rows.ids, rows.pair_of_row, w.n_expert, d_ff, n,
                                                         w.gate_bias, w.up_bias, w.clamped_swiglu, w.alpha, w.limit);
  MS_CUDA_CHECK_LAUNCH();
}

void expert_rows_down_bias(const ExpertWeights& w, float* y, const ExpertRows& rows, cudaStream_t stream) {
  if (rows.n_rows <= 0 || w.down_bias == nullptr) return;
  check_rows(w, rows, "expert_rows_down_bias");
  const int64_t d = w.down.rows, n = d * rows.n_rows;
  rows_bias_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, rows.ids, rows.pair_of_row, w.n_expert, d, n,
                                                          w.down_bias);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
