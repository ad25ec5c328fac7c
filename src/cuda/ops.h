// Element-wise and small ops of the forward pass on the GPU: RMSNorm, RoPE,
// router top-k, SwiGLU, residual adds, the weighted sum of expert outputs,
// embedding rows, KV cache appends.
//
// CUDA-only header. Pointers are device pointers; all launchers are
// asynchronous on `stream`, allocate nothing and never synchronise (CUDA graph
// capturable). Tensors are row-major f32 unless said otherwise; the KV cache
// is f16 (raw uint16_t bits) or f32.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/matvec.h"
#include "model/rope_router.h"  // RopeMode, RouterMode: ms::, shared with model/ and cpu/
#include "quant/blocks.h"
#include "quant/types.h"

namespace ms::cuda {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for `rows` rows of n (w null:
// no scale). out may alias x, and may be null when only q8 is wanted; q8
// (optional, n a multiple of 32, laid out for n) receives the result
// quantized for the matvec, saving a separate quantize launch.
void rmsnorm(const float* x, const float* w, float* out, int64_t rows, int64_t n, float eps,
             cudaStream_t stream, const Q8Act* q8 = nullptr);

// out = a + b (count elements; out may alias a or b).
void add(const float* a, const float* b, float* out, int64_t count, cudaStream_t stream);
// out = silu(gate) * up (out may alias either).
void silu_mul(const float* gate, const float* up, float* out, int64_t count, cudaStream_t stream);

// Rotary position embedding, in place, on x = [n_tokens][n_heads][head_dim];
// token t is at position positions[t]; the first n_rot dims of each head are
// rotated with angle pos * rope_pair_scale(scaling, i) * base^(-2i/n_rot) for
// pair i, cos/sin times scaling.mscale (model/rope_router.h), paired
// as RopeMode says.
void rope(float* x, int n_tokens, int n_heads, int head_dim, int n_rot, const int32_t* positions,
          float theta_base, RopeScaling scaling, RopeMode mode, cudaStream_t stream);

// Router: logits [n_tokens][n_expert] -> ids [n_tokens][k], weights [n_tokens][k]
// (descending weight; ties go to the lower expert id), as RouterMode says.
// n_expert <= 1024, k <= 32 and k <= n_expert.
void router_topk(const float* logits, int n_tokens, int n_expert, int k, RouterMode mode, bool renorm,
                 int32_t* ids, float* weights, cudaStream_t stream);

// out[t][c] = residual[t][c] + sum_j weights[t*k + j] * y[(t*k + j)*n + c]
// (residual optional; may alias out).
void moe_combine(const float* y, const float* weights, int n_tokens, int k, int64_t n, const float* residual,
                 float* out, cudaStream_t stream);

// dst[rows[i]] = src[i] for i < n_rows, rows of n floats (rows: device ids,
// distinct, within dst). Places rows computed elsewhere (the CPU's experts).
void scatter_rows(const float* src, const int32_t* rows, int n_rows, int64_t n, float* dst, cudaStream_t stream);
// dst[i] = src[rows[i]] for i < n_rows (rows: device ids within src).
void gather_rows(const float* src, const int32_t* rows, int n_rows, int64_t n, float* dst, cudaStream_t stream);

// out[t] = row ids[t] of `table` ([n_vocab][n] of type t), dequantised to f32.
// Supports F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4. An id outside
// [0, n_vocab) gives a row of zeros (the tokenizer never makes one).
bool embed_supported(DType t);
void embed_rows(DType t, const void* table, int64_t n_vocab, int64_t n, const int32_t* ids, int n_tokens,
                float* out, cudaStream_t stream);

// KV cache of one layer: k_cache, v_cache = [n_kv][ctx][head_dim] of f16
// (raw bits, rounded to nearest even) or f32 (stored exactly). Writes the f32
// rows k, v = [n_tokens][n_kv][head_dim] at positions[t]; positions outside
// [0, ctx) are skipped.
void kv_append(const float* k, const float* v, int n_tokens, int n_kv, int head_dim, const int32_t* positions,
               uint16_t* k_cache, uint16_t* v_cache, int64_t ctx, cudaStream_t stream);
void kv_append(const float* k, const float* v, int n_tokens, int n_kv, int head_dim, const int32_t* positions,
               float* k_cache, float* v_cache, int64_t ctx, cudaStream_t stream);
// q8_0 cache ([n_kv][ctx][head_dim/32] blocks; head_dim a multiple of 32):
// each block of 32 quantized as the CPU cache does (quantize_row_act Q8_0:
// d = amax/127 stored as f16, q = round(x / d) with the f32 d).
void kv_append(const float* k, const float* v, int n_tokens, int n_kv, int head_dim, const int32_t* positions,
               BlockQ8_0* k_cache, BlockQ8_0* v_cache, int64_t ctx, cudaStream_t stream);

}  // namespace ms::cuda
