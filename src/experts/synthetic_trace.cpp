#include "experts/synthetic_trace.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "experts/locality_model.h"
#include "util/error.h"

namespace ms {
namespace {

// splitmix64: small, fast, and identical on every platform (unlike std::
// distributions), so a seed names the same trace everywhere.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }       // [0, 1)
  uint32_t below(uint32_t n) { return uint32_t(uniform() * n); }       // [0, n)
};

struct LayerRouter {
  std::vector<uint16_t> expert_of_rank;  // random permutation
  std::vector<double> inv_weight;        // per expert: 1 / popularity weight
  std::vector<double> ctx_dir;           // window model: [expert][kCtxDims] unit rows, this layer's view of the context
};

// The window model's context: kCtxDims i.i.d. normal values per token,
// averaged over the recency window of Qwen3-30B-A3B's RoPE (base 1e6, 128
// dims: the window gen builds for that shape).
constexpr int kCtxDims = 64;

std::vector<double> qwen3_window_thetas() {
  std::vector<double> t;
  for (int i = 0; i < 64; ++i) {
    const double theta = std::pow(1e6, -2.0 * i / 128);
    if (theta <= kLocalityThetaHi * 1.001 && theta >= kLocalityThetaLo * 0.999) t.push_back(theta);
  }
  return t;
}

}  // namespace

