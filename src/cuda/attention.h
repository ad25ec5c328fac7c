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

// Decode: a batch of query tokens, each attending to the cache of its
// sequence (issue #41: one kernel for one token of one sequence, one token
// each of several sequences, and a verify batch of several tokens of one
// sequence). Row r of q [n][n_head][head_dim] belongs to cache slot
// slots[r] and sees that slot's positions [0, kv_len[r]) (with a window: the
// last `window` of them). A verify batch is rows of one slot with increasing
// lengths pos + 1, their K/V rows appended before the launch: each attends
// causally to the positions up to its own. out [n][n_head][head_dim].
//
// A layer's caches of several sequences: slot s at base + s * slot_stride
// (units of the element type: f16 as raw uint16_t bits, f32 elements, q8_0
// blocks), each laid out [n_kv][ctx][head_dim]. slots and kv_len live in
// device memory and must be written before the step's kernels start (the
// kernels read them before waiting for the kernel ahead of them), so one
// captured graph replays with new slots and lengths: a join or a leave keeps
// the graph. A row whose slot is outside [0, n_slots) gets zeros.
struct DecodeRows {
  int n = 1;                        // rows (query tokens), at most 65535
  const int32_t* slots = nullptr;   // device [n]; null: every row on slot 0
  const int32_t* kv_len = nullptr;  // device [n]; null: every row sees max_kv_len positions
  int64_t slot_stride = 0;          // units of the element type between slots
  int n_slots = 1;
};

// Split-K (flash-decoding): each row's positions are cut into chunks
// processed by separate blocks, then merged (log-sum-exp). max_kv_len (host)
// bounds every row's length and sizes the launch: with device lengths one
// captured graph serves every step up to it. The kernels are programmatic
// dependent launches (cuda/pdl.cuh) that read the lengths and slots, and past
// 1024 positions the cache rows before kv_len - n, before they wait for the
// kernel ahead of them: that kernel may write q and the batch's own K/V rows
// only (a row's own, and in a verify batch those of its sequence's tokens
// before it: within the last n positions it sees).
// scratch: zero-filled before its first use (it starts with counters that
// every call leaves at zero), then reused by every call as is; sized for up
// to max_rows rows.
size_t attention_decode_scratch_bytes(const AttentionShape& s, int max_kv_len, int max_rows = 1);
void attention_decode(const AttentionShape& s, const float* q, const uint16_t* k_base, const uint16_t* v_base,
                      const DecodeRows& rows, int max_kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x = {});
void attention_decode(const AttentionShape& s, const float* q, const float* k_base, const float* v_base,
                      const DecodeRows& rows, int max_kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x = {});
void attention_decode(const AttentionShape& s, const float* q, const BlockQ8_0* k_base, const BlockQ8_0* v_base,
                      const DecodeRows& rows, int max_kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x = {});

// The batch of one: one query token of the sequence whose cache is k_cache /
// v_cache, seeing positions [0, *kv_len) (kv_len null: max_kv_len).
template <class T>
void attention_decode(const AttentionShape& s, const float* q, const T* k_cache, const T* v_cache, int max_kv_len,
                      const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x = {}) {
  DecodeRows one;
  one.kv_len = kv_len;
  attention_decode(s, q, k_cache, v_cache, one, max_kv_len, out, scratch, stream, x);
}

// Splits per (row, KV head) of the split-K fast path for n_rows rows of at
// most `span` visible positions: the one-row count, fewer as rows fill the
// device (tests pin the geometry with it).
int attention_decode_splits(const AttentionShape& s, int n_rows, int span);

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
