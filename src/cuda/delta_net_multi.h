// Gated DeltaNet steps over single tokens of several sequences (issue #31):
// row t of a step belongs to state slot slots[t]. A layer's states of N
// sequences: slot s's conv window at window_base + s * window_stride floats
// ([taps - 1][channels], oldest first) and its delta-rule state at S_base +
// s * state_stride floats ([n_v_heads][head_v][head_k]), the layouts of
// delta_net.h. The slots of one call must be distinct (each row advances its
// own state); a row whose slot is outside [0, n_slots) is skipped (its
// output rows are left as they were).
//
// Same formulas as conv1d_silu and delta_rule (delta_net.h) for one token, so
// each row gives the bits of those kernels run on its sequence alone.
// delta_prepare_qk, delta_gates and gated_rmsnorm are per row already; chunked
// prompts stay per sequence (delta_rule_prompt).
//
// CUDA-only header; device pointers; asynchronous, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cpu/delta_net.h"  // DeltaNetShape

namespace ms::cuda {

// out[t][c] = silu(sum_j w[c][j] * in_j) over the slot's window and x[t][c]
// (the newest tap), then the slot's window advances by x[t]. x rows of stride
// ld_x, out [n][channels]. taps in 2..16.
void conv1d_silu_multi(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, int taps,
                       float* window_base, int64_t window_stride, int n_slots, const int32_t* slots, float* out,
                       cudaStream_t stream);

// One step of the recurrence per row: prepared qkv rows (stride ld), g, beta
// [n][n_v_heads]; the slot's state updated; out [n][value_dim]. head_k <= 256.
void delta_rule_multi(const float* qkv, int64_t ld, const float* g, const float* beta, int n, const DeltaNetShape& s,
                      float* S_base, int64_t state_stride, int n_slots, const int32_t* slots, float* out,
                      cudaStream_t stream);

}  // namespace ms::cuda
