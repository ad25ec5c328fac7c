// RMSNorm, optionally writing Q8 activations for the next matvec as well.
#include <string>

#include "cuda/common.cuh"
#include "cuda/warp_q8.cuh"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const float* x, const float* __restrict__ w,
                                                           float* out, int64_t n, float eps, int8_t* q, float2* ds) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) ss += xr[i] * xr[i];
  ss = dev::block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  if (q == nullptr) {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) out[row * n + i] = xr[i] * inv * (w ? w[i] : 1.f);
    return;
  }
  // Q8 output: warp per block of 32 (n % 32 == 0 checked by the host).
  const int lane = threadIdx.x % 32;
  const int64_t nb = n / 32;
  for (int64_t b = threadIdx.x / 32; b < nb; b += kThreads / 32) {
    const int64_t i = b * 32 + lane;
    const float v = xr[i] * inv * (w ? w[i] : 1.f);
    if (out) out[row * n + i] = v;  // after the reads of xr (out may alias x): same thread, same i
    dev::warp_q8(v, q + row * n + i, ds + row * nb + b, lane);
  }
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* out, int64_t rows, int64_t n, float eps, cudaStream_t stream,
             const Q8Act* q8) {
  if (rows <= 0 || n <= 0) return;
  if (rows > 0x7fffffff) throw Error("rmsnorm: too many rows");
  int8_t* q = nullptr;
  float2* ds = nullptr;
  if (q8 != nullptr) {
    if (n % 32 != 0 || q8->n != n)
      throw Error("rmsnorm: Q8 output needs n a multiple of 32 and a Q8Act laid out for n = " + std::to_string(n));
    q = q8->q;
    ds = reinterpret_cast<float2*>(q8->ds);
  } else if (out == nullptr) {
    throw Error("rmsnorm: no output given");
  }
  rmsnorm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, out, n, eps, q, ds);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
