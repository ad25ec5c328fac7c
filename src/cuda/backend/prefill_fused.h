// Fused kernels of the CUDA backend's batched (prompt) forward pass: small
// per-token ops of a batch in one launch.
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/ops.h"

namespace ms::cuda {

// The attention prologue of n tokens: q [n][n_head][head_dim], k, v
// [n][n_kv][head_dim] (separate arrays, as the projections write them).
//   q, k heads: RMSNorm over the head with q_norm / k_norm (null: none), then
//               RoPE at positions[t] (as rope()), in place;
//   k, v heads: written to the cache (f16 or f32) at positions[t] (as kv_append()).
// Equals rmsnorm + rmsnorm + rope + rope + kv_append of ops.h, in one launch.
void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, uint16_t* k_cache, uint16_t* v_cache,
                       int64_t ctx, cudaStream_t stream);
void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, float* k_cache, float* v_cache, int64_t ctx,
                       cudaStream_t stream);

}  // namespace ms::cuda
