// Rotary position embedding (normal and neox pairings), in place.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

// One thread per rotated pair; grid.y = token, grid.x covers heads * pairs.
__global__ void rope_kernel(float* x, int n_heads, int head_dim, int n_rot, const int32_t* __restrict__ positions,
                            double log2_base, RopeScaling scaling, bool neox) {
  const int t = blockIdx.y;
  const int half = n_rot / 2;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n_heads * half) return;
  const int h = idx / half, i = idx % half;
  // theta = pos * pair scale * base^(-2i/n_rot) reaches 1e4..1e5 radians at
  // long contexts, where float rounding alone is ~1e-3 rad: compute the angle
  // and its sine/cosine in double (a few per head; negligible cost).
  const double inv_freq = exp2(-2.0 * i / n_rot * log2_base);
  const double theta = static_cast<double>(positions[t]) * rope_pair_scale(scaling, i) * inv_freq;
  double sd, cd;
  sincos(theta, &sd, &cd);
  const float s = static_cast<float>(sd) * scaling.mscale, c = static_cast<float>(cd) * scaling.mscale;
  float* xh = x + (static_cast<int64_t>(t) * n_heads + h) * head_dim;
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = xh[a], x1 = xh[b];
  xh[a] = x0 * c - x1 * s;
  xh[b] = x0 * s + x1 * c;
}

}  // namespace

void rope(float* x, int n_tokens, int n_heads, int head_dim, int n_rot, const int32_t* positions, float theta_base,
          RopeScaling scaling, RopeMode mode, cudaStream_t stream) {
  if (n_tokens <= 0 || n_heads <= 0) return;
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0)
    throw Error("rope: n_rot " + std::to_string(n_rot) + " must be even and within head_dim " +
                std::to_string(head_dim));
  if (n_tokens > 65535) throw Error("rope: at most 65535 tokens per call");
  const int pairs = n_heads * (n_rot / 2);
  constexpr int kThreads = 128;
  const dim3 grid(static_cast<unsigned>((pairs + kThreads - 1) / kThreads), static_cast<unsigned>(n_tokens));
  rope_kernel<<<grid, kThreads, 0, stream>>>(x, n_heads, head_dim, n_rot, positions, std::log2(double(theta_base)), scaling,
                                             mode == RopeMode::Neox);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
