// The model of routing locality shared by `gen --router-locality` (whose
// routers realise it in the weights, engine/router_locality.h) and `trace
// synth --locality-model window` (which draws from it directly):
//
//   logit_e(t) = bias_e + sqrt(rho) * c_e(t) + sqrt(1 - rho) * n_e(t)
//
// c_e(t): expert e's projection of a moving average of the last tens of
// tokens (a recency window, weights exp(sum_i a_i (cos(theta_i d) - 1)) for a
// token d back, as a RoPE attention head with a fixed query and key gives);
// n_e(t): fresh for every token; bias_e: -skew * ln(rank + 1). The top-k of
// consecutive tokens then share a fraction of their experts that grows with
// rho; rho is solved for the fraction P asked for.
#pragma once
#include <vector>

namespace ms {

// Frequencies of the window (radians per token): periods of ~300 to ~6000
// tokens; the score amplitude they share.
constexpr double kLocalityThetaHi = 0.0205, kLocalityThetaLo = 0.001, kLocalityAmplitude = 8.0;
// Tokens of context at which the window is taken as full (the design point).
constexpr int kLocalityRefTokens = 256;

struct LocalityWindow {
  std::vector<double> weights;  // [d] for d = 0 .. kLocalityRefTokens + 1, weights[0] = 1
  double lag1 = 0;              // correlation of the average with itself one token later
  double n_eff = 0;             // (sum w)^2 / sum w^2: how many tokens the average is worth
};

// The window of the given frequencies sharing kLocalityAmplitude, for
// i.i.d. inputs at kLocalityRefTokens of context.
LocalityWindow locality_window(const std::vector<double>& thetas);

// Expected fraction of token t+1's top-k that token t chose too, for logits
// bias + X with X ~ N(0, 1) per expert and correlation r between consecutive
// tokens (Monte Carlo, deterministic).
double topk_repeat_fraction(double r, int n_expert, int k, double skew);

struct ContextShare {
  double rho = 0;        // share of the logit variance the context carries
  double chance = 0;     // the fraction at rho = 0
  double max = 0;        // the fraction at rho = 1
};
// rho for fraction P (0 < P). Throws ms::Error naming the limits when P is
// not above chance or above the maximum; `who` starts the message.
ContextShare solve_context_share(double P, double lag1, int n_expert, int k, double skew, const char* who);

}  // namespace ms
