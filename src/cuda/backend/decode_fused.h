// Fused kernels of the CUDA backend's decode step: several small ops of one
// token in one launch, where launch latency, not bytes, sets the time.
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/ops.h"

namespace ms::cuda {

// The attention prologue of one token. qkv = [n_head q heads | n_kv k heads |
// n_kv v heads] of head_dim floats each (one stacked Wq|Wk|Wv product).
//   q, k heads: RMSNorm over the head with q_norm / k_norm (null: none), then
//               RoPE at position[0] (as rope()), in place;
//   k, v heads: written to the cache (f16 or f32) at position[0] (as kv_append()).
// Equals rmsnorm + rmsnorm + rope + rope + kv_append of ops.h, in one launch.
void decode_qk_prologue(float* qkv, int n_head, int n_kv, int head_dim, const float* q_norm, const float* k_norm,
                        float eps, int n_rot, const int32_t* position, float theta_base, RopeScaling scaling,
                        RopeMode mode, uint16_t* k_cache, uint16_t* v_cache, int64_t ctx, cudaStream_t stream);
void decode_qk_prologue(float* qkv, int n_head, int n_kv, int head_dim, const float* q_norm, const float* k_norm,
                        float eps, int n_rot, const int32_t* position, float theta_base, RopeScaling scaling,
                        RopeMode mode, float* k_cache, float* v_cache, int64_t ctx, cudaStream_t stream);

// RMSNorm of one row of n floats (n a multiple of 32, at most 8192) with its
// Q8 quantization, as rmsnorm(x, w, out, 1, n, eps, stream, &q8) of ops.h
// (same formulas), by a block of 1024 threads instead of 256: the one-row
// case of decode, where the multi-row kernel leaves most of the block idle in
// serial per-block quantization. out may be null or alias x.
bool rmsnorm_row_supported(int64_t n);
void rmsnorm_row_q8(const float* x, const float* w, float* out, int64_t n, float eps, const Q8Act& q8,
                    cudaStream_t stream);

// The router of one token with f32 weights: logits = W x (W [n_expert][n],
// n a multiple of 4) then the top-k of router_topk() (same selection and
// weights), in one launch: a block per logit, and the last block to finish
// picks the experts. counter: one device uint32, zero before the first
// call; each call leaves it zero again (graph replays reuse it).
bool router_decode_supported(DType w_type, int n_expert, int64_t n, int k);
void router_decode_f32(const float* w, const float* x, int n_expert, int64_t n, int k, RouterMode mode, bool renorm,
                       float* logits, int32_t* ids, float* weights, uint32_t* counter, cudaStream_t stream);

}  // namespace ms::cuda
