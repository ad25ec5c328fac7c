// Small element-wise ops of the gated parts of hybrids (qwen35moe) and gpt-oss's row biases: the
// attention output gate (Wq yields per head [q | gate]) and the shared
// expert's sigmoid scale. The CPU recipe they mirror is
// src/engine/cpu_backend.cpp (attention_block's gate, shared_expert).
//
// CUDA-only header. Pointers are device pointers; launchers are asynchronous
// on `stream`, allocate nothing and never synchronise (graph capturable).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ms::cuda {

// Splits n rows of src = [n_head x [q | gate] (2 * head_dim each) | rest]
// into dst = [n_head x q | rest] and gate = [n_head x gate]:
//   dst[t]  : q_dim + rest floats (q heads packed, then `rest` copied as is)
//   gate[t] : q_dim floats
// with q_dim = n_head * head_dim. `rest` carries k and v when one stacked
// Wq|Wk|Wv product made the row (decode), 0 otherwise. src may not alias
// dst or gate.
void split_q_gate(const float* src, int n, int n_head, int head_dim, int64_t rest, float* dst, float* gate,
                  cudaStream_t stream);

// x[i] *= sigmoid(gate[i]) for count elements (the attention output gate).
void mul_sigmoid(float* x, const float* gate, int64_t count, cudaStream_t stream);

// x[t][c] += bias[c] for n rows of `width` (gpt-oss: the attention output's
// and the router's biases, one launch for a batch).
void add_row_bias(float* x, const float* bias, int n, int64_t width, cudaStream_t stream);

// x[t][c] *= sigmoid(score[t]) for n rows of `width` (the shared expert's
// gate, applied to its SwiGLU activations before the down projection: the
// product is linear, so this equals scaling its output).
void scale_rows_sigmoid(float* x, const float* score, int n, int64_t width, cudaStream_t stream);

}  // namespace ms::cuda
