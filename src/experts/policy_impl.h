// Constructors of the individual policies (one file each) for make_policy.
#pragma once
#include <algorithm>
#include <memory>

#include "experts/key_list.h"
#include "experts/policy.h"

namespace ms {

std::unique_ptr<CachePolicy> make_lru(size_t capacity, const PolicyOptions& opts);
std::unique_ptr<CachePolicy> make_slru(size_t capacity, const PolicyOptions& opts);
// halflife 0: plain LFU (counts never decay).
std::unique_ptr<CachePolicy> make_lfu_decay(size_t capacity, const PolicyOptions& opts, double halflife_steps,
                                            double admit_margin);
// lfu-decay with the half-life chosen online by shadow caches.
std::unique_ptr<CachePolicy> make_adaptive(size_t capacity, const PolicyOptions& opts);
// A fixed set, filled once (whole layers by the engine's initial placement).
std::unique_ptr<CachePolicy> make_layers(size_t capacity, const PolicyOptions& opts, const std::string& name);
// `pinned` (at most `capacity` keys) take reserved slots, filled on first use
// and never evicted; `dynamic` (built with capacity - pinned.size()) manages
// the rest.
std::unique_ptr<CachePolicy> make_pinned(size_t capacity, std::vector<ExpertKey> pinned, uint32_t n_keys,
                                         std::unique_ptr<CachePolicy> dynamic);

inline std::vector<ExpertKey> sorted_keys(const KeyList& list) {
  std::vector<ExpertKey> v;
  v.reserve(list.size());
  list.for_each([&](ExpertKey k) { v.push_back(k); });
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace ms
