// Fused prompt-batch kernels (see prefill_fused.h). Same formulas as the
// separate ops (ops_norm.cu, ops_rope.cu, ops_embed_kv.cu).
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "cuda/backend/prefill_fused.h"
#include "cuda/backend/head_prologue.cuh"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

// Block (head b, token t): q heads, then k heads, then v heads. T: the
// cache's element type (__half or float).
template <class T>
__global__ void __launch_bounds__(kHeadPrologueThreads) batch_qk_prologue_kernel(
    float* q, float* k, const float* v, int n_head, int n_kv, int hd, const float* __restrict__ q_norm,
    const float* __restrict__ k_norm, float eps, int n_rot, const int32_t* __restrict__ positions, double log2_base,
    RopeScaling scaling, bool neox, T* k_cache, T* v_cache, int64_t ctx) {
  const int b = blockIdx.x, t = blockIdx.y;
  const int pos = __ldg(positions + t);
  const bool pos_ok = pos >= 0 && pos < ctx;
  if (b >= n_head + n_kv) {  // v head: cache only
    const int j = b - n_head - n_kv;
    if (pos_ok) dev::head_store_v(v + (static_cast<int64_t>(t) * n_kv + j) * hd, hd, v_cache, j, pos, ctx);
    return;
  }
  const bool is_q = b < n_head;
  const int j = is_q ? b : b - n_head;
  float* row = is_q ? q + (static_cast<int64_t>(t) * n_head + j) * hd : k + (static_cast<int64_t>(t) * n_kv + j) * hd;
  dev::head_norm_rope(row, hd, is_q ? q_norm : k_norm, eps, n_rot, pos, log2_base, scaling, neox,
                      is_q || !pos_ok ? static_cast<T*>(nullptr) : k_cache, j, ctx);
}

template <class T>
void batch_qk_prologue_impl(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                            const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                            float theta_base, RopeScaling scaling, RopeMode mode, T* k_cache, T* v_cache, int64_t ctx,
                            cudaStream_t stream) {
  if (n <= 0 || n_head <= 0 || n_kv <= 0) return;
  if (n > 65535) throw Error("batch_qk_prologue: at most 65535 tokens per call");
  check_head_prologue_args("batch_qk_prologue", head_dim, n_rot);
  const dim3 grid(static_cast<unsigned>(n_head + 2 * n_kv), static_cast<unsigned>(n));
  batch_qk_prologue_kernel<T><<<grid, kHeadPrologueThreads, 0, stream>>>(
      q, k, v, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions, std::log2(static_cast<double>(theta_base)),
      scaling, mode == RopeMode::Neox, k_cache, v_cache, ctx);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, uint16_t* k_cache, uint16_t* v_cache,
                       int64_t ctx, cudaStream_t stream) {
  batch_qk_prologue_impl(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions, theta_base,
                         scaling, mode, reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache), ctx,
                         stream);
}

void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, float* k_cache, float* v_cache, int64_t ctx,
                       cudaStream_t stream) {
  batch_qk_prologue_impl(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions, theta_base,
                         scaling, mode, k_cache, v_cache, ctx, stream);
}

}  // namespace ms::cuda
