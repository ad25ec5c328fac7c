#include "experts/device_placement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "util/bytes.h"
#include "util/error.h"

namespace ms {
namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string layers_text(uint32_t first, uint32_t end) {
  if (first == end) return "no layers";
  if (end == first + 1) return "layer " + std::to_string(first);
  return "layers " + std::to_string(first) + "-" + std::to_string(end - 1);
}

void check_devices(const std::vector<PlacementDevice>& devices) {
  if (devices.empty() || devices.size() > kMaxPlacementDevices)
    throw Error("placement: " + std::to_string(devices.size()) + " devices; 1 to " +
                std::to_string(kMaxPlacementDevices) + " are planned");
  std::set<int> ids;
  for (const PlacementDevice& d : devices) {
    const std::string name = "placement: device " + std::to_string(d.id);
    if (d.id < 0) throw Error(name + ": a device number is >= 0");
    if (!ids.insert(d.id).second) throw Error(name + " is listed twice");
    if (d.budget == 0) throw Error(name + ": the budget must be positive");
    if (!positive(d.link_gbps)) throw Error(name + ": link_gbps must be > 0, got " + std::to_string(d.link_gbps));
    if (!positive(d.hbm_gbps)) throw Error(name + ": hbm_gbps must be > 0, got " + std::to_string(d.hbm_gbps));
  }
}

void check_model(const PlacementModel& m) {
  if (m.layers.empty()) throw Error("placement: the model has no layers");
  bool moe = false;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const PlacementLayer& L = m.layers[l];
    if ((L.n_expert == 0) != (L.expert_bytes == 0))
      throw Error("placement: layer " + std::to_string(l) + " has " + std::to_string(L.n_expert) +
                  " experts of " + std::to_string(L.expert_bytes) + " bytes (both or neither must be 0)");
    if (L.n_expert > 0 && m.k > L.n_expert)
      throw Error("placement: k = " + std::to_string(m.k) + " exceeds layer " + std::to_string(l) + "'s " +
                  std::to_string(L.n_expert) + " experts");
    moe = moe || L.n_expert > 0;
  }
  if (moe && m.k == 0) throw Error("placement: k (experts per token) must be > 0 for a MoE model");
}

// Expected uses per token of expert e of layer l.
double uses_of(const PlacementModel& m, const ExpertPopularity& pop, uint32_t l, uint32_t e) {
  if (l < pop.size() && !pop[l].empty()) return pop[l][e];
  return double(m.k) / double(m.layers[l].n_expert);
}

void check_popularity(const PlacementModel& m, const ExpertPopularity& pop) {
  if (pop.empty()) return;
  if (pop.size() != m.layers.size())
    throw Error("placement: popularity for " + std::to_string(pop.size()) + " layers, the model has " +
                std::to_string(m.layers.size()));
  for (size_t l = 0; l < pop.size(); ++l) {
    if (pop[l].empty()) continue;
    if (pop[l].size() != m.layers[l].n_expert)
      throw Error("placement: popularity of layer " + std::to_string(l) + " has " + std::to_string(pop[l].size()) +
                  " experts, the model " + std::to_string(m.layers[l].n_expert));
    for (double v : pop[l])
      if (!std::isfinite(v) || v < 0)
        throw Error("placement: popularity of layer " + std::to_string(l) + " holds " + std::to_string(v) +
                    " (uses per token must be finite and >= 0)");
  }
}

// Prefix sums over layers, for the split's O(1) range sums.
struct Prefix {
  std::vector<uint64_t> fixed, experts, dense;
  explicit Prefix(const PlacementModel& m) : fixed(m.layers.size() + 1), experts(m.layers.size() + 1), dense(m.layers.size() + 1) {
    for (size_t l = 0; l < m.layers.size(); ++l) {
      const PlacementLayer& L = m.layers[l];
      fixed[l + 1] = fixed[l] + L.dense_bytes + L.kv_bytes;
      experts[l + 1] = experts[l] + uint64_t(L.n_expert) * L.expert_bytes;
      dense[l + 1] = dense[l] + L.dense_bytes;
    }
  }
};

