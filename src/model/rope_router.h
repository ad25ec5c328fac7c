// The two per-architecture switches the forward pass hands down to its ops:
// how RoPE pairs dimensions and how router logits become expert weights.
// One definition for model/ (arch.h's table), the CPU ops (cpu/ops.h) and the
// CUDA kernels (cuda/ops.h). Dependency-free and C++17, so the CPU library
// (below model/ in the layering) and nvcc can include it.
#pragma once

namespace ms {

// RoPE: pair i of the first n_rot dims of each head turns by
// pos * rope_pair_scale(scaling, i) * theta_base^(-2i/n_rot) (below).
//   Normal: pairs (2i, 2i+1)       (GGUF `llama`: q/k rows stored permuted)
//   Neox:   pairs (i, i + n_rot/2) (qwen2, qwen3, qwen3moe)
enum class RopeMode { Normal, Neox };

#if defined(__CUDACC__)
#define MS_ROPE_HD __host__ __device__
#else
#define MS_ROPE_HD
#endif

// RoPE frequency scaling, as llama.cpp applies a GGUF's rope.scaling.* keys
// (model/rope_scaling.h builds it). Pair i turns by
//   pos * pair_scale(i) * theta_base^(-2i/n_rot)
// and cos/sin are multiplied by `mscale`:
//   none:   pair_scale 1, mscale attn_factor (1)
//   linear: pair_scale freq_scale (= 1/factor) for every pair
//   YaRN:   a ramp between interpolation (freq_scale: the slow, low-frequency
//           pairs at i >= corr_high) and extrapolation (1: the fast pairs at
//           i <= corr_low), mixed by ext_factor; mscale carries the magnitude
//           correction 1 + 0.1 ln(factor) times the attention factor.
struct RopeScaling {
  RopeScaling() = default;
  // A bare float is linear scaling by it (what the ops took before YaRN).
  MS_ROPE_HD RopeScaling(float linear_freq_scale) : freq_scale(linear_freq_scale) {}

  float freq_scale = 1.0f;
  float ext_factor = 0.0f;  // 0: no YaRN ramp
  float corr_low = 0.0f, corr_high = 0.0f;  // pair indices where the ramp starts and ends
  float mscale = 1.0f;
  bool is_identity() const { return freq_scale == 1.0f && ext_factor == 0.0f && mscale == 1.0f; }
};

// The multiplier of pair i's base angle (float arithmetic, as ggml's
// rope_yarn: the ramp is y = (i - low) / max(0.001, high - low), clamped to
// [0, 1], and the pair mixes 1 - y of extrapolation).
MS_ROPE_HD inline float rope_pair_scale(const RopeScaling& s, int i) {
  if (s.ext_factor == 0.0f) return s.freq_scale;
  const float span = s.corr_high - s.corr_low > 0.001f ? s.corr_high - s.corr_low : 0.001f;
  float y = (static_cast<float>(i) - s.corr_low) / span;
  y = y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y);
  const float mix = (1.0f - y) * s.ext_factor;
  return s.freq_scale * (1.0f - mix) + mix;
}

// Router: one token's logits [n_expert] -> k (expert id, weight) pairs in
// descending weight; ties go to the lower expert id.
//   SoftmaxTopK: p = softmax(logits) over all experts, keep the k largest,
//                renormalise them to sum 1 when `renorm` (Qwen3-MoE).
//   TopKSoftmax: keep the k largest logits, weights = softmax over those k
//                (Mixtral); `renorm` has no effect (they already sum to 1).
enum class RouterMode { SoftmaxTopK, TopKSoftmax };

}  // namespace ms
