// Attention with grouped-query heads over a KV cache laid out
// [n_kv][ctx][head_dim] per layer (see kv_append in ops.h), of f16 (raw
// uint16_t bits), f32 elements or q8_0 blocks (ggml's block_q8_0, a row of
// head_dim elements = head_dim/32 blocks; head_dim a multiple of 32): each
// launcher has an overload per element type. Query head h uses KV head
// h / (n_head / n_kv). Decode arithmetic is f32; prefill over f16 and q8_0
// caches runs on tensor cores (f16 q, k, v and probabilities, f32 sums).
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"

namespace ms::cuda {

struct AttentionShape {
  int n_head = 0, n_kv = 0, head_dim = 0;  // head_dim even, <= 256; n_head / n_kv <= 16
  int64_t ctx = 0;                         // positions allocated per KV head in the cache
  float scale = 0.f;                       // usually 1/sqrt(head_dim)
};

// gpt-oss's variants of the softmax, as ms::AttentionExtras (src/cpu/attention.h):
// both off by default, which leaves every kernel's results as they were.
struct AttentionExtras {
  // Device [n_head] f32 logits or null: exp(sinks[h] - m) joins each softmax's
  // denominator (no value row); in the units of the scaled scores scale * q.k.
  const float* sinks = nullptr;
  // > 0: the query at position p sees keys p - window + 1 .. p only; key tiles
  // wholly outside every query's window are skipped. 0: full causal.
  int window = 0;
};

// Decode: one query token per call. q [n_head][head_dim] -> out [n_head][head_dim],
// attending to cache positions 0..kv_len-1. Split-K: the sequence is cut into
// chunks processed by separate blocks, then merged (log-sum-exp).
// kv_len (device, optional) overrides max_kv_len at run time, so one captured
// graph serves every step; max_kv_len (host) sizes the launch and the scratch.
// The kernels are programmatic dependent launches (cuda/pdl.cuh) that read
// kv_len, and past 1024 positions the cache rows before kv_len - 1, before
// they wait for the kernel ahead of them: that kernel may write q and the
// step's own row (kv_len - 1) only.
// scratch: zero-filled before its first use (it starts with counters that
// every call leaves at zero), then reused by every call as is.
size_t attention_decode_scratch_bytes(const AttentionShape& s, int max_kv_len);
// With a window the query is at position kv_len - 1 and sees the last
// min(kv_len, window) positions; the splits cover those only.
void attention_decode(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                      int max_kv_len, const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x = {});
void attention_decode(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
                      int max_kv_len, const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x = {});
void attention_decode(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
                      int max_kv_len, const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x = {});

// Causal prefill: q [n_tokens][n_head][head_dim] for positions pos0 ..
// pos0+n_tokens-1; the cache already holds positions 0 .. pos0+n_tokens-1.
// Token i attends to positions 0 .. pos0+i (or its window). out [n_tokens][n_head][head_dim].
// f16 and q8_0 caches: flash attention on tensor cores (attention_flash.cu)
// for head_dim a multiple of 8 up to 256 (16-byte aligned f16 caches);
// f32 caches and other f16 shapes: the f32 tiled kernel below.
void attention_prefill(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream, const AttentionExtras& x = {});
void attention_prefill(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream, const AttentionExtras& x = {});
void attention_prefill(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream, const AttentionExtras& x = {});

// The f32 tiled prefill kernel (no tensor cores) over an f16 cache, whatever
// attention_prefill picks: the baseline of the attention bench.
void attention_prefill_tiled(const AttentionShape& s, const float* q, const uint16_t* k_cache,
                             const uint16_t* v_cache, int n_tokens, int pos0, float* out, cudaStream_t stream,
                             const AttentionExtras& x = {});

// Throws ms::Error naming `who` unless head_dim fits a q8_0 cache (a multiple
// of 32, at most 256).
void check_q8_0_head_dim(const char* who, int head_dim);

}  // namespace ms::cuda
