// KV cache appends and the fused attention prologue (q/k norm + RoPE + cache
// append) for a step over several sequences (issue #31): row t of the step
// goes to cache slot slots[t] at position positions[t]. A layer's caches of N
// sequences: slot s at base + s * slot_stride (units of the element type:
// f16 raw bits or f32 elements, or q8_0 blocks), each slot laid out as the
// single-sequence cache [n_kv][ctx][head_dim] (ops.h kv_append).
//
// Rows whose slot is outside [0, n_slots) or whose position is outside
// [0, ctx) write nothing to the cache. Same formulas as kv_append (ops.h)
// and batch_qk_prologue (backend/prefill_fused.h), so the same bits.
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/rope_router.h"
#include "quant/blocks.h"

namespace ms::cuda {

// k, v [n][n_kv][head_dim] f32 -> the slots' caches.
void kv_append_multi(const float* k, const float* v, int n, int n_kv, int head_dim, const int32_t* slots,
                     const int32_t* positions, uint16_t* k_base, uint16_t* v_base, int64_t slot_stride, int n_slots,
                     int64_t ctx, cudaStream_t stream);
void kv_append_multi(const float* k, const float* v, int n, int n_kv, int head_dim, const int32_t* slots,
                     const int32_t* positions, float* k_base, float* v_base, int64_t slot_stride, int n_slots,
                     int64_t ctx, cudaStream_t stream);
// q8_0 (head_dim a multiple of 32): each block quantized as kv_append does.
void kv_append_multi(const float* k, const float* v, int n, int n_kv, int head_dim, const int32_t* slots,
                     const int32_t* positions, BlockQ8_0* k_base, BlockQ8_0* v_base, int64_t slot_stride,
                     int n_slots, int64_t ctx, cudaStream_t stream);

// batch_qk_prologue with a slot per row: q [n][n_head][head_dim], k, v
// [n][n_kv][head_dim]; q and k heads RMSNorm'd (q_norm / k_norm, null: none)
// and RoPE'd at positions[t] in place, k and v rows appended to slot slots[t].
// f16 and f32 caches in one launch; q8_0: the norm + RoPE launch, then
// kv_append_multi.
void batch_qk_prologue_multi(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                             const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* slots,
                             const int32_t* positions, float theta_base, RopeScaling scaling, RopeMode mode,
                             uint16_t* k_base, uint16_t* v_base, int64_t slot_stride, int n_slots, int64_t ctx,
                             cudaStream_t stream);
void batch_qk_prologue_multi(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                             const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* slots,
                             const int32_t* positions, float theta_base, RopeScaling scaling, RopeMode mode,
                             float* k_base, float* v_base, int64_t slot_stride, int n_slots, int64_t ctx,
                             cudaStream_t stream);
void batch_qk_prologue_multi(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                             const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* slots,
                             const int32_t* positions, float theta_base, RopeScaling scaling, RopeMode mode,
                             BlockQ8_0* k_base, BlockQ8_0* v_base, int64_t slot_stride, int n_slots, int64_t ctx,
                             cudaStream_t stream);

}  // namespace ms::cuda
