// Causal grouped-query attention over a KV cache, on the CPU.
//
// The cache of one layer holds k and v as [n_kv][ctx][head_dim] elements:
// IEEE halves (raw uint16_t), the layout of the CUDA backend
// (src/cuda/attention.h), so a cache can be compared between backends; or
// floats, for numerical parity checks where rounding K/V to half would
// dominate the error. Each function comes in both, picked by the cache's
// pointer type. Query head h uses KV head h / (n_head / n_kv).
#pragma once
#include <cstdint>

namespace ms {

class ThreadPool;

struct AttentionShape {
  int n_head = 0, n_kv = 0, head_dim = 0;  // n_head a multiple of n_kv
  int64_t ctx = 0;                         // positions allocated per KV head
  float scale = 0.f;                       // usually 1/sqrt(head_dim)
};

// q [n_tokens][n_head][head_dim] for positions pos0 .. pos0+n_tokens-1; the
// cache already holds positions 0 .. pos0+n_tokens-1. Token i attends to
// positions 0 .. pos0+i. out [n_tokens][n_head][head_dim] (must not alias q).
// Accumulates in double: the reference the fast versions are tested against.
void attention_ref(const AttentionShape& s, const float* q, const uint16_t* k_cache,
                   const uint16_t* v_cache, int n_tokens, int64_t pos0, float* out);
void attention_ref(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
                   int n_tokens, int64_t pos0, float* out);
// Same, threaded over (token, head) with SIMD dots where available.
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const uint16_t* k_cache,
               const uint16_t* v_cache, int n_tokens, int64_t pos0, float* out);
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const float* k_cache,
               const float* v_cache, int n_tokens, int64_t pos0, float* out);

// Writes f32 rows k, v [n_tokens][n_kv][head_dim] into the cache at positions
// pos0 .. pos0+n_tokens-1 (the caller checks they are < ctx): rounded to
// nearest-even halves, or copied exactly.
void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              uint16_t* k_cache, uint16_t* v_cache);
void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              float* k_cache, float* v_cache);

}  // namespace ms
