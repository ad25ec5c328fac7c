#include "engine/router_locality.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "util/error.h"

namespace ms {
namespace {

// The recency window: RoPE pairs whose frequency lies in this band (periods
// of ~300 to ~6000 tokens) share a score amplitude of kAmplitude. The score
// then falls by ~0.3 nats over 32 tokens back and by ~3 over 128, which makes
// the context's moving average span tens of tokens (the repeat-within-8 and
// LRU rates of real routers follow from that width; docs/traces.md).
constexpr double kThetaHi = 0.0205, kThetaLo = 0.001, kAmplitude = 8.0;
// Tokens of context at which the design is balanced (the window is full by
// then; before it, the context is a shorter and larger average).
constexpr int kRefTokens = 256;
// Context channels' rms at kRefTokens (small next to the embedding's 1, so
// the other layers see mostly the token as before).
constexpr double kCtxRms = 0.5;
constexpr double kChannel = 2.0;  // the constant channel's value (synthetic_model.cpp)

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Standard normal pairs (Box-Muller) from a counter-based stream.
struct Normals {
  uint64_t s;
  bool have = false;
  double spare = 0;
  double next() {
    if (have) {
      have = false;
      return spare;
    }
    const double u1 = (static_cast<double>(splitmix(s) >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
    spare = r * std::sin(a);
    have = true;
    return r * std::cos(a);
  }
};

}  // namespace

double topk_repeat_fraction(double r, int n_expert, int k, double skew) {
  const int E = n_expert;
  // Enough token pairs for ~4e5 logits per side: the estimate's standard
  // error stays under half a point for every shape.
  const int samples = std::max(2000, 400000 / std::max(E, 1));
  std::vector<double> bias(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) bias[static_cast<size_t>(e)] = -skew * std::log(e + 1.0);
  Normals g{0x5eed1ca1u};  // the same draws for every r: the bisection sees a smooth curve
  std::vector<std::pair<double, int>> a(static_cast<size_t>(E)), b(static_cast<size_t>(E));
  std::vector<uint8_t> in_a(static_cast<size_t>(E));
  const double q = std::sqrt(std::max(0.0, 1.0 - r * r));
  uint64_t hits = 0;
  const auto by_logit = [](const std::pair<double, int>& x, const std::pair<double, int>& y) { return x.first > y.first; };
  for (int n = 0; n < samples; ++n) {
    for (int e = 0; e < E; ++e) {
      const double x = g.next(), y = r * x + q * g.next();
      a[static_cast<size_t>(e)] = {bias[static_cast<size_t>(e)] + x, e};
      b[static_cast<size_t>(e)] = {bias[static_cast<size_t>(e)] + y, e};
    }
    std::partial_sort(a.begin(), a.begin() + k, a.end(), by_logit);
    std::partial_sort(b.begin(), b.begin() + k, b.end(), by_logit);
    std::fill(in_a.begin(), in_a.end(), 0);
    for (int i = 0; i < k; ++i) in_a[static_cast<size_t>(a[static_cast<size_t>(i)].second)] = 1;
    for (int i = 0; i < k; ++i) hits += in_a[static_cast<size_t>(b[static_cast<size_t>(i)].second)];
  }
  return static_cast<double>(hits) / (static_cast<double>(samples) * k);
}

LocalityDesign design_router_locality(double P, const LocalityShape& s) {
  if (!(P >= 0.0 && P <= 1.0)) throw Error("gen: --router-locality must be in [0, 1]");
  LocalityDesign d;
  d.locality = P;
  if (s.n_expert < 2 || s.k < 1 || s.k >= s.n_expert)
    throw Error("gen: --router-locality needs a model with more experts than it routes to");
  const int half = s.n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const double theta = std::pow(s.rope_base, -2.0 * i / s.n_rot);
    if (theta <= kThetaHi * 1.001 && theta >= kThetaLo * 0.999) d.rope_dims.push_back(i);
  }
  if (d.rope_dims.empty())
    throw Error("gen: --router-locality: no RoPE frequency of this shape (base " + std::to_string(s.rope_base) +
                ", " + std::to_string(s.n_rot) + " rotated dims) lies in the window's band");
  d.ctx_channels = d.tok_channels = s.head_dim;
  if (s.n_embd < 4 * static_cast<int64_t>(d.ctx_channels))
    throw Error("gen: --router-locality needs n_embd >= 4 x head_dim (context and token take head_dim channels each)");
  // Score amplitude: q and k after their norms are sqrt(head_dim / n) * gain
  // on each of the n dims, so the score at distance 0 is gain^2 * sqrt(head_dim).
  d.qk_norm_gain = static_cast<float>(std::sqrt(kAmplitude / std::sqrt(static_cast<double>(s.head_dim))));

