// YaRN's numbers as llama.cpp computes them (llama-context.cpp's attention
// factor, ggml's rope_yarn magnitude and ggml_rope_yarn_corr_dims), turned
// into the RopeScaling the RoPE ops take (model/rope_router.h). Header-only
// and dependency-free, like rope_router.h, so the CPU library's tests and the
// model loader (model/rope_scaling.h) share one definition.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/rope_router.h"

namespace ms {

// The YaRN inputs, with llama.cpp's defaults.
struct YarnParams {
  double factor = 1.0;        // rope.scaling.factor (> 0)
  int n_rot = 0;              // rotated dims per head
  int64_t n_ctx_orig = 0;     // original context length (> 0)
  double theta_base = 10000;  // rope.freq_base
  double ext_factor = 1.0;    // < 0: not given (1 for YaRN)
  double beta_fast = 32.0, beta_slow = 1.0;
  double log_mul = 0.0;       // yarn_log_multiplier
  double attn_factor = 1.0;   // rope.scaling.attn_factor
};

namespace rope_detail {

// The pair index whose wavelength 2*pi*base^(2i/n_rot) fits `beta` times into
// n_ctx_orig tokens; in float, as ggml computes it (the floor/ceil after it
// makes the last bit matter).
inline float yarn_corr_dim(int n_rot, int64_t n_ctx_orig, double beta, double theta_base) {
  constexpr float kPi = 3.14159265358979323846f;
  return static_cast<float>(n_rot) *
         std::log(static_cast<float>(n_ctx_orig) / (static_cast<float>(beta) * 2.0f * kPi)) /
         (2.0f * std::log(static_cast<float>(theta_base)));
}

// YaRN's attention magnitude for a context scale (transformers' get_mscale).
inline double yarn_get_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

}  // namespace rope_detail

// The start and end pair indices of YaRN's ramp: floor for beta_fast, ceil
// for beta_slow, clamped to [0, n_rot - 1].
inline void yarn_corr_dims(int n_rot, int64_t n_ctx_orig, double theta_base, double beta_fast, double beta_slow,
                           float* low, float* high) {
  const float start = std::floor(rope_detail::yarn_corr_dim(n_rot, n_ctx_orig, beta_fast, theta_base));
  const float end = std::ceil(rope_detail::yarn_corr_dim(n_rot, n_ctx_orig, beta_slow, theta_base));
  *low = std::max(0.0f, start);
  *high = std::min(static_cast<float>(n_rot - 1), end);
}

inline RopeScaling linear_scaling(double factor, double attn_factor) {
  RopeScaling s;
  s.freq_scale = static_cast<float>(1.0 / factor);
  s.mscale = static_cast<float>(attn_factor);
  return s;
}

inline RopeScaling yarn_scaling(const YarnParams& p) {
  RopeScaling s;
  s.freq_scale = static_cast<float>(1.0 / p.factor);
  s.ext_factor = static_cast<float>(p.ext_factor < 0 ? 1.0 : p.ext_factor);
  if (s.ext_factor == 0.0f) {  // no ramp: linear scaling, cos/sin times the attention factor
    s.mscale = static_cast<float>(p.attn_factor);
    return s;
  }
  // llama.cpp sets the attention factor so that, after ggml multiplies it by
  // 1 + 0.1 ln(factor), cos/sin carry get_mscale(factor, 1) (divided by
  // get_mscale(factor, log_mul) when the file gives a log multiplier).
  using rope_detail::yarn_get_mscale;
  const double factor = 1.0 / s.freq_scale;
  double attn = p.log_mul != 0 ? yarn_get_mscale(factor, 1.0) / yarn_get_mscale(factor, p.log_mul)
                               : yarn_get_mscale(factor, 1.0);
  attn /= 1.0 + 0.1 * std::log(factor);
  attn *= p.attn_factor;
  // ggml's rope_yarn: the magnitude correction for interpolation.
  s.mscale = static_cast<float>(attn * (1.0 + 0.1 * std::log(1.0 / s.freq_scale)));
  yarn_corr_dims(p.n_rot, p.n_ctx_orig, p.theta_base, p.beta_fast, p.beta_slow, &s.corr_low, &s.corr_high);
  return s;
}

}  // namespace ms
