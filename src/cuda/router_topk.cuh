// One warp's expert choice from a router's logits, shared by the router
// kernel (ops_router.cu) and the fused decode kernels (backend/decode_*.cu),
// so every path picks the same experts with the same weights.
#pragma once
#include <cfloat>

#include "cuda/common.cuh"

namespace ms::cuda::dev {

// Loads n_expert logits with load(e) into v (per-warp shared scratch,
// clobbered), then k rounds of arg-max (ties go to the lower index). Weights:
// softmax over all experts then the picked ones (renormalised if `renorm`),
// or, without softmax_first, softmax over the k picked logits. Lane j < k
// writes pick j to ids[j] / weights[j].
template <class Load>
__device__ __forceinline__ void warp_router_topk(float* v, Load load, int n_expert, int k, bool softmax_first,
                                                 bool renorm, int lane, int32_t* ids, float* weights) {
  float mx = -FLT_MAX;
  for (int e = lane; e < n_expert; e += 32) {
    v[e] = load(e);
    mx = fmaxf(mx, v[e]);
  }
  mx = warp_max(mx);
  float total = 1.f;
  if (softmax_first) {
    float s = 0.f;
    for (int e = lane; e < n_expert; e += 32) {
      v[e] = expf(v[e] - mx);
      s += v[e];
    }
    total = warp_sum(s);
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
      const float ob = __shfl_xor_sync(kFullMask, best, o);
      const int oe = __shfl_xor_sync(kFullMask, best_e, o);
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
  const bool norm = softmax_first ? renorm : true;
  if (lane < k) {
    ids[lane] = my_id;
    weights[lane] = norm ? my_w / picked_sum : my_w;
  }
}

}  // namespace ms::cuda::dev
