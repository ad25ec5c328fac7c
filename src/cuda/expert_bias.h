// gpt-oss's routed experts on rows laid out by a tiered step's waves: each
// row is one (token, expert) pair, its expert read through the pair index
// (rows of one wave need not share an expert). Two steps around the
// matrices, which the waves run as for any model:
//   after gate and up:  gate = act(gate + bg[e], up + bu[e])
//   after down:         y += bd[e]
// act is the clamped SwiGLU (cpu/ops.h: swiglu_oai) or silu(g) * u.
// cuda::expert_ffn applies the same on its own paths (resident experts and
// decode over the slot table); these are for callers that run the matrices
// themselves (cuda/backend/hybrid_*: the waves).
//
// CUDA-only header.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/expert_ffn.h"

namespace ms::cuda {

// A layer's expert biases in device memory ([n_expert][d_ff] gate and up,
// [n_expert][d_model] down; null: none) and its activation, as the slot
// table carries them (expert_slots.h) into ExpertWeights.
struct ExpertBias {
  const float* gate = nullptr;
  const float* up = nullptr;
  const float* down = nullptr;
  bool clamped_swiglu = false;
  float alpha = 1.702f, limit = 7.0f;
  void apply_to(ExpertWeights& w) const {
    w.gate_bias = gate;
    w.up_bias = up;
    w.down_bias = down;
    w.clamped_swiglu = clamped_swiglu;
    w.alpha = alpha;
    w.limit = limit;
  }
};

// n_rows rows; row r is pair pair_of_row[r] (null: pair r), whose expert is
// ids[pair] (clamped into [0, n_expert) as the expert kernels do).
struct ExpertRows {
  const int32_t* ids = nullptr;
  const int32_t* pair_of_row = nullptr;
  int n_rows = 0;
};

// gate [n_rows][d_ff] (w.gate.rows) = act(gate + gate bias, up + up bias),
// with w's biases and activation; up is only read. No-op for n_rows <= 0.
void expert_rows_act(const ExpertWeights& w, float* gate, const float* up, const ExpertRows& rows,
                     cudaStream_t stream);

// y [n_rows][d_model] (w.down.rows) += down bias of each row's expert;
// nothing when w has no down bias.
void expert_rows_down_bias(const ExpertWeights& w, float* y, const ExpertRows& rows, cudaStream_t stream);

}  // namespace ms::cuda
