#include "engine/router_locality.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "experts/locality_model.h"
#include "util/error.h"

namespace ms {
namespace {

// Context channels' rms at kLocalityRefTokens (small next to the
// embedding's 1, so the other layers see mostly the token as before).
constexpr double kCtxRms = 0.5;
constexpr double kChannel = 2.0;  // the constant channel's value (synthetic_model.cpp)
// Fewer context channels than this and a router's context part is a few
// numbers: its experts' shares of it would be uneven.
constexpr int kMinContextChannels = 16;

}  // namespace

LocalityDesign design_router_locality(double P, const LocalityShape& s) {
  if (!(P >= 0.0 && P <= 1.0)) throw Error("gen: --router-locality must be in [0, 1]");
  LocalityDesign d;
  d.locality = P;
  if (s.n_expert < 2 || s.k < 1 || s.k >= s.n_expert)
    throw Error("gen: --router-locality needs a model with more experts than it routes to");
  const int half = s.n_rot / 2;
  // The frequencies RoPE really turns at (YaRN scales some pairs).
  const auto theta_of = [&](int i) { return std::pow(s.rope_base, -2.0 * i / s.n_rot) * rope_pair_scale(s.rope_scaling, i); };
  for (int i = 0; i < half; ++i) {
    const double theta = theta_of(i);
    if (theta <= kLocalityThetaHi * 1.001 && theta >= kLocalityThetaLo * 0.999) d.rope_dims.push_back(i);
  }
  if (d.rope_dims.empty())
    throw Error("gen: --router-locality: no RoPE frequency of this shape (base " + std::to_string(s.rope_base) +
                ", " + std::to_string(s.n_rot) + " rotated dims) lies in the window's band");
  // The context head's output (head_dim values, or the first n_embd / 4 of
  // them) gets channels of its own, and so does the token, leaving at least
  // half of the residual to the model.
  d.ctx_channels = d.tok_channels = static_cast<int>(std::min<int64_t>(s.head_dim, s.n_embd / 4));
  if (d.ctx_channels < kMinContextChannels)
    throw Error("gen: --router-locality needs n_embd >= " + std::to_string(4 * kMinContextChannels) +
                " (the context and the token take n_embd / 4 channels each, at least " +
                std::to_string(kMinContextChannels) + ")");
  // Score amplitude: q and k after their norms are sqrt(head_dim / n) * gain
  // on each of the n dims, so the score at distance 0 is gain^2 * sqrt(head_dim).
  d.qk_norm_gain = static_cast<float>(std::sqrt(kLocalityAmplitude / std::sqrt(static_cast<double>(s.head_dim))) /
                                      s.rope_scaling.mscale);

  // The window's weights and what they make of i.i.d. values at kLocalityRefTokens.
  std::vector<double> thetas;
  for (int i : d.rope_dims) thetas.push_back(theta_of(i));
  const LocalityWindow win = locality_window(thetas);
  d.ctx_lag1 = win.lag1;
  const double n_eff = win.n_eff;

  // Residual magnitudes at layer 0's FFN input: embedding channels ~1, the
  // constant channel, the context channels at kCtxRms.
  const double D = static_cast<double>(s.n_embd), m = d.ctx_channels, emb = D - 1 - m;
  d.attn_input_rms = std::sqrt((emb + kChannel * kChannel) / D);
  const double v_rms = 1.0 / d.attn_input_rms;  // the value rows read the token channels
  d.out_scale = static_cast<float>(kCtxRms * std::sqrt(n_eff) / v_rms);
  const double rms = std::sqrt((emb + kChannel * kChannel + m * kCtxRms * kCtxRms) / D);
  const double tok = d.tok_channels;

  // rho: the share of logit variance the context needs for P.
  if (P > 0) {
    const ContextShare c = solve_context_share(P, d.ctx_lag1, s.n_expert, s.k, s.skew, "gen: --router-locality");
    d.rho = c.rho;
    d.max_locality = c.max;
  }
  // Logit variance 1 in all, as without locality (the skew's bias keeps its scale).
  d.router_tok_std = static_cast<float>(std::sqrt(1.0 - d.rho) * rms / std::sqrt(tok));
  d.router_ctx_std = static_cast<float>(std::sqrt(d.rho) * rms / (kCtxRms * std::sqrt(m)));
  d.router_tok_std_alone = static_cast<float>(rms / std::sqrt(tok));
  return d;
}

}  // namespace ms
