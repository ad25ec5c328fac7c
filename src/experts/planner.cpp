#include "experts/planner.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace ms {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::Resident: return "resident";
    case Tier::Stream: return "stream";
    case Tier::Host: return "host";
  }
  return "?";
}

LayerTime layer_time(std::span<const ColdExpert> cold, std::span<const uint8_t> stream, const CostModel& cost,
                     double gpu_resident_s, double link_busy_s) {
  LayerTime t;
  t.gpu_s = gpu_resident_s;
  t.copy_s = link_busy_s;
  double last_gpu = 0;
  for (size_t i = 0; i < cold.size(); ++i) {
    if (stream[i]) {
      t.copy_s += cost.copy_s(cold[i].bytes);
      last_gpu = cost.gpu_s(cold[i].bytes, cold[i].tokens);
      t.gpu_s += last_gpu;
    } else {
      t.host_s += cost.cpu_s(cold[i].bytes, cold[i].tokens);
    }
  }
  if (t.host_s > 0) t.host_s += cost.cpu_start_us * 1e-6;
  t.time_s = std::max({t.gpu_s, t.copy_s + last_gpu, t.host_s});
  return t;
}

std::vector<uint8_t> split_cold(std::span<const ColdExpert> cold, const CostModel& cost, double gpu_resident_s,
                                double link_busy_s) {
  const size_t n = cold.size();
  std::vector<uint8_t> stream(n, 0);
  // Optional experts in order of how much streaming them is worth: CPU time
  // over GPU-path time (high for experts many tokens chose).
  std::vector<size_t> order;
  std::vector<double> ratio(n);
  for (size_t i = 0; i < n; ++i) {
    if (cold[i].must_stream) {
      stream[i] = 1;
      continue;
    }
    ratio[i] = cost.cpu_s(cold[i].bytes, cold[i].tokens) /
               (cost.copy_s(cold[i].bytes) + cost.gpu_s(cold[i].bytes, cold[i].tokens));
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ratio[a] > ratio[b]; });
  // Try streaming the first j of them, j = 0..m; keep the fastest (fewest
  // copies on ties). m is at most a layer's routed experts: quadratic is fine.
  size_t best_j = 0;
  double best = 0;
  for (size_t j = 0; j <= order.size(); ++j) {
    std::vector<uint8_t> s = stream;
    for (size_t q = 0; q < j; ++q) s[order[q]] = 1;
    const double t = layer_time(cold, s, cost, gpu_resident_s, link_busy_s).time_s;
    if (j == 0 || t < best * (1 - 1e-12)) best = t, best_j = j;
  }
  for (size_t q = 0; q < best_j; ++q) stream[order[q]] = 1;
  return stream;
}

Planner::Planner(const CostModel& cost, std::vector<uint64_t> expert_bytes, uint32_t n_expert)
    : cost_(cost), expert_bytes_(std::move(expert_bytes)), n_expert_(n_expert) {}

ExpertPlan Planner::plan(uint64_t step, uint32_t layer, std::span<const ExpertKey> keys,
                         std::span<const uint32_t> tokens, CachePolicy& cache,
                         std::span<const ExpertKey> staged, double link_busy_s, std::span<const uint32_t> certain) {
  ExpertPlan p;
  p.layer = layer;
  cache.access_speculative(step, keys, tokens, certain, result_);
  for (ExpertKey e : result_.evicted)
    if (in_sorted(keys, e)) throw std::logic_error("planner: the cache evicted an expert of the current working set");
  p.admitted = result_.admitted;
  p.evicted = result_.evicted;
  std::sort(p.admitted.begin(), p.admitted.end());

  std::vector<ColdExpert> cold;
  std::vector<size_t> cold_index;
  double gpu_resident = 0;
  p.experts.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    PlannedExpert& e = p.experts[i];
    e.key = keys[i];
    e.tokens = tokens.empty() ? 1 : tokens[i];
    const uint64_t bytes = bytes_of(e.key);
    if (std::binary_search(p.admitted.begin(), p.admitted.end(), e.key)) {
      e.tier = Tier::Stream;
      e.admit = true;
      cold.push_back({bytes, e.tokens, true});
      cold_index.push_back(i);
    } else if (cache.contains(e.key)) {
      e.tier = Tier::Resident;
      gpu_resident += cost_.gpu_s(bytes, e.tokens);
      ++p.n_resident;
    } else if (std::binary_search(staged.begin(), staged.end(), e.key)) {
      e.tier = Tier::Stream;
      e.staged = true;
      gpu_resident += cost_.gpu_s(bytes, e.tokens);
      ++p.n_stream;
      ++p.n_staged;
    } else {
      cold.push_back({bytes, e.tokens, !host_tier_});
      cold_index.push_back(i);
    }
  }
  const std::vector<uint8_t> stream = split_cold(cold, cost_, gpu_resident, link_busy_s);
  for (size_t c = 0; c < cold.size(); ++c) {
    PlannedExpert& e = p.experts[cold_index[c]];
    if (stream[c]) {
      e.tier = Tier::Stream;
      p.pcie_bytes += cold[c].bytes;
      ++p.n_stream;
    } else {
      e.tier = Tier::Host;
      ++p.n_host;
    }
  }
  const LayerTime t = layer_time(cold, stream, cost_, gpu_resident, link_busy_s);
  p.gpu_s = t.gpu_s;
  p.copy_s = t.copy_s;
  p.host_s = t.host_s;
  p.time_s = t.time_s;
  return p;
}

}  // namespace ms