  // The window's weights and what they make of i.i.d. values at kRefTokens.
  const double a = kAmplitude / static_cast<double>(d.rope_dims.size());
  std::vector<double> w(kRefTokens + 2);
  for (size_t delta = 0; delta < w.size(); ++delta) {
    double f = 0;
    for (int i : d.rope_dims) f += a * (std::cos(std::pow(s.rope_base, -2.0 * i / s.n_rot) * double(delta)) - 1.0);
    w[delta] = std::exp(f);
  }
  double sum = 0, sq = 0, cross = 0;
  for (int delta = 0; delta <= kRefTokens; ++delta) {
    sum += w[static_cast<size_t>(delta)];
    sq += w[static_cast<size_t>(delta)] * w[static_cast<size_t>(delta)];
    cross += w[static_cast<size_t>(delta)] * w[static_cast<size_t>(delta) + 1];
  }
  const double sq_next = sq + w[kRefTokens + 1] * w[kRefTokens + 1];
  d.ctx_lag1 = cross / std::sqrt(sq * sq_next);
  const double n_eff = sum * sum / sq;

  // Residual magnitudes at layer 0's FFN input: embedding channels ~1, the
  // constant channel, the context channels at kCtxRms.
  const double D = static_cast<double>(s.n_embd), m = d.ctx_channels, emb = D - 1 - m;
  const double v_rms = std::sqrt(D / (emb + kChannel * kChannel));  // the value rows read the token channels
  d.out_scale = static_cast<float>(kCtxRms * std::sqrt(n_eff) / v_rms);
  const double rms = std::sqrt((emb + kChannel * kChannel + m * kCtxRms * kCtxRms) / D);
  const double tok = d.tok_channels;

  // rho: the share of logit variance the context needs for P.
  d.max_locality = topk_repeat_fraction(d.ctx_lag1, s.n_expert, s.k, s.skew);
  const double chance = topk_repeat_fraction(0.0, s.n_expert, s.k, s.skew);
  char buf[256];
  if (P > 0 && P <= chance + 0.005) {
    std::snprintf(buf, sizeof buf,
                  "gen: --router-locality %.3g: independent routing already repeats %.3f of the previous token's "
                  "experts with %d experts, k=%d and this skew; ask for more, or 0 for independent routing",
                  P, chance, s.n_expert, s.k);
    throw Error(buf);
  }
  if (P > d.max_locality) {
    std::snprintf(buf, sizeof buf, "gen: --router-locality %.3g: at most %.2f with %d experts, k=%d and this skew", P,
                  d.max_locality, s.n_expert, s.k);
    throw Error(buf);
  }
  if (P > 0) {
    double lo = 0, hi = d.ctx_lag1;
    for (int it = 0; it < 24; ++it) {
      const double mid = 0.5 * (lo + hi);
      (topk_repeat_fraction(mid, s.n_expert, s.k, s.skew) < P ? lo : hi) = mid;
    }
    d.rho = std::min(1.0, 0.5 * (lo + hi) / d.ctx_lag1);
  }
  // Logit variance 1 in all, as without locality (the skew's bias keeps its scale).
  d.router_tok_std = static_cast<float>(std::sqrt(1.0 - d.rho) * rms / std::sqrt(tok));
  d.router_ctx_std = static_cast<float>(std::sqrt(d.rho) * rms / (kCtxRms * std::sqrt(m)));
  return d;
}

}  // namespace ms
