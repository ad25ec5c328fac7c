// The small ops of the forward pass on the CPU: RMSNorm, RoPE, softmax,
// SwiGLU (plain and gpt-oss's clamped one), the MoE router's top-k, embedding rows, and the element-wise helpers.
// Attention has its own header (attention.h).
//
// Each op has a plain scalar reference (*_ref): the definition every fast path
// (here, and the CUDA kernels of src/cuda) is tested against. The versions
// without suffix are the ones the engine calls; they may differ from the
// reference by float reassociation only.
//
// Tensors are row-major f32 unless said otherwise. Semantics match the CUDA
// ops (src/cuda/ops.h) so the two backends can be compared op by op.
#pragma once
#include <cstdint>

#include "model/rope_router.h"  // RopeMode, RouterMode (header-only)
#include "quant/types.h"

namespace ms {

// ---------------------------------------------------------------- RMSNorm
// out = x / sqrt(mean(x^2) + eps) * w, over one row of n (w null: no scale).
// out may alias x.
void rmsnorm_ref(const float* x, const float* w, float* out, int64_t n, float eps);
void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps);

// ---------------------------------------------------------------- RoPE
// Rotary position embedding, in place, on x = [n_heads][head_dim] of one token
// at position `pos` (the pairing and angles: RopeMode and RopeScaling,
// model/rope_router.h: pair i turns by pos * rope_pair_scale(scaling, i) *
// theta_base^(-2i/n_rot), its cos/sin times scaling.mscale).
void rope_ref(float* x, int n_heads, int head_dim, int n_rot, int64_t pos, float theta_base,
              const RopeScaling& scaling, RopeMode mode);
// Same result from a table of (cos, sin) per pair for this position, built once
// per token and shared by q and k of every layer (rope_table, n_rot/2 pairs).
void rope_table(float* cs, int n_rot, int64_t pos, float theta_base, const RopeScaling& scaling);
void rope_apply(float* x, int n_heads, int head_dim, int n_rot, const float* cs, RopeMode mode);

// ---------------------------------------------------------------- softmax, SwiGLU
// In place, over n values; numerically stable (max subtracted).
void softmax_ref(float* x, int64_t n);
void softmax(float* x, int64_t n);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)). out may alias either.
void silu_mul_ref(const float* gate, const float* up, float* out, int64_t n);
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// gpt-oss's clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit),
// out = g * sigmoid(alpha * g) * (u + 1) (alpha 1.702, limit 7 in gpt-oss).
// The clamp bounds the product, which SwiGLU's would not be: outlier
// activations stay within what the down projection was trained on.
// out may alias either.
void swiglu_oai_ref(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);

// ---------------------------------------------------------------- router
// One token's router logits [n_expert] -> ids[k], weights[k], as RouterMode
// (model/rope_router.h) defines them.
void router_topk_ref(const float* logits, int n_expert, int k, RouterMode mode, bool renorm,
                     int32_t* ids, float* weights);

// ---------------------------------------------------------------- element-wise
// y += x
void add_inplace(float* y, const float* x, int64_t n);
// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);

// ---------------------------------------------------------------- embedding
// out = row `id` of a [n_rows][n] table of type t, dequantised to f32.
// Throws ms::Error if id is outside [0, n_rows).
void embed_row(DType t, const void* table, int64_t n_rows, int64_t n, int32_t id, float* out);

}  // namespace ms
