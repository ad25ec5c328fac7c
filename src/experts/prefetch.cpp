#include "experts/prefetch.h"

#include <algorithm>
#include <cmath>

namespace ms {

PrefetchPlan plan_prefetch(uint64_t step, std::span<const PrefetchCandidate> candidates, CachePolicy& cache,
                           std::span<const ExpertKey> working_set, uint64_t byte_cap,
                           const std::function<uint64_t(ExpertKey)>& bytes_of, float min_confidence) {
  PrefetchPlan plan;
  std::vector<PrefetchCandidate> order(candidates.begin(), candidates.end());
  std::sort(order.begin(), order.end(), [](const PrefetchCandidate& a, const PrefetchCandidate& b) {
    if (a.distance != b.distance) return a.distance < b.distance;
    if (a.confidence != b.confidence) return a.confidence > b.confidence;
    return a.key < b.key;
  });
  std::vector<ExpertKey> protect(working_set.begin(), working_set.end());
  for (const PrefetchCandidate& c : order) {
    if (c.confidence < min_confidence || cache.contains(c.key)) continue;
    const uint64_t bytes = bytes_of(c.key);
    if (plan.bytes + bytes > byte_cap) continue;  // a smaller later one may still fit
    if (!cache.prefetch(step, c.key, c.confidence, protect, plan.evicted)) continue;
    plan.copies.push_back(c.key);
    plan.bytes += bytes;
    // What we just copied must survive the rest of this plan.
    protect.insert(std::upper_bound(protect.begin(), protect.end(), c.key), c.key);
  }
  return plan;
}

uint32_t decode_stage_count(uint32_t cold, double gap_s, double backlog_s, double overhead_s, double copy_s,
                            double cpu_s) {
  if (cold == 0 || copy_s + cpu_s <= 0) return 0;
  const double s = std::round((gap_s + overhead_s + double(cold) * cpu_s - backlog_s) / (copy_s + cpu_s));
  return static_cast<uint32_t>(std::clamp(s, 0.0, double(cold)));
}

}  // namespace ms
