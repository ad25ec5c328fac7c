// Decayed-frequency (LFU with exponential decay), with
//  - history: scores are kept for every expert, resident or not, so an expert
//    that keeps coming back earns its slot even after being evicted;
//  - working-set protection: never evicts an expert the current step needs;
//  - anti-thrash hysteresis: a newcomer replaces the lowest-scored resident
//    only if its score beats the victim's by `admit_margin` (a ratio);
//    otherwise it is bypassed (computed without being kept).
// An access adds the number of tokens that chose the expert to its score;
// scores halve every `halflife` forward passes.
// Scores are stored as log2(score * 2^(t/halflife)), which does
// not change as time passes, so residents stay ordered in a std::set without
// re-sorting (0 halflife: plain LFU, log2(count)).
// In a header because the adaptive policy runs several as shadows.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "experts/policy.h"

namespace ms {

inline constexpr double kNeverSeen = -std::numeric_limits<double>::infinity();

inline double log2_add(double a, double b) {  // log2(2^a + 2^b)
  if (a == kNeverSeen) return b;
  if (b == kNeverSeen) return a;
  const double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log2(1.0 + std::exp2(lo - hi));
}

class LfuDecayPolicy : public CachePolicy {
 public:
  LfuDecayPolicy(size_t capacity, uint32_t n_keys, double halflife, double margin)
      : CachePolicy(capacity), score_(n_keys, kNeverSeen), resident_(n_keys, 0), halflife_(halflife),
        log_margin_(std::log2(1.0 + std::max(0.0, margin))) {}
  std::string name() const override { return halflife_ > 0 ? "lfu-decay" : "lfu"; }

  using CachePolicy::access;
  void access(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
              std::span<const ExpertKey> protect, AccessResult& out) override {
    out.clear();
    const double now = clock(step);
    for (size_t i = 0; i < keys.size(); ++i) {
      const ExpertKey k = keys[i];
      (resident_[k] ? out.hits : out.misses).push_back(k);
      count(now, k, uses.empty() ? 1 : uses[i]);
    }
    // Best-scored misses claim slots first (ties: lower key, deterministic).
    std::sort(out.misses.begin(), out.misses.end(), [&](ExpertKey a, ExpertKey b) {
      return score_[a] != score_[b] ? score_[a] > score_[b] : a < b;
    });
    for (ExpertKey k : out.misses)
      if (admit_ && make_room(score_[k], protect, out.evicted)) insert(k), out.admitted.push_back(k);
    std::sort(out.misses.begin(), out.misses.end());
  }

  // Accepted drafts' uses add to the scores as at the verify's step.
  void credit(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses) override {
    const double now = clock(step);
    for (size_t i = 0; i < keys.size(); ++i) count(now, keys[i], uses.empty() ? 1 : uses[i]);
  }

  bool prefetch(uint64_t step, ExpertKey key, float confidence, std::span<const ExpertKey> protect,
                std::vector<ExpertKey>& evicted) override {
    if (resident_[key]) return true;
    // Judge it as if the predicted access had happened, weighted by confidence.
    const double c = std::max(1e-6f, std::min(1.0f, confidence));
    const double candidate = log2_add(score_[key], clock(step) + std::log2(c));
    if (!make_room(candidate, protect, evicted)) return false;
    insert(key);
    return true;
  }

  bool contains(ExpertKey key) const override { return key < resident_.size() && resident_[key]; }
  // log2 of the score, normalised to time 0 (comparable across keys at any time).
  double log_score(ExpertKey key) const { return score_[key]; }
  double halflife() const { return halflife_; }
  size_t size() const override { return order_.size(); }
  std::vector<ExpertKey> resident() const override {
    std::vector<ExpertKey> v;
    for (const auto& [s, k] : order_) v.push_back(k);
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  double clock(uint64_t step) const { return halflife_ > 0 ? double(step) / halflife_ : 0.0; }
  // `uses` tokens chose k at time `now`: each counts (a prompt batch teaches
  // the popularity of a layer's experts at once); a resident k moves up.
  void count(double now, ExpertKey k, uint32_t uses) {
    const double add = now + std::log2(double(std::max<uint32_t>(1, uses)));
    if (!resident_[k]) {
      score_[k] = log2_add(score_[k], add);
      return;
    }
    order_.erase({score_[k], k});
    score_[k] = log2_add(score_[k], add);
    order_.insert({score_[k], k});
  }
  void insert(ExpertKey k) {
    resident_[k] = 1;
    order_.insert({score_[k], k});
  }
  // Frees a slot for a newcomer scored `candidate` if the cache is full: the
  // lowest-scored resident outside `protect` goes, if the newcomer beats it by
  // the margin.
  bool make_room(double candidate, std::span<const ExpertKey> protect, std::vector<ExpertKey>& evicted) {
    if (order_.size() < capacity_) return capacity_ > 0;
    for (auto it = order_.begin(); it != order_.end(); ++it) {
      if (in_sorted(protect, it->second)) continue;
      if (!(candidate > it->first + log_margin_)) return false;
      resident_[it->second] = 0;
      evicted.push_back(it->second);
      order_.erase(it);
      return true;
    }
    return false;
  }

  std::vector<double> score_;
  std::vector<uint8_t> resident_;
  std::set<std::pair<double, ExpertKey>> order_;  // residents, lowest score first
  double halflife_, log_margin_;
};

}  // namespace ms
