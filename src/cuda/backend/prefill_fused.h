// Fused kernels of the CUDA backend's batched (prompt) forward pass: small
// per-token ops of a batch in one launch.
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/ops.h"

namespace ms::cuda {

// The attention prologue of n tokens (of one sequence, or of several: token
// t on slot slots[t] of the caches, slot_map.h): q [n][n_head][head_dim], k,
// v [n][n_kv][head_dim] (separate arrays, as the projections write them).
//   q, k heads: RMSNorm over the head with q_norm / k_norm (null: none), then
//               RoPE at positions[t] (as rope()), in place;
//   k, v heads: written to the token's cache at positions[t] (as kv_append()).
// Equals rmsnorm + rmsnorm + rope + rope + kv_append of ops.h: one launch
// for f16 and f32 caches; q8_0: the norm + RoPE launch, then kv_append. The
// decode step's one token: n = 1, q, k, v pointing into its stacked q|k|v
// row. A programmatic dependent launch (pdl.cuh).
void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, uint16_t* k_cache, uint16_t* v_cache,
                       int64_t ctx, cudaStream_t stream, const SlotMap& slots = {});
void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, float* k_cache, float* v_cache, int64_t ctx,
                       cudaStream_t stream, const SlotMap& slots = {});
void batch_qk_prologue(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                       const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* positions,
                       float theta_base, RopeScaling scaling, RopeMode mode, BlockQ8_0* k_cache, BlockQ8_0* v_cache,
                       int64_t ctx, cudaStream_t stream, const SlotMap& slots = {});

}  // namespace ms::cuda
