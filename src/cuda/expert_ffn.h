// Routed-expert FFN on the GPU for 1..N tokens, driven entirely by device data
// (expert ids and weights from router_topk): no host round trip, so a decode
// step can be captured in a CUDA graph.
//
// For token t with experts e_j = ids[t][j] and weights w_j:
//   out[t] = residual[t] + sum_j w_j * down_e( silu(gate_e x_t) * up_e x_t )
// (gpt-oss: with the experts' biases and clamped SwiGLU, ExpertWeights)
//
// One token (decode): gate+up of the k experts in one launch (SwiGLU fused),
// the Q8 of h, then down with the weighted sum (fixed order, deterministic)
// in one launch (matvec_combine; k <= 8 and no host rows, else down, then the sum).
// Several tokens: the (token, slot) pairs are grouped by expert on the device
// first. Batches of at least ExpertWeights::gemm_min_tokens tokens
// (cuda::kGemmMinTokens unless the caller says otherwise) with int8-GEMM weight types (gemm.h) on sm_80+ run each expert's tokens
// through the int8 tensor-core GEMM: gate+up in one launch over (row tile,
// expert, token tile), SwiGLU + Q8 quantization in one kernel, down, combine
// (4 launches after the grouping, whatever the number of experts). Smaller
// batches use the multi-vector matvec (weights read once per 8 tokens, 4 for
// the gate/up pair).
//
// CUDA-only header.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/expert_gate.h"
#include "cuda/launch_defaults.h"
#include "cuda/matvec.h"

namespace ms::cuda {

struct ExpertWeights {
  // gate, up: rows d_ff, cols d_model; down: rows d_model, cols d_ff.
  // Each addresses all n_expert experts (table of slots, or base + stride).
  MatrixSet gate, up, down;
  int n_expert = 0;
  // gpt-oss: optional f32 biases in device memory, indexed by the same expert
  // ids as the matrices (gate and up [n_expert][d_ff], down
  // [n_expert][d_model]; null: none), and the clamped SwiGLU
  //   h = min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1)
  // (cpu/ops.h: swiglu_oai). With either, gate and up are separate products
  // (the fused SwiGLU matvec has neither), then one bias + activation kernel;
  // d_ff must be a multiple of 32 there.
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  bool clamped_swiglu = false;
  float alpha = 1.702f, limit = 7.0f;
  // One token: the weighted sum in the down launch (matvec_combine); false:
  // down, then moe_combine (same bits; the backend's --no-fuse-decode).
  bool fused_decode = true;
  // Batches of at least this many tokens take the int8 GEMM path (<= 0:
  // never); the backend sets it from its Options::gemm_min_batch.
  int gemm_min_tokens = kGemmMinTokens;
  bool biased_or_clamped() const { return gate_bias || up_bias || down_bias || clamped_swiglu; }
};

size_t expert_ffn_scratch_bytes(const ExpertWeights& w, int n_tokens, int k);

// x [n_tokens][d_model] f32 (the normalised FFN input); x_q8 (optional) the same
// already quantized (e.g. by rmsnorm), used when gate/up take Q8. ids, weights:
// [n_tokens][k] device. residual (optional) may alias out. scratch: device
// memory of expert_ffn_scratch_bytes(w, n_tokens, k), 256-byte aligned.
// Ids outside [0, n_expert) are clamped into range (the router never makes one).
// host (one token only, optional): the experts j whose bit is set in *mask
// were computed elsewhere (the CPU); their outputs y + j * d_model replace
// the GPU's in the weighted sum (expert_gate.h). Their ids must still
// address readable weights (they are computed, then ignored).
// gate (optional): the sum first waits at this gate (expert_gate.h's
// gate_wait_rows, which fills y and *mask), so the rows may arrive while the
// GPU computes its experts.
struct HostRows {
  const float* y = nullptr;
  const uint32_t* mask = nullptr;  // device word
  const GateRows* gate = nullptr;  // optional: gate_wait_rows before the sum (it fills y and mask)
};
void expert_ffn(const ExpertWeights& w, const float* x, const Q8Act* x_q8, int n_tokens, int k, const int32_t* ids,
                const float* weights, const float* residual, float* out, void* scratch, size_t scratch_bytes,
                cudaStream_t stream, const HostRows* host = nullptr);

// The tiered step's device rows (engine/moe_step.h's waves): positions
// [first, first + rows), grouped by expert on the host (groups.offsets and
// groups.expert, one expert a group; max_groups groups, per_group the largest
// one's positions), position i taking token token_of[i]'s row of x and its
// down product going to output vector out_of[i] of y. The all-resident
// prompt step's kernels on them: gate and up in one int8 GEMM launch, then
// SwiGLU + Q8 in one kernel, then down, with no gather or scatter copies (the
// GEMM reads each position's token row in place and writes at out_of).
// h, u: f32 [position][d_ff]; h_q8: d_ff per position (position i at vector
// i). grouped_rows_ffn_supported(): int8 GEMM weight types for gate/up and
// down, no expert biases, d_ff a multiple of 32, an sm_80+ device.
struct GroupedRows {
  MatvecGroups groups;  // offsets, expert, max_groups, per_group (list and x_div unused)
  int first = 0, rows = 0;
  Q8Act x;                            // the pass's FFN input, vector t = token t
  const int32_t* token_of = nullptr;  // [position]
  const int32_t* out_of = nullptr;    // [position]
  float* h = nullptr;
  float* u = nullptr;
  Q8Act h_q8;
  float* y = nullptr;  // [output vector][d_model]
};
bool grouped_rows_ffn_supported(const ExpertWeights& w);
void grouped_rows_ffn(const ExpertWeights& w, const GroupedRows& a, cudaStream_t stream);

// The grouping step on its own (exposed for tests and for prefill callers):
// pairs p = t*k + j sorted by expert. n_groups[0] = number of distinct
// experts; group g has expert group_expert[g] and pairs list[offsets[g] ..
// offsets[g+1]); groups in increasing expert id. Arrays sized n_pairs,
// n_pairs (+1 for offsets). n_expert <= 4096.
void moe_group_by_expert(const int32_t* ids, int n_pairs, int n_expert, int32_t* n_groups, int32_t* group_expert,
                         int32_t* offsets, int32_t* list, cudaStream_t stream);

}  // namespace ms::cuda