// What a device holds when it owns layers [j, i) of n.
uint64_t fixed_bytes(const PlacementModel& m, const Prefix& p, size_t j, size_t i) {
  const size_t n = m.layers.size();
  uint64_t b = m.reserve_bytes + (p.fixed[i] - p.fixed[j]);
  if (j == 0 && i > 0) b += m.embed_bytes;
  if (i == n && j < n) b += m.head_bytes;
  return b;
}

// A split's score: the largest load (bytes over budget), then the slowest
// device's dense time per token; compared in that order.
struct Score {
  double load = std::numeric_limits<double>::infinity();
  double time = std::numeric_limits<double>::infinity();
};
Score worst(const Score& a, const Score& b) { return {std::max(a.load, b.load), std::max(a.time, b.time)}; }
bool better(const Score& a, const Score& b) {
  const double tol = 1e-12 * std::max(1.0, std::abs(b.load));
  if (a.load < b.load - tol) return true;
  if (a.load > b.load + tol) return false;
  return a.time < b.time * (1 - 1e-12);
}

// Contiguous ranges, one per device in order: end[d] is the end of device
// d's range. `feasible_only`: a range whose fixed bytes exceed the budget is
// not allowed (else the score is fixed bytes over budget: the split closest
// to fitting, for the error). Returns an empty vector when nothing fits.
std::vector<size_t> split_layers(const PlacementModel& m, const std::vector<PlacementDevice>& devs, bool feasible_only) {
  const size_t n = m.layers.size(), D = devs.size();
  const Prefix p(m);
  std::vector<std::vector<Score>> best(D + 1, std::vector<Score>(n + 1));
  std::vector<std::vector<size_t>> from(D + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = {0, 0};
  for (size_t d = 1; d <= D; ++d) {
    const PlacementDevice& dev = devs[d - 1];
    for (size_t i = 0; i <= n; ++i)
      for (size_t j = 0; j <= i; ++j) {
        if (!std::isfinite(best[d - 1][j].load)) continue;
        const uint64_t fixed = fixed_bytes(m, p, j, i);
        if (feasible_only && fixed > dev.budget) continue;
        Score s;
        const double held = feasible_only ? double(fixed + (p.experts[i] - p.experts[j])) : double(fixed);
        s.load = held / double(dev.budget);
        double dense = double(p.dense[i] - p.dense[j]);
        if (i == n && j < n) dense += double(m.head_bytes);
        s.time = dense / (dev.hbm_gbps * 1e9);
        const Score w = worst(best[d - 1][j], s);
        if (better(w, best[d][i])) best[d][i] = w, from[d][i] = j;
      }
  }
  if (!std::isfinite(best[D][n].load)) return {};
  std::vector<size_t> end(D);
  size_t i = n;
  for (size_t d = D; d >= 1; --d) {
    end[d - 1] = i;
    i = from[d][i];
  }
  return end;
}

[[noreturn]] void dense_does_not_fit(const PlacementModel& m, const std::vector<PlacementDevice>& devs) {
  const std::vector<size_t> end = split_layers(m, devs, false);
  const Prefix p(m);
  std::string per;
  uint64_t need = 0, have = 0;
  size_t j = 0;
  for (size_t d = 0; d < devs.size(); ++d) {
    const uint64_t f = fixed_bytes(m, p, j, end[d]);
    need += f;
    have += devs[d].budget;
    per += std::string(per.empty() ? "" : "; ") + "device " + std::to_string(devs[d].id) + " (" +
           layers_text(uint32_t(j), uint32_t(end[d])) + ") needs " + format_bytes(f) + " of its " +
           format_bytes(devs[d].budget) + (f > devs[d].budget ? " (short by " + format_bytes(f - devs[d].budget) + ")" : "");
    j = end[d];
  }
  throw Error("the dense part does not fit these devices: every layer's dense weights and KV cache must be on one "
              "device, with a reserve of " + format_bytes(m.reserve_bytes) + " on each; the closest split: " + per +
              ". In all " + format_bytes(need) + " against " + format_bytes(have) +
              " of budgets: raise --vram, add a device, or lower --ctx");
}

}  // namespace

