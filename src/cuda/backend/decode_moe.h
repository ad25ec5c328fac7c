// Fused kernels of the CUDA backend's MoE decode step (one token). Decode is
// bound by launches and latency, not bytes (bench/results/cuda_bench.md), so
// these merge the routed-expert FFN of a layer into three launches:
//
//   router_norm:   RMSNorm of h (+ Q8) and the router logits and top-k
//                  (replaces rmsnorm_row_q8 + router_decode_f32);
//   gate_up_q8:    SwiGLU of the k experts' gate/up rows, written as the Q8
//                  activations of down (replaces matvec_glu + quantize_q8act);
//   down_combine:  out = residual + sum_j w_j down_j(h_j), one warp per output
//                  row over all k experts, and optionally the next RMSNorm
//                  (+ Q8) of out by the block that finishes last (replaces
//                  matvec + moe_combine + rmsnorm_row_q8).
//
// Each computes what the separate ops compute, with the same formulas (gate_up_q8
// bit for bit; the others to float reassociation). No atomics on values, so
// results do not depend on scheduling: graph replay equals direct launches.
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/expert_ffn.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"

namespace ms::cuda {

// RMSNorm + Q8 of one row and the f32 router of the MoE layer on it.
//   x = h / sqrt(mean(h^2) + eps) * norm_w (norm_w null: no scale); x_out
//   (optional) and x_q8 receive it; logits = W x (W [n_expert][n] f32);
//   ids, weights: the top k as router_topk() picks them.
// counter: one device uint32, zero before the first call, zero after each.
bool router_norm_decode_supported(DType w_type, int n_expert, int64_t n, int k);
void router_norm_decode(const float* h, const float* norm_w, float eps, const float* w, int n_expert, int64_t n,
                        int k, RouterMode mode, bool renorm, float* x_out, const Q8Act& x_q8, float* logits,
                        int32_t* ids, float* weights, uint32_t* counter, cudaStream_t stream);

// h_j = silu(gate_e x) * (up_e x) for the k experts e = ids[j] (clamped into
// [0, n_expert)), quantized like quantize_q8act into h_q8 (k vectors of d_ff);
// h_f32 (optional) receives the floats. Quantized expert types, d_ff % 32 == 0.
bool gate_up_q8_decode_supported(const ExpertWeights& w);
void gate_up_q8_decode(const ExpertWeights& w, const Q8Act& x_q8, const int32_t* ids, int k, const Q8Act& h_q8,
                       float* h_f32, cudaStream_t stream);

// The RMSNorm that follows (the next layer's attention norm, or the output
// norm) done by the last block of down_combine_decode.
struct NextNorm {
  const float* w = nullptr;  // norm weights (null: none)
  float eps = 0.f;
  float* x_out = nullptr;    // optional f32 output
  Q8Act x_q8;                // Q8 output (required)
  uint32_t* counter = nullptr;  // one device uint32, zero before and after each call
};

// out[r] = residual[r] + sum_j weights[j] * (down_e_j row r . h_j) for the d_model
// rows (residual optional; it may alias out); then, when next is given, its
// RMSNorm of out. Quantized down types.
bool down_combine_decode_supported(const ExpertWeights& w);
void down_combine_decode(const ExpertWeights& w, const Q8Act& h_q8, const int32_t* ids, const float* weights, int k,
                         const float* residual, float* out, const NextNorm* next, cudaStream_t stream);

}  // namespace ms::cuda
