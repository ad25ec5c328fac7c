// Router: softmax / top-k / renormalisation of expert logits, one warp per token.
#include <cfloat>
#include <string>

#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/router_topk.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kWarps = 4;

// The logits of a token are staged in shared memory; k rounds of warp arg-max
// (ties to the lower index) pick the experts, each one masked out after.
__global__ void router_kernel(const float* __restrict__ logits, int n_tokens, int n_expert, int k, bool softmax_first,
                              bool renorm, int32_t* __restrict__ ids, float* __restrict__ weights) {
  extern __shared__ float sh[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= n_tokens) return;
  float* v = sh + warp * n_expert;
  const float* lt = logits + static_cast<int64_t>(t) * n_expert;
  dev::warp_router_topk(v, [&](int e) { return lt[e]; }, n_expert, k, softmax_first, renorm, lane,
                        ids + static_cast<int64_t>(t) * k, weights + static_cast<int64_t>(t) * k);
}

}  // namespace

void router_topk(const float* logits, int n_tokens, int n_expert, int k, RouterMode mode, bool renorm, int32_t* ids,
                 float* weights, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  if (n_expert <= 0 || n_expert > 1024 || k <= 0 || k > 32 || k > n_expert)
    throw Error("router_topk: need 0 < k <= 32, k <= n_expert <= 1024 (n_expert " + std::to_string(n_expert) +
                ", k " + std::to_string(k) + ")");
  const unsigned grid = static_cast<unsigned>((n_tokens + kWarps - 1) / kWarps);
  const size_t smem = sizeof(float) * kWarps * n_expert;
  router_kernel<<<grid, kWarps * 32, smem, stream>>>(logits, n_tokens, n_expert, k,
                                                     mode == RouterMode::SoftmaxTopK, renorm, ids, weights);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
