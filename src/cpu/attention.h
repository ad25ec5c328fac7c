// Causal grouped-query attention over a KV cache, on the CPU.
//
// The cache of one layer holds k and v as [n_kv][ctx] rows of head_dim
// elements: IEEE halves (raw uint16_t), the layout of the CUDA backend
// (src/cuda/attention.h), so a cache can be compared between backends; or
// floats, for numerical parity checks where rounding K/V to half would
// dominate the error; or q8_0 blocks (head_dim/32 BlockQ8_0 a row, ggml's
// layout for `-ctk/-ctv q8_0`: half the memory of f16; head_dim a multiple of
// 32, which the KV cache checks). Each function comes in all three, picked by
// the cache's pointer type. Query head h uses KV head h / (n_head / n_kv).
// Q8_0 rows are read as d * q (the query stays f32): attention over a q8_0
// cache is attention over its dequantized values.
//
// AttentionExtras (gpt-oss) changes which keys a query sees and its softmax's
// denominator; the defaults (no sinks, no window) leave both as they were.
#pragma once
#include <cstdint>

#include "cpu/kv_rows.h"
#include "quant/blocks.h"

namespace ms {

class ThreadPool;

struct AttentionShape {
  int n_head = 0, n_kv = 0, head_dim = 0;  // n_head a multiple of n_kv
  int64_t ctx = 0;                         // positions allocated per KV head
  float scale = 0.f;                       // usually 1/sqrt(head_dim)
};

struct AttentionExtras {
  // Learned attention sinks, one logit per query head ([n_head], or null for
  // none): an extra term exp(sinks[h] - m) in each softmax denominator, with no
  // value row (probability mass that goes nowhere). sinks[h] is compared with
  // the scaled scores scale * q.k (llama.cpp's and transformers' convention);
  // m is the maximum over the scores and the sink.
  const float* sinks = nullptr;
  // Sliding window: > 0 lets the query at position p see keys p - window + 1
  // .. p only (llama.cpp's standard SWA: masked when p - j >= window; HF's
  // sliding_window). 0: every key 0 .. p (plain causal).
  int window = 0;
};

// q [n_tokens][n_head][head_dim] for positions pos0 .. pos0+n_tokens-1; the
// cache already holds positions 0 .. pos0+n_tokens-1. Token i attends to
// positions 0 .. pos0+i (or its window, see AttentionExtras).
// out [n_tokens][n_head][head_dim] (must not alias q).
// Accumulates in double: the reference the fast versions are tested against.
void attention_ref(const AttentionShape& s, const float* q, const uint16_t* k_cache,
                   const uint16_t* v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
void attention_ref(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
                   int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
void attention_ref(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
                   int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
// Same, threaded over (token, head) with SIMD dots where available. A window
// skips the keys before it (the work per query is at most `window` keys).
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const uint16_t* k_cache,
               const uint16_t* v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const float* k_cache,
               const float* v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const BlockQ8_0* k_cache,
               const BlockQ8_0* v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});

// The same over rows in pages (KvRows: a paged KV cache's block table; the
// pointer overloads above are the one-page case, s.ctx then unused): the
// same operations in the same order, so the results are bit-equal to a
// contiguous cache holding the same rows.
void attention_ref(const AttentionShape& s, const float* q, const KvRows<uint16_t>& k_cache,
                   const KvRows<uint16_t>& v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
void attention_ref(const AttentionShape& s, const float* q, const KvRows<float>& k_cache, const KvRows<float>& v_cache,
                   int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
void attention_ref(const AttentionShape& s, const float* q, const KvRows<BlockQ8_0>& k_cache,
                   const KvRows<BlockQ8_0>& v_cache, int n_tokens, int64_t pos0, float* out,
                   const AttentionExtras& x = {});
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<uint16_t>& k_cache,
               const KvRows<uint16_t>& v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<float>& k_cache,
               const KvRows<float>& v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x = {});
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<BlockQ8_0>& k_cache,
               const KvRows<BlockQ8_0>& v_cache, int n_tokens, int64_t pos0, float* out,
               const AttentionExtras& x = {});

// A token tree (speculative verification of several candidate
// continuations at once): token t of the batch is stored at slot pos0 + t
// (the cache holds slots 0 .. pos0+n_tokens-1), sits at position pos0 +
// depth(t) (its RoPE'd keys were written so) and attends to the prefix 0 ..
// pos0-1 and to the slots of its ancestors and its own only (parents[t]:
// the batch index of its parent, < t, or -1 for a child of the prefix;
// throws ms::Error otherwise). A window counts positions, not slots. The
// keys are visited in the order a cache holding the token's path at
// consecutive positions would give them, so the fast version's output for a
// token is bit-equal to attention()'s for that path.
void attention_tree_ref(const AttentionShape& s, const float* q, const KvRows<uint16_t>& k_cache,
                        const KvRows<uint16_t>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents,
                        float* out, const AttentionExtras& x = {});
void attention_tree_ref(const AttentionShape& s, const float* q, const KvRows<float>& k_cache,
                        const KvRows<float>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents, float* out,
                        const AttentionExtras& x = {});
void attention_tree_ref(const AttentionShape& s, const float* q, const KvRows<BlockQ8_0>& k_cache,
                        const KvRows<BlockQ8_0>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents,
                        float* out, const AttentionExtras& x = {});
void attention_tree(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<uint16_t>& k_cache,
                    const KvRows<uint16_t>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents, float* out,
                    const AttentionExtras& x = {});
void attention_tree(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<float>& k_cache,
                    const KvRows<float>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents, float* out,
                    const AttentionExtras& x = {});
void attention_tree(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<BlockQ8_0>& k_cache,
                    const KvRows<BlockQ8_0>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents, float* out,
                    const AttentionExtras& x = {});

// Writes f32 rows k, v [n_tokens][n_kv][head_dim] into the cache at positions
// pos0 .. pos0+n_tokens-1 (the caller checks they are < ctx): rounded to
// nearest-even halves, copied exactly, or quantized to q8_0 per block of 32
// (d = amax/127, q = round(x/d): quantize_row_act's Q8_0, src/quant).
void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              uint16_t* k_cache, uint16_t* v_cache);
void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              float* k_cache, float* v_cache);
void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              BlockQ8_0* k_cache, BlockQ8_0* v_cache);

void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              const KvRows<uint16_t>& k_cache, const KvRows<uint16_t>& v_cache);
void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              const KvRows<float>& k_cache, const KvRows<float>& v_cache);
void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              const KvRows<BlockQ8_0>& k_cache, const KvRows<BlockQ8_0>& v_cache);

}  // namespace ms
