// Fused prompt-batch kernels (see prefill_fused.h). Same formulas as the
// separate ops (ops_norm.cu, ops_rope.cu, ops_embed_kv.cu).
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "cuda/backend/prefill_fused.h"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;

// Block (head b, token t): q heads, then k heads, then v heads. T: the
// cache's element type (__half or float).
template <class T>
__global__ void __launch_bounds__(kThreads) batch_qk_prologue_kernel(
    float* q, float* k, const float* v, int n_head, int n_kv, int hd, const float* __restrict__ q_norm,
    const float* __restrict__ k_norm, float eps, int n_rot, const int32_t* __restrict__ positions, double log2_base,
    float freq_scale, bool neox, T* k_cache, T* v_cache, int64_t ctx) {
  __shared__ float buf[kMaxHeadDim];
  __shared__ float scratch[32];
  const int b = blockIdx.x, t = blockIdx.y;
  const int pos = __ldg(positions + t);
  const bool pos_ok = pos >= 0 && pos < ctx;
  if (b >= n_head + n_kv) {  // v head: cache only
    const int j = b - n_head - n_kv;
    if (!pos_ok) return;
    const float* row = v + (static_cast<int64_t>(t) * n_kv + j) * hd;
    for (int d = threadIdx.x; d < hd; d += kThreads)
      v_cache[(static_cast<int64_t>(j) * ctx + pos) * hd + d] = dev::KvElem<T>::from_float(row[d]);
    return;
  }
  const bool is_q = b < n_head;
  const int j = is_q ? b : b - n_head;
  float* row = is_q ? q + (static_cast<int64_t>(t) * n_head + j) * hd : k + (static_cast<int64_t>(t) * n_kv + j) * hd;
  const float* w = is_q ? q_norm : k_norm;
  float ss = 0.f;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    const float x = row[d];
    buf[d] = x;
    ss += x * x;
  }
  if (w != nullptr) {
    ss = dev::block_sum(ss, scratch);  // synchronises: buf is complete
    const float inv = rsqrtf(ss / static_cast<float>(hd) + eps);
    for (int d = threadIdx.x; d < hd; d += kThreads) buf[d] = buf[d] * inv * w[d];
  }
  __syncthreads();
  const int half = n_rot / 2;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    // As rope(): the angle and its sine/cosine in double.
    const double inv_freq = exp2(-2.0 * i / n_rot * log2_base);
    const double theta = static_cast<double>(pos) * freq_scale * inv_freq;
    double sd, cd;
    sincos(theta, &sd, &cd);
    const float s = static_cast<float>(sd), c = static_cast<float>(cd);
    const int a = neox ? i : 2 * i, bb = neox ? i + half : 2 * i + 1;
    const float x0 = buf[a], x1 = buf[bb];
    buf[a] = x0 * c - x1 * s;
    buf[bb] = x0 * s + x1 * c;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    row[d] = buf[d];
    if (!is_q && pos_ok) k_cache[(static_cast<int64_t>(j) * ctx + pos) * hd + d] = dev::KvElem<T>::from_float(buf[d]);
  }
}

template <class T>
void batch_qk_prologue_impl(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                            const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                            float theta_base, float freq_scale, RopeMode mode, T* k_cache, T* v_cache, int64_t ctx,
                            cudaStream_t stream) {
  if (n <= 0 || n_head <= 0 || n_kv <= 0) return;
  if (n > 65535) throw Error("batch_qk_prologue: at most 65535 tokens per call");
  if (head_dim <= 0 || head_dim > kMaxHeadDim)
    throw Error("batch_qk_prologue: head_dim " + std::to_string(head_dim) + " outside 1.." +
                std::to_string(kMaxHeadDim));
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0)
    throw Error("batch_qk_prologue: n_rot " + std::to_string(n_rot) + " must be even and within head_dim");
  const dim3 grid(static_cast<unsigned>(n_head + 2 * n_kv), static_cast<unsigned>(n));
  batch_qk_prologue_kernel<T><<<grid, kThreads, 0, stream>>>(
      q, k, v, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions, std::log2(static_cast<double>(theta_base)),
      freq_scale, mode == RopeMode::Neox, k_cache, v_cache, ctx);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, float freq_scale, RopeMode mode, uint16_t* k_cache, uint16_t* v_cache,
                       int64_t ctx, cudaStream_t stream) {
  batch_qk_prologue_impl(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions, theta_base,
                         freq_scale, mode, reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache), ctx,
                         stream);
}

void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, float freq_scale, RopeMode mode, float* k_cache, float* v_cache, int64_t ctx,
                       cudaStream_t stream) {
  batch_qk_prologue_impl(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions, theta_base,
                         freq_scale, mode, k_cache, v_cache, ctx, stream);
}

}  // namespace ms::cuda
