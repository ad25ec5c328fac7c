// Decode attention at long contexts on tensor cores (attention_decode_long.cu),
// used by attention_decode (attention_decode.cu) for f16 and q8_0 caches when
// the visible length passes kMinLen. Internal to the CUDA kernels.
//
// launch() writes partials: per query head h and split s, an unnormalised
// output part_o[h][s][head_dim] with its {max (log2 units), sum} in
// part_ml[h][s]; merge() turns them into the output (and adds the sinks).
// Both are programmatic dependent launches (pdl.cuh): each waits for the
// kernel before it and lets the one after it launch early.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/attention.h"
#include "quant/blocks.h"

namespace ms::cuda::decode_long {

// Above this many visible positions (the launch's max_kv_len, or the window)
// the long kernel runs; at or below it the split-K fast path keeps serving
// (its short-context geometry was tuned for one block step per split).
constexpr int kMinLen = 1024;

// Whether the long kernel can serve this shape and cache (head_dim 64, 128 or
// 256; n_head / n_kv in 1, 2, 4, 8, 16, at most 8 heads of 256; an sm_80+
// device; f16 caches 16-byte aligned). Length aside: see kMinLen.
bool usable(const AttentionShape& s, const uint16_t* k_cache, const uint16_t* v_cache);
bool usable(const AttentionShape& s, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache);

// Splits per KV head for `len` visible positions: one per 64 positions, at
// most as many blocks as the device runs at once (their shared memory bounds
// them). max_splits bounds every call's count for lengths up to `len`,
// whatever the cache type (scratch sizing).
int splits(const AttentionShape& s, int len, bool q8_0);
int max_splits(const AttentionShape& s, int len);

// Launches the kernel over n_split splits per KV head (from splits(); the
// positions each covers follow the device kv_len, as in attention_decode).
void launch(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
            int max_kv_len, const int32_t* kv_len, int window, int n_split, float* part_o, float2* part_ml,
            cudaStream_t stream);
void launch(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
            int max_kv_len, const int32_t* kv_len, int window, int n_split, float* part_o, float2* part_ml,
            cudaStream_t stream);

// out [n_head][head_dim] from launch()'s n_split partials, with the sinks
// (device [n_head] or null, as AttentionExtras::sinks).
void merge(const AttentionShape& s, const float* part_o, const float2* part_ml, int n_split, const float* sinks,
           float* out, cudaStream_t stream);

}  // namespace ms::cuda::decode_long
