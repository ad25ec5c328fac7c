// Element-wise ops: residual add, SwiGLU, weighted sum of expert outputs.
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);  // grid-stride beyond
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    out[i] = a[i] + b[i];
}

__global__ void silu_mul_kernel(const float* g, const float* u, float* out, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    out[i] = dev::silu(g[i]) * u[i];
}

// Fixed summation order over j, so results do not depend on scheduling.
__global__ void moe_combine_kernel(const float* __restrict__ y, const float* __restrict__ wts, int k, int64_t n,
                                   const float* residual, float* out) {
  const int t = blockIdx.y;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < n;
       c += static_cast<int64_t>(gridDim.x) * kThreads) {
    float s = 0.f;
    for (int j = 0; j < k; ++j) s += wts[t * k + j] * y[(static_cast<int64_t>(t) * k + j) * n + c];
    if (residual) s += residual[static_cast<int64_t>(t) * n + c];
    out[static_cast<int64_t>(t) * n + c] = s;
  }
}

// Row i of the launch copies src row (src_rows ? src_rows[i] : i) to dst row
// (dst_rows ? dst_rows[i] : i), n floats: gather and scatter in one kernel.
__global__ void copy_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ src_rows,
                                 const int32_t* __restrict__ dst_rows, int64_t n, float* __restrict__ dst) {
  const int i = blockIdx.y;
  const float* s = src + static_cast<int64_t>(src_rows ? __ldg(src_rows + i) : i) * n;
  float* d = dst + static_cast<int64_t>(dst_rows ? __ldg(dst_rows + i) : i) * n;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < n;
       c += static_cast<int64_t>(gridDim.x) * kThreads)
    d[c] = s[c];
}

void copy_rows(const float* src, const int32_t* src_rows, const int32_t* dst_rows, int n_rows, int64_t n, float* dst,
               cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  if (n_rows > 65535) throw Error("gather_rows/scatter_rows: at most 65535 rows per call");
  const int64_t bx = (n + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(bx < 1024 ? bx : 1024), static_cast<unsigned>(n_rows));
  copy_rows_kernel<<<grid, kThreads, 0, stream>>>(src, src_rows, dst_rows, n, dst);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void add(const float* a, const float* b, float* out, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  add_kernel<<<grid_for(count), kThreads, 0, stream>>>(a, b, out, count);
  MS_CUDA_CHECK_LAUNCH();
}

void silu_mul(const float* gate, const float* up, float* out, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  silu_mul_kernel<<<grid_for(count), kThreads, 0, stream>>>(gate, up, out, count);
  MS_CUDA_CHECK_LAUNCH();
}

void moe_combine(const float* y, const float* weights, int n_tokens, int k, int64_t n, const float* residual,
                 float* out, cudaStream_t stream) {
  if (n_tokens <= 0 || n <= 0) return;
  if (n_tokens > 65535) throw Error("moe_combine: at most 65535 tokens per call");
  const int64_t bx = (n + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(bx < 1024 ? bx : 1024), static_cast<unsigned>(n_tokens));
  moe_combine_kernel<<<grid, kThreads, 0, stream>>>(y, weights, k, n, residual, out);
  MS_CUDA_CHECK_LAUNCH();
}

void scatter_rows(const float* src, const int32_t* rows, int n_rows, int64_t n, float* dst, cudaStream_t stream) {
  copy_rows(src, nullptr, rows, n_rows, n, dst, stream);
}

void gather_rows(const float* src, const int32_t* rows, int n_rows, int64_t n, float* dst, cudaStream_t stream) {
  copy_rows(src, rows, nullptr, n_rows, n, dst, stream);
}

}  // namespace ms::cuda
