// The two per-architecture switches the forward pass hands down to its ops:
// how RoPE pairs dimensions and how router logits become expert weights.
// One definition for model/ (arch.h's table), the CPU ops (cpu/ops.h) and the
// CUDA kernels (cuda/ops.h). Dependency-free and C++17, so the CPU library
// (below model/ in the layering) and nvcc can include it.
#pragma once

namespace ms {

// RoPE: pair i of the first n_rot dims of each head turns by
// pos * freq_scale * theta_base^(-2i/n_rot).
//   Normal: pairs (2i, 2i+1)       (GGUF `llama`: q/k rows stored permuted)
//   Neox:   pairs (i, i + n_rot/2) (qwen2, qwen3, qwen3moe)
enum class RopeMode { Normal, Neox };

// Router: one token's logits [n_expert] -> k (expert id, weight) pairs in
// descending weight; ties go to the lower expert id.
//   SoftmaxTopK: p = softmax(logits) over all experts, keep the k largest,
//                renormalise them to sum 1 when `renorm` (Qwen3-MoE).
//   TopKSoftmax: keep the k largest logits, weights = softmax over those k
//                (Mixtral); `renorm` has no effect (they already sum to 1).
enum class RouterMode { SoftmaxTopK, TopKSoftmax };

}  // namespace ms
