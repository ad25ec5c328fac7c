#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "format/gguf.h"
#include "util/error.h"

namespace ms {
RopeScaling read_rope_scaling(const GgufFile& f, const std::string& arch, int n_rot, double theta_base,
                              int64_t n_ctx_train) {
  const std::string k = arch + ".rope.scaling.";
  const std::string type = f.get_string(k + "type", "none");
  double factor = f.get_float(k + "factor", 0.0);
  if (factor == 0.0) factor = f.get_float(arch + ".rope.scale_linear", 0.0);  // the older key
  if (factor == 0.0) factor = 1.0;  // absent: no scaling, as llama.cpp
  if (!(factor > 0) || !std::isfinite(factor))
    throw Error(f.path() + ": " + k + "factor = " + std::to_string(factor) + " must be > 0");
  const double attn_factor = f.get_float(k + "attn_factor", 1.0);
  if (!(attn_factor > 0) || !std::isfinite(attn_factor))
    throw Error(f.path() + ": " + k + "attn_factor = " + std::to_string(attn_factor) + " must be > 0");
  if (type == "none" || type.empty()) return linear_scaling(1.0, attn_factor);  // never scaled, as llama.cpp
  if (type == "linear") return linear_scaling(factor, attn_factor);
  if (type != "yarn")
    throw Error(f.path() + ": RoPE scaling '" + type + "' (" + k + "type) is not supported (none, linear, yarn)");
  YarnParams p;
  p.factor = factor;
  p.n_rot = n_rot;
  p.theta_base = theta_base;
  p.n_ctx_orig = f.get_int(k + "original_context_length", n_ctx_train);
  if (p.n_ctx_orig <= 0)
    throw Error(f.path() + ": YaRN needs " + k + "original_context_length > 0 (or a context_length)");
  p.ext_factor = f.get_float(k + "yarn_ext_factor", -1.0);
  p.beta_fast = f.get_float(k + "yarn_beta_fast", 32.0);
  p.beta_slow = f.get_float(k + "yarn_beta_slow", 1.0);
  p.log_mul = f.get_float(k + "yarn_log_multiplier", 0.0);
  p.attn_factor = attn_factor;
  if (p.ext_factor == 0.0) p.attn_factor *= f.get_float(k + "yarn_attn_factor", 1.0);  // only then, as llama.cpp
  for (const auto& [name, v] : {std::pair<const char*, double>{"yarn_beta_fast", p.beta_fast}, {"yarn_beta_slow", p.beta_slow}})
    if (!(v > 0) || !std::isfinite(v))
      throw Error(f.path() + ": " + k + name + " = " + std::to_string(v) + " must be > 0");
  if (!std::isfinite(p.ext_factor) || !std::isfinite(p.log_mul) || !(p.attn_factor > 0))
    throw Error(f.path() + ": " + k + "yarn_* values must be finite (ext_factor, log_multiplier, attn_factor > 0)");
  return yarn_scaling(p);
}

std::string describe_rope_scaling(const RopeScaling& s) {
  char buf[160];
  if (s.ext_factor != 0.0f)
    std::snprintf(buf, sizeof buf, "yarn x%g (ramp pairs %g..%g, ext %g, mscale %.4f)", 1.0 / s.freq_scale,
                  s.corr_low, s.corr_high, s.ext_factor, s.mscale);
  else if (s.freq_scale != 1.0f)
    std::snprintf(buf, sizeof buf, "linear x%g%s", 1.0 / s.freq_scale, s.mscale != 1.0f ? " (scaled cos/sin)" : "");
  else
    std::snprintf(buf, sizeof buf, s.mscale != 1.0f ? "none (cos/sin x %.4f)" : "none", s.mscale);
  return buf;
}

}  // namespace ms
