// Router: softmax / top-k / renormalisation of expert logits, one warp per token.
#include <cfloat>
#include <string>

#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/ops.h"
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
  float mx = -FLT_MAX;
  for (int e = lane; e < n_expert; e += 32) {
    v[e] = lt[e];
    mx = fmaxf(mx, v[e]);
  }
  mx = dev::warp_max(mx);
  float total = 1.f;
  if (softmax_first) {
    float s = 0.f;
    for (int e = lane; e < n_expert; e += 32) {
      v[e] = expf(v[e] - mx);
      s += v[e];
    }
    total = dev::warp_sum(s);
  }
  __syncwarp();
  float picked_sum = 0.f, first = 0.f, my_w = 0.f;
  int my_id = 0;
  for (int j = 0; j < k; ++j) {
    float best = -FLT_MAX;
    int best_e = 0x7fffffff;
    for (int e = lane; e < n_expert; e += 32) {
      const float x = v[e];
      if (x > best) { best = x; best_e = e; }  // strided scan: first hit is the lowest index
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(dev::kFullMask, best, o);
      const int oe = __shfl_xor_sync(dev::kFullMask, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) { best = ob; best_e = oe; }
    }
    float w;
    if (softmax_first) {
      w = best / total;
    } else {
      if (j == 0) first = best;
      w = expf(best - first);  // softmax over the picked logits; first is their max
    }
    picked_sum += w;
    if (lane == j) { my_w = w; my_id = best_e; }
    __syncwarp();
    if (lane == 0) v[best_e] = -FLT_MAX;
    __syncwarp();
  }
  if (lane < k) {
    const bool norm = softmax_first ? renorm : true;
    ids[static_cast<int64_t>(t) * k + lane] = my_id;
    weights[static_cast<int64_t>(t) * k + lane] = norm ? my_w / picked_sum : my_w;
  }
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
