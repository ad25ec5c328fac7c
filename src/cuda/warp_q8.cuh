// The Q8 activation format's one rounding rule, for every kernel that
// produces Q8 activations (quantize_q8act, the fused norms, SwiGLU, decode MoE).
#pragma once
#include <cstdint>

#include "cuda/common.cuh"

namespace ms::cuda::dev {

// Q8 of one block of 32 held by a warp (lane i holds element i): d = amax/127,
// q = round-half-even(v/d), and (d, d * sum of q) for the dot products'
// offset terms. Every Q8 activation producer uses this one formula, so
// fused and separate kernels round identically.
__device__ __forceinline__ void warp_q8(float v, int8_t* q, float2* ds, int lane) {
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.f;
  const int qi = amax > 0.f ? __float2int_rn(v / d) : 0;
  *q = static_cast<int8_t>(qi);
  const float sum = warp_sum(static_cast<float>(qi));
  if (lane == 0) *ds = make_float2(d, d * sum);
}

}  // namespace ms::cuda::dev