const char* expert_home_name(ExpertHome h) {
  switch (h) {
    case ExpertHome::Owner: return "owner";
    case ExpertHome::Peer: return "peer";
    case ExpertHome::Stream: return "stream";
    case ExpertHome::Cpu: return "cpu";
  }
  return "?";
}

void PlacementRates::validate(size_t n) const {
  if (!positive(peer_gbps)) throw Error("placement: peer_gbps must be > 0, got " + std::to_string(peer_gbps));
  if (!(std::isfinite(peer_latency_us) && peer_latency_us >= 0))
    throw Error("placement: peer_latency_us must be >= 0, got " + std::to_string(peer_latency_us));
  if (!peer_matrix.empty()) {
    if (peer_matrix.size() != n) throw Error("placement: the peer matrix must be " + std::to_string(n) + " x " + std::to_string(n));
    for (size_t a = 0; a < n; ++a) {
      if (peer_matrix[a].size() != n)
        throw Error("placement: the peer matrix must be " + std::to_string(n) + " x " + std::to_string(n));
      for (size_t b = 0; b < n; ++b)
        if (a != b && !positive(peer_matrix[a][b]))
          throw Error("placement: peer GB/s from device index " + std::to_string(a) + " to " + std::to_string(b) +
                      " must be > 0");
    }
  }
  cost.validate();
}

double PlacementRates::peer(size_t from, size_t to) const {
  return peer_matrix.empty() ? peer_gbps : peer_matrix[from][to];
}

PlacementCosts::PlacementCosts(const PlacementModel& model, const std::vector<PlacementDevice>& devices,
                               const PlacementRates& rates)
    : model_(model), devices_(devices), rates_(rates) {}

double PlacementCosts::dense_s(uint32_t l, size_t d) const {
  return double(model_.layers[l].dense_bytes) / (devices_[d].hbm_gbps * 1e9);
}
double PlacementCosts::owner_s(uint32_t l, size_t d) const {
  return rates_.cost.gpu_overhead_us * 1e-6 + double(model_.layers[l].expert_bytes) / (devices_[d].hbm_gbps * 1e9);
}
double PlacementCosts::handoff_s(size_t a, size_t b) const {
  if (a == b) return 0;
  return rates_.peer_latency_us * 1e-6 + double(model_.hidden_bytes) / (rates_.peer(a, b) * 1e9);
}
double PlacementCosts::peer_s(uint32_t l, size_t owner, size_t host) const {
  return handoff_s(owner, host) + owner_s(l, host) + handoff_s(host, owner);
}
double PlacementCosts::stream_s(uint32_t l, size_t owner) const {
  const uint64_t bytes = model_.layers[l].expert_bytes;
  return rates_.cost.copy_overhead_us * 1e-6 + double(bytes) / (devices_[owner].link_gbps * 1e9) + owner_s(l, owner);
}
double PlacementCosts::cpu_s(uint32_t l) const { return rates_.cost.cpu_s(model_.layers[l].expert_bytes, 1); }
double PlacementCosts::head_s(size_t d) const { return double(model_.head_bytes) / (devices_[d].hbm_gbps * 1e9); }
ExpertHome PlacementCosts::cold_home(uint32_t l, size_t owner) const {
  return stream_s(l, owner) < cpu_s(l) ? ExpertHome::Stream : ExpertHome::Cpu;
}
double PlacementCosts::cold_s(uint32_t l, size_t owner) const { return std::min(stream_s(l, owner), cpu_s(l)); }
double PlacementCosts::use_s(uint32_t l, size_t owner, const ExpertPlace& p) const {
  switch (p.home) {
    case ExpertHome::Owner: return owner_s(l, owner);
    case ExpertHome::Peer: return peer_s(l, owner, size_t(p.device));
    case ExpertHome::Stream: return stream_s(l, owner);
    case ExpertHome::Cpu: return cpu_s(l);
  }
  return 0;
}

