#include "experts/locality_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "util/error.h"

namespace ms {
namespace {

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

// The window falls by ~0.3 nats over 32 tokens back and by ~3 over 128: the
// moving average spans tens of tokens, which is what makes a token's experts
// mostly recent ones (the repeat-within-8 and LRU rates of real routers
// follow from that width; docs/traces.md).
LocalityWindow locality_window(const std::vector<double>& thetas) {
  LocalityWindow w;
  const double a = kLocalityAmplitude / static_cast<double>(std::max<size_t>(thetas.size(), 1));
  w.weights.resize(kLocalityRefTokens + 2);
  for (size_t d = 0; d < w.weights.size(); ++d) {
    double f = 0;
    for (double theta : thetas) f += a * (std::cos(theta * static_cast<double>(d)) - 1.0);
    w.weights[d] = std::exp(f);
  }
  double sum = 0, sq = 0, cross = 0;
  for (int d = 0; d <= kLocalityRefTokens; ++d) {
    const double x = w.weights[static_cast<size_t>(d)];
    sum += x;
    sq += x * x;
    cross += x * w.weights[static_cast<size_t>(d) + 1];
  }
  const double last = w.weights[kLocalityRefTokens + 1];
  w.lag1 = cross / std::sqrt(sq * (sq + last * last));
  w.n_eff = sum * sum / sq;
  return w;
}

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

ContextShare solve_context_share(double P, double lag1, int n_expert, int k, double skew, const char* who) {
  if (n_expert < 2 || k < 1 || k >= n_expert)
    throw Error(std::string(who) + ": locality needs more experts than are routed to");
  ContextShare c;
  c.chance = topk_repeat_fraction(0.0, n_expert, k, skew);
  c.max = topk_repeat_fraction(lag1, n_expert, k, skew);
  char buf[320];
  if (P <= c.chance + 0.005) {
    std::snprintf(buf, sizeof buf,
                  "%s %.3g: independent routing already repeats %.3f of the previous token's experts with "
                  "%d experts, k=%d and this skew; ask for more, or 0 for independent routing",
                  who, P, c.chance, n_expert, k);
    throw Error(buf);
  }
  if (P > c.max) {
    std::snprintf(buf, sizeof buf, "%s %.3g: at most %.2f with %d experts, k=%d and this skew", who, P,
                  c.max, n_expert, k);
    throw Error(buf);
  }
  double lo = 0, hi = lag1;
  for (int it = 0; it < 24; ++it) {
    const double mid = 0.5 * (lo + hi);
    (topk_repeat_fraction(mid, n_expert, k, skew) < P ? lo : hi) = mid;
  }
  c.rho = std::min(1.0, 0.5 * (lo + hi) / lag1);
  return c;
}

}  // namespace ms
