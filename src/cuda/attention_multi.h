// Decode attention over the caches of several sequences in one launch (the
// CUDA backend's multi-sequence steps, issue #31): query row t of a step
// belongs to cache slot slots[t] and attends its positions [0, kv_len[t]).
//
// A layer's caches of N sequences: slot s at base + s * slot_stride, the
// stride in units of the element type (f16 as raw uint16_t bits or f32
// elements; q8_0 blocks), each slot laid out as attention_decode's
// single-sequence cache [n_kv][ctx][head_dim]. slots and kv_len live in device
// memory, so one captured graph replays with new values; max_span (host)
// bounds every kv_len and sizes the split.
//
// The split-K (flash-decoding) kernel body of attention_decode's fast path
// (attention_decode_fast.cuh, shared), with one more grid dimension (the row): for a row
// whose launch has as many splits as the single-sequence call would use, the
// result is bit-equal to attention_decode's fast path. The tensor-core long
// kernel (attention_decode_long.cu) is not used: past 1024 positions the
// rows run the fast path's long geometry.
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/attention.h"
#include "quant/blocks.h"

namespace ms::cuda {

// The shapes served: head_dim 64, 128 or 256; n_head / n_kv in 1, 2, 4, 8,
// 16 with (n_head / n_kv) * head_dim <= 4096. Others: run attention_decode
// row by row.
bool attention_decode_multi_supported(const AttentionShape& s);

// Splits per (row, KV head) of a launch of n_rows rows whose visible length
// is at most `span`: attention_decode's fast-path count for one row, fewer as
// rows fill the device (so the partials stay bounded).
int attention_decode_multi_splits(const AttentionShape& s, int n_rows, int span);

// Scratch for any launch of up to max_rows rows and max_span positions. It
// holds only partials (no counters): no zero-fill needed.
size_t attention_decode_multi_scratch_bytes(const AttentionShape& s, int max_rows, int max_span);

// q [n_rows][n_head][head_dim] -> out [n_rows][n_head][head_dim]. Row t:
// slot slots[t], positions [0, min(kv_len[t], max_span)) (with a window: the
// last `window` of them, as attention_decode). A row whose slot is outside
// [0, n_slots) or whose length is <= 0 gets zeros. n_rows and max_span within
// the scratch's sizing (not checked on the device).
void attention_decode_multi(const AttentionShape& s, const float* q, const uint16_t* k_base, const uint16_t* v_base,
                            int64_t slot_stride, int n_slots, int n_rows, const int32_t* slots, const int32_t* kv_len,
                            int max_span, float* out, void* scratch, cudaStream_t stream,
                            const AttentionExtras& x = {});
void attention_decode_multi(const AttentionShape& s, const float* q, const float* k_base, const float* v_base,
                            int64_t slot_stride, int n_slots, int n_rows, const int32_t* slots, const int32_t* kv_len,
                            int max_span, float* out, void* scratch, cudaStream_t stream,
                            const AttentionExtras& x = {});
void attention_decode_multi(const AttentionShape& s, const float* q, const BlockQ8_0* k_base,
                            const BlockQ8_0* v_base, int64_t slot_stride, int n_slots, int n_rows,
                            const int32_t* slots, const int32_t* kv_len, int max_span, float* out, void* scratch,
                            cudaStream_t stream, const AttentionExtras& x = {});

}  // namespace ms::cuda
