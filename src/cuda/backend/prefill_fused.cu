// The fused attention prologue of any batch of tokens (see prefill_fused.h;
// the decode step's one token too). Same formulas as the
// separate ops (ops_norm.cu, ops_rope.cu, ops_embed_kv.cu).
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "cuda/backend/prefill_fused.h"
#include "cuda/backend/head_prologue.cuh"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "cuda/pdl.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

// Block (head b, token t): q heads, then k heads, then v heads; the cache
// rows of the token's slot. T: the cache's element type (__half or float);
// void: no cache writes (a q8_0 cache appends separately).
template <class T>
__global__ void __launch_bounds__(kHeadPrologueThreads) batch_qk_prologue_kernel(
    float* q, float* k, const float* v, int n_head, int n_kv, int hd, const float* __restrict__ q_norm,
    const float* __restrict__ k_norm, float eps, int n_rot, const int32_t* __restrict__ positions, double log2_base,
    RopeScaling scaling, bool neox, T* k_cache, T* v_cache, int64_t ctx, SlotMap m) {
  // Launched with programmatic dependent launch (pdl.cuh), as the matvecs
  // around it in a decode step: q, k and v are the previous kernel's output.
  dev::pdl_wait();
  dev::pdl_trigger();
  const int b = blockIdx.x, t = blockIdx.y;
  const int pos = __ldg(positions + t);
  const int slot = m.slots ? __ldg(m.slots + t) : 0;
  const bool write = k_cache != nullptr && pos >= 0 && pos < ctx && slot >= 0 && slot < m.n_slots;
  const int64_t off = write ? static_cast<int64_t>(slot) * m.stride : 0;
  if (b >= n_head + n_kv) {  // v head: cache only
    const int j = b - n_head - n_kv;
    if (write) dev::head_store_v(v + (static_cast<int64_t>(t) * n_kv + j) * hd, hd, v_cache + off, j, pos, ctx);
    return;
  }
  const bool is_q = b < n_head;
  const int j = is_q ? b : b - n_head;
  float* row = is_q ? q + (static_cast<int64_t>(t) * n_head + j) * hd : k + (static_cast<int64_t>(t) * n_kv + j) * hd;
  dev::head_norm_rope(row, hd, is_q ? q_norm : k_norm, eps, n_rot, pos, log2_base, scaling, neox,
                      is_q || !write ? static_cast<T*>(nullptr) : k_cache + off, j, ctx);
}

template <class T>
void batch_qk_prologue_impl(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                            const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                            float theta_base, RopeScaling scaling, RopeMode mode, T* k_cache, T* v_cache, int64_t ctx,
                            cudaStream_t stream, const SlotMap& m) {
  if (n <= 0 || n_head <= 0 || n_kv <= 0) return;
  if (n > 65535) throw Error("batch_qk_prologue: at most 65535 tokens per call, not " + std::to_string(n));
  if (m.n_slots <= 0 || m.stride < 0)
    throw Error("batch_qk_prologue: " + std::to_string(m.n_slots) + " slots of stride " + std::to_string(m.stride));
  check_head_prologue_args("batch_qk_prologue", head_dim, n_rot);
  // v heads only when the cache is written here
  const int heads = n_head + n_kv + (k_cache != nullptr ? n_kv : 0);
  const dim3 grid(static_cast<unsigned>(heads), static_cast<unsigned>(n));
  MS_CUDA_CHECK(launch_pdl(batch_qk_prologue_kernel<T>, grid, dim3(kHeadPrologueThreads), 0, stream, q, k, v, n_head,
                           n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions,
                           std::log2(static_cast<double>(theta_base)), scaling, mode == RopeMode::Neox, k_cache,
                           v_cache, ctx, m));
}

}  // namespace

void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, uint16_t* k_cache, uint16_t* v_cache,
                       int64_t ctx, cudaStream_t stream, const SlotMap& slots) {
  batch_qk_prologue_impl(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions, theta_base,
                         scaling, mode, reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache), ctx,
                         stream, slots);
}

void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, float* k_cache, float* v_cache, int64_t ctx,
                       cudaStream_t stream, const SlotMap& slots) {
  batch_qk_prologue_impl(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions, theta_base,
                         scaling, mode, k_cache, v_cache, ctx, stream, slots);
}

void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, BlockQ8_0* k_cache, BlockQ8_0* v_cache,
                       int64_t ctx, cudaStream_t stream, const SlotMap& slots) {
  if (n <= 0) return;
  if (head_dim % QK != 0)
    throw Error("batch_qk_prologue: a q8_0 KV cache needs head_dim a multiple of 32, not " +
                std::to_string(head_dim));
  // norm + RoPE in place (no cache), then the q8_0 append of the roped k and v
  batch_qk_prologue_impl<float>(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, positions,
                                theta_base, scaling, mode, nullptr, nullptr, ctx, stream, slots);
  kv_append(k, v, n, n_kv, head_dim, positions, k_cache, v_cache, ctx, stream, slots);
}

}  // namespace ms::cuda