ExpertPopularity uniform_popularity(const PlacementModel& model) {
  ExpertPopularity pop(model.layers.size());
  for (size_t l = 0; l < model.layers.size(); ++l)
    pop[l].assign(model.layers[l].n_expert, model.layers[l].n_expert ? double(model.k) / model.layers[l].n_expert : 0);
  return pop;
}

PlacementCost placement_cost(const PlacementModel& m, const std::vector<PlacementDevice>& devs,
                             const PlacementRates& rates, const DevicePlacement& plan, const ExpertPopularity& pop) {
  check_popularity(m, pop);
  const PlacementCosts c(m, devs, rates);
  PlacementCost r;
  for (uint32_t l = 0; l < m.layers.size(); ++l) {
    const size_t o = plan.owner[l];
    r.dense_s += c.dense_s(l, o);
    if (l > 0 && plan.owner[l - 1] != o) {
      r.handoff_s += c.handoff_s(plan.owner[l - 1], o);
      r.peer_bytes += double(m.hidden_bytes);
    }
    for (uint32_t e = 0; e < m.layers[l].n_expert; ++e) {
      const double u = uses_of(m, pop, l, e);
      const ExpertPlace& p = plan.experts[l][e];
      const double t = u * c.use_s(l, o, p);
      switch (p.home) {
        case ExpertHome::Owner: r.owner_s += t; break;
        case ExpertHome::Peer: r.peer_s += t, r.peer_bytes += u * 2.0 * double(m.hidden_bytes); break;
        case ExpertHome::Stream: r.stream_s += t, r.link_bytes += u * double(m.layers[l].expert_bytes); break;
        case ExpertHome::Cpu: r.cpu_s += t; break;
      }
    }
  }
  r.head_s = c.head_s(plan.owner.back());
  return r;
}