Trace make_synthetic_trace(const SyntheticTraceOptions& o) {
  if (o.n_layer == 0 || o.n_expert == 0 || o.k == 0 || o.k > o.n_expert || o.n_expert > 65535)
    throw Error("synthetic trace: need layers > 0, 0 < k <= experts <= 65535");
  if (o.dense_first_layers >= o.n_layer) throw Error("synthetic trace: every layer would be dense");
  if (o.prompt_tokens > o.tokens) throw Error("synthetic trace: more prompt tokens than tokens");
  if (o.prompt_batch == 0) throw Error("synthetic trace: prompt batch must be > 0");
  if (!(o.skew >= 0) || !(o.locality >= 0 && o.locality <= 1) || !(o.drift >= 0 && o.drift <= 1))
    throw Error("synthetic trace: skew must be >= 0, locality and drift in 0..1");
  const bool window = o.locality > 0 && o.locality_model == "window";
  if (o.locality_model != "repeat" && o.locality_model != "window")
    throw Error("synthetic trace: locality model must be repeat or window, not '" + o.locality_model + "'");
  LocalityWindow win;
  ContextShare share;
  if (window) {
    win = locality_window(qwen3_window_thetas());
    share = solve_context_share(o.locality, win.lag1, int(o.n_expert), int(o.k), o.skew, "synthetic trace: locality");
  }
  Rng rng{o.seed * 0x2545F4914F6CDD1Dull + 7};
  const auto normal = [&rng] {  // Box-Muller, one of the pair
    const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  };
  Trace t;
  TraceHeader& h = t.header;
  h.model = o.model;
  h.arch = "synthetic";
  h.quant = "q4_K";
  h.n_layer = o.n_layer;
  h.n_expert = o.n_expert;
  h.k = o.k;
  h.flags = kTraceHasGateWeights;
  if (o.predict_accuracy >= 0) {
    h.flags |= kTraceHasPredictions;
    h.k_pred = o.k;
  }
  const uint64_t bytes = o.expert_bytes ? o.expert_bytes : 1769472;  // 3 * 768*2048 q4_K weights
  h.expert_bytes.assign(o.n_layer, bytes);
  for (uint32_t l = 0; l < o.dense_first_layers; ++l) h.expert_bytes[l] = 0;

  const uint32_t first_moe = o.dense_first_layers, n_moe = o.n_layer - first_moe;
  std::vector<LayerRouter> routers(n_moe);
  for (auto& r : routers) {
    r.expert_of_rank.resize(o.n_expert);
    std::iota(r.expert_of_rank.begin(), r.expert_of_rank.end(), 0);
    for (uint32_t i = o.n_expert - 1; i > 0; --i) std::swap(r.expert_of_rank[i], r.expert_of_rank[rng.below(i + 1)]);
    r.inv_weight.resize(o.n_expert);
    for (uint32_t rank = 0; rank < o.n_expert; ++rank)
      r.inv_weight[r.expert_of_rank[rank]] = std::pow(double(rank + 1), o.skew);
    if (window) {
      r.ctx_dir.resize(size_t(o.n_expert) * kCtxDims);
      for (uint32_t e = 0; e < o.n_expert; ++e) {
        double* u = r.ctx_dir.data() + size_t(e) * kCtxDims;
        double n2 = 0;
        for (int j = 0; j < kCtxDims; ++j) {
          u[j] = normal();
          n2 += u[j] * u[j];
        }
        for (int j = 0; j < kCtxDims; ++j) u[j] /= std::sqrt(n2);
      }
    }
  }
  // Window model: each sequence's recent values (newest last) and the context.
  std::vector<std::vector<double>> recent;
  std::vector<double> ctx(kCtxDims);
  std::vector<std::pair<double, uint16_t>> logits(o.n_expert);
  const auto advance_context = [&] {
    recent.emplace_back(kCtxDims);
    for (double& x : recent.back()) x = normal();
    if (recent.size() > win.weights.size()) recent.erase(recent.begin());
    std::fill(ctx.begin(), ctx.end(), 0.0);
    double wsum = 0;
    for (size_t d = 0; d < recent.size(); ++d) {
      const double w = win.weights[d];
      const std::vector<double>& v = recent[recent.size() - 1 - d];
      for (int j = 0; j < kCtxDims; ++j) ctx[j] += w * v[j];
      wsum += w;
    }
    // Unit variance per value once the window is full (larger before: a short average).
    for (double& x : ctx) x *= std::sqrt(win.n_eff) / wsum;
  };
  const double ctx_gain = std::sqrt(share.rho), fresh_gain = std::sqrt(1.0 - share.rho);

  std::vector<std::pair<double, uint16_t>> clocks(o.n_expert);
  std::vector<uint8_t> taken(o.n_expert);
  // Weighted sampling without replacement (exponential clocks: the k experts
  // whose Exp(weight) arrival comes first), skipping those already taken.
  const auto sample = [&](const LayerRouter& r, uint32_t count, std::vector<uint16_t>& out) {
    size_t n = 0;
    for (uint32_t e = 0; e < o.n_expert; ++e) {
      if (taken[e]) continue;
      clocks[n++] = {-std::log(1.0 - rng.uniform()) * r.inv_weight[e], uint16_t(e)};
    }
    std::partial_sort(clocks.begin(), clocks.begin() + count, clocks.begin() + n);
    for (uint32_t i = 0; i < count; ++i) out.push_back(clocks[i].second);
  };

  // choice[token in batch][moe layer] = k ids
  std::vector<std::vector<std::vector<uint16_t>>> choice;
  std::vector<std::vector<uint16_t>> prev(n_moe);
  std::vector<float> weights(o.k);
  std::vector<uint16_t> pred(o.k);
  uint32_t step = 0;
  for (uint32_t seq = 0; seq < o.sequences; ++seq) {
    for (auto& p : prev) p.clear();
    recent.clear();
    uint32_t pos = 0;
    while (pos < o.tokens) {
      const bool prompt = pos < o.prompt_tokens;
      const uint32_t batch = prompt ? std::min(o.prompt_batch, o.prompt_tokens - pos) : 1;
      choice.assign(batch, std::vector<std::vector<uint16_t>>(n_moe));
      for (uint32_t b = 0; b < batch; ++b) {
        if (window) advance_context();
        for (uint32_t l = 0; l < n_moe; ++l) {
          LayerRouter& r = routers[l];
          if (o.drift > 0 && rng.uniform() < o.drift) {
            const uint32_t a = rng.below(o.n_expert), c = rng.below(o.n_expert);
            std::swap(r.expert_of_rank[a], r.expert_of_rank[c]);
            r.inv_weight[r.expert_of_rank[a]] = std::pow(double(a + 1), o.skew);
            r.inv_weight[r.expert_of_rank[c]] = std::pow(double(c + 1), o.skew);
          }
          std::vector<uint16_t>& ids = choice[b][l];
          if (window) {
            for (uint32_t e = 0; e < o.n_expert; ++e) {
              const double* u = r.ctx_dir.data() + size_t(e) * kCtxDims;
              double c = 0;
              for (int j = 0; j < kCtxDims; ++j) c += u[j] * ctx[j];
              logits[e] = {-std::log(r.inv_weight[e]) + ctx_gain * c + fresh_gain * normal(), uint16_t(e)};
            }
            std::partial_sort(logits.begin(), logits.begin() + o.k, logits.end(),
                              [](const auto& x, const auto& y) { return x.first > y.first; });
            for (uint32_t i = 0; i < o.k; ++i) ids.push_back(logits[i].second);
            continue;
          }
          std::fill(taken.begin(), taken.end(), 0);
          if (o.locality > 0 && !prev[l].empty()) {
            std::vector<uint16_t> candidates = prev[l];
            for (uint32_t i = 0; i < o.k && !candidates.empty(); ++i) {
              if (rng.uniform() >= o.locality) continue;
              const uint32_t j = rng.below(uint32_t(candidates.size()));
              ids.push_back(candidates[j]);
              taken[candidates[j]] = 1;
              candidates.erase(candidates.begin() + j);
            }
          }
          sample(r, o.k - uint32_t(ids.size()), ids);
          prev[l] = ids;
        }
      }
      // Records layer by layer (the order an engine computes a batch in).
      for (uint32_t l = 0; l < n_moe; ++l) {
        for (uint32_t b = 0; b < batch; ++b) {
          double sum = 0;
          for (uint32_t i = 0; i < o.k; ++i) sum += weights[i] = float(1.0 / (1.0 + i + rng.uniform()));
          for (auto& w : weights) w = float(w / sum);
          std::span<const uint16_t> predicted;
          if (h.has_predictions()) {
            if (l + 1 < n_moe) {
              std::fill(taken.begin(), taken.end(), 0);
              for (uint16_t e : choice[b][l + 1]) taken[e] = 1;
              for (uint32_t i = 0; i < o.k; ++i) {
                pred[i] = choice[b][l + 1][i];
                if (rng.uniform() >= o.predict_accuracy) {
                  uint16_t e;
                  do e = uint16_t(rng.below(o.n_expert)); while (taken[e] && o.k < o.n_expert);
                  taken[e] = 1;
                  pred[i] = e;
                }
              }
            } else {
              // The last MoE layer has no next router: repeat its own choice.
              std::copy(choice[b][l].begin(), choice[b][l].end(), pred.begin());
            }
            predicted = pred;
          }
          t.add(prompt ? Phase::Prompt : Phase::Decode, first_moe + l, seq, pos + b, step, choice[b][l], weights,
                predicted);
        }
      }
      pos += batch;
      ++step;
    }
  }
  return t;
}

}  // namespace ms
