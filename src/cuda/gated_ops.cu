// The gated ops of hybrids (see gated_ops.h): plain element-wise kernels.
#include <string>

#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/gated_ops.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

// expf, not __expf: these gates scale whole outputs, and the CPU reference uses std::exp.
__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// Thread per element of a dst row (q heads, then the rest); blockIdx.y: token.
__global__ void split_q_gate_kernel(const float* __restrict__ src, int n_head, int head_dim, int64_t rest,
                                    float* __restrict__ dst, float* __restrict__ gate) {
  const int64_t t = blockIdx.y;
  const int64_t q_dim = static_cast<int64_t>(n_head) * head_dim;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const float* s = src + t * (2 * q_dim + rest);
  float* d = dst + t * (q_dim + rest);
  if (i < q_dim) {
    const int64_t h = i / head_dim, j = i % head_dim;
    d[i] = s[h * 2 * head_dim + j];
    gate[t * q_dim + i] = s[h * 2 * head_dim + head_dim + j];
  } else if (i < q_dim + rest) {
    d[i] = s[q_dim + i];  // src's rest starts after 2 * q_dim
  }
}

__global__ void mul_sigmoid_kernel(float* x, const float* __restrict__ gate, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) x[i] *= sigmoid(gate[i]);
}

__global__ void add_row_bias_kernel(float* x, const float* __restrict__ bias, int64_t width) {
  const int64_t t = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < width) x[t * width + i] += bias[i];
}

__global__ void scale_rows_sigmoid_kernel(float* x, const float* __restrict__ score, int64_t width) {
  const int64_t t = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < width) x[t * width + i] *= sigmoid(score[t]);
}

constexpr int kThreads = 256;
unsigned blocks(int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

}  // namespace

void split_q_gate(const float* src, int n, int n_head, int head_dim, int64_t rest, float* dst, float* gate,
                  cudaStream_t stream) {
  if (n <= 0) return;
  if (n > 65535) throw Error("split_q_gate: " + std::to_string(n) + " rows (at most 65535 per launch)");
  const int64_t width = static_cast<int64_t>(n_head) * head_dim + rest;
  const dim3 grid(blocks(width), static_cast<unsigned>(n));
  split_q_gate_kernel<<<grid, kThreads, 0, stream>>>(src, n_head, head_dim, rest, dst, gate);
  MS_CUDA_CHECK_LAUNCH();
}

void mul_sigmoid(float* x, const float* gate, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  mul_sigmoid_kernel<<<blocks(count), kThreads, 0, stream>>>(x, gate, count);
  MS_CUDA_CHECK_LAUNCH();
}

void add_row_bias(float* x, const float* bias, int n, int64_t width, cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  if (n > 65535) throw Error("add_row_bias: " + std::to_string(n) + " rows (at most 65535 per launch)");
  const dim3 grid(blocks(width), static_cast<unsigned>(n));
  add_row_bias_kernel<<<grid, kThreads, 0, stream>>>(x, bias, width);
  MS_CUDA_CHECK_LAUNCH();
}

void scale_rows_sigmoid(float* x, const float* score, int n, int64_t width, cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  if (n > 65535) throw Error("scale_rows_sigmoid: " + std::to_string(n) + " rows (at most 65535 per launch)");
  const dim3 grid(blocks(width), static_cast<unsigned>(n));
  scale_rows_sigmoid_kernel<<<grid, kThreads, 0, stream>>>(x, score, width);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