DevicePlacement plan_device_placement(const PlacementModel& m, const std::vector<PlacementDevice>& devs,
                                      const PlacementRates& rates, const ExpertPopularity& pop) {
  check_devices(devs);
  check_model(m);
  rates.validate(devs.size());
  check_popularity(m, pop);
  const std::vector<size_t> end = split_layers(m, devs, true);
  if (end.empty()) dense_does_not_fit(m, devs);

  DevicePlacement plan;
  const size_t n = m.layers.size(), D = devs.size();
  const Prefix prefix(m);
  plan.owner.resize(n);
  std::vector<uint64_t> room(D);
  size_t j = 0;
  for (size_t d = 0; d < D; ++d) {
    DevicePlan& dp = plan.devices.emplace_back();
    dp.id = devs[d].id;
    dp.budget = devs[d].budget;
    dp.first_layer = uint32_t(j);
    dp.end_layer = uint32_t(end[d]);
    dp.fixed_bytes = fixed_bytes(m, prefix, j, end[d]);
    room[d] = dp.budget - dp.fixed_bytes;
    for (size_t l = j; l < end[d]; ++l) plan.owner[l] = uint32_t(d);
    j = end[d];
  }

  // Every expert starts cold; resident homes by time saved per byte.
  const PlacementCosts c(m, devs, rates);
  plan.experts.resize(n);
  struct Candidate {
    double density;
    uint32_t l, e, q;
  };
  std::vector<Candidate> cand;
  for (uint32_t l = 0; l < n; ++l) {
    const size_t o = plan.owner[l];
    const uint32_t ne = m.layers[l].n_expert;
    plan.experts[l].assign(ne, ExpertPlace{c.cold_home(l, o), -1});
    const double cold = c.cold_s(l, o);
    for (uint32_t e = 0; e < ne; ++e) {
      const double u = uses_of(m, pop, l, e);
      for (uint32_t q = 0; q < D; ++q) {
        const double here = q == o ? c.owner_s(l, o) : c.peer_s(l, o, q);
        const double gain = u * (cold - here);
        if (gain > 0) cand.push_back({gain / double(m.layers[l].expert_bytes), l, e, q});
      }
    }
  }
  std::sort(cand.begin(), cand.end(), [](const Candidate& a, const Candidate& b) {
    if (a.density != b.density) return a.density > b.density;
    if (a.l != b.l) return a.l < b.l;
    if (a.e != b.e) return a.e < b.e;
    return a.q < b.q;
  });
  std::vector<std::vector<uint8_t>> placed(n);
  for (uint32_t l = 0; l < n; ++l) placed[l].assign(m.layers[l].n_expert, 0);
  auto put = [&](uint32_t l, uint32_t e, uint32_t q) {
    const uint64_t bytes = m.layers[l].expert_bytes;
    const size_t o = plan.owner[l];
    room[q] -= bytes;
    placed[l][e] = 1;
    plan.experts[l][e] = {q == o ? ExpertHome::Owner : ExpertHome::Peer, int8_t(q)};
  };
  for (const Candidate& k : cand)
    if (!placed[k.l][k.e] && room[k.q] >= m.layers[k.l].expert_bytes) put(k.l, k.e, k.q);
  // Experts the popularity never uses (a trace that did not route to them)
  // still go to their owner while it has room: holding them costs nothing
  // and a later token may choose them.
  for (uint32_t l = 0; l < n; ++l)
    for (uint32_t e = 0; e < m.layers[l].n_expert; ++e) {
      const uint32_t o = plan.owner[l];
      if (!placed[l][e] && uses_of(m, pop, l, e) == 0 && c.owner_s(l, o) < c.cold_s(l, o) &&
          room[o] >= m.layers[l].expert_bytes)
        put(l, e, o);
    }

  for (uint32_t l = 0; l < n; ++l) {
    DevicePlan& own = plan.devices[plan.owner[l]];
    for (const ExpertPlace& p : plan.experts[l]) {
      const uint64_t bytes = m.layers[l].expert_bytes;
      switch (p.home) {
        case ExpertHome::Owner: own.own_expert_bytes += bytes, ++own.n_own; break;
        case ExpertHome::Peer:
          plan.devices[size_t(p.device)].hosted_expert_bytes += bytes, ++plan.devices[size_t(p.device)].n_hosted;
          break;
        case ExpertHome::Stream: ++own.n_stream; break;
        case ExpertHome::Cpu: ++own.n_cpu; break;
      }
    }
  }
  plan.cost = placement_cost(m, devs, rates, plan, pop);
  return plan;
}

std::string describe_placement(const DevicePlacement& plan) {
  std::string s;
  for (const DevicePlan& d : plan.devices) {
    s += "  device " + std::to_string(d.id) + ": " + layers_text(d.first_layer, d.end_layer) + ", " +
         format_bytes(d.used_bytes()) + " of " + format_bytes(d.budget) + " (dense, KV and reserve " +
         format_bytes(d.fixed_bytes) + "; " + std::to_string(d.n_own) + " own experts " +
         format_bytes(d.own_expert_bytes) + "; " + std::to_string(d.n_hosted) + " hosted for other devices " +
         format_bytes(d.hosted_expert_bytes) + "); its layers' experts in host RAM: " + std::to_string(d.n_stream) +
         " streamed, " + std::to_string(d.n_cpu) + " on the CPU\n";
  }
  const PlacementCost& c = plan.cost;
  auto ms = [](double s) { return fmt("%.3f", s * 1e3); };
  s += "  predicted per decode token: " + ms(c.total_s()) + " ms = dense " + ms(c.dense_s) + " + resident " +
       ms(c.owner_s) + " + peer " + ms(c.peer_s) + " + streamed " + ms(c.stream_s) + " + CPU " + ms(c.cpu_s) +
       " + hand-offs " + ms(c.handoff_s) + " + head " + ms(c.head_s) + " ms; link " +
       format_bytes(uint64_t(std::llround(c.link_bytes))) + ", peer " +
       format_bytes(uint64_t(std::llround(c.peer_bytes))) + " per token\n";
  return s;
}

}  // namespace ms
