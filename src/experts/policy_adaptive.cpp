// Adaptive decayed-frequency: the lfu-decay rules (history, working-set
// protection, hysteresis), with the score half-life chosen online.
//
// Why: the best half-life depends on the workload. A long one (frequency)
// wins when popularity is skewed and stable; a short one (recency) wins when
// consecutive tokens reuse experts. Shadow caches — one lfu-decay per
// candidate half-life, tracking residency only, no data — replay the same
// accesses; the real cache evicts by the scores of the shadow with the most
// recent hits. Only past accesses are used, so this is an online policy.
#include <cmath>
#include <set>

#include "experts/policy_impl.h"
#include "experts/policy_lfu_decay.h"

namespace ms {
namespace {

// Candidate half-lives in forward passes: ~recency ... ~frequency.
constexpr double kHalflives[] = {1, 4, 16, 64, 256, 2048};
constexpr size_t kStartLeader = 5;       // 2048: frequency until evidence says otherwise
constexpr double kPerfHalflife = 4096;   // accesses over which shadow hits are compared
constexpr double kSwitchMargin = 0.01;   // a new leader must beat the current one by 1%

class AdaptivePolicy final : public CachePolicy {
 public:
  AdaptivePolicy(size_t capacity, uint32_t n_keys, double margin)
      : CachePolicy(capacity), resident_(n_keys, 0), stored_(n_keys, 0),
        log_margin_(std::log2(1.0 + std::max(0.0, margin))),
        perf_decay_(std::exp2(-1.0 / kPerfHalflife)) {
    for (double h : kHalflives) {
      shadows_.push_back(std::make_unique<LfuDecayPolicy>(capacity, n_keys, h, margin));
      perf_.push_back(0);
    }
    leader_ = kStartLeader;
  }
  std::string name() const override { return "adaptive"; }
  using CachePolicy::access;

  void access(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
              std::span<const ExpertKey> protect, AccessResult& out) override {
    settle();
    // The leader's shadow first: it also updates the scores the real cache
    // uses. The other shadows only matter to the next choice of leader, so
    // they wait for settle() (the step's decisions do not depend on them).
    const double decay = std::pow(perf_decay_, double(keys.size()));
    shadow_access(leader_, step, keys, uses, protect, decay);
    pending_ = true;
    pending_step_ = step;
    pending_decay_ = decay;
    pending_keys_.assign(keys.begin(), keys.end());
    pending_uses_.assign(uses.begin(), uses.end());
    pending_protect_.assign(protect.begin(), protect.end());
    const LfuDecayPolicy& lead = *shadows_[leader_];
    out.clear();
    for (ExpertKey k : keys) {
      if (resident_[k]) {
        out.hits.push_back(k);
        reorder(k, lead.log_score(k));
      } else {
        out.misses.push_back(k);
      }
    }
    std::sort(out.misses.begin(), out.misses.end(), [&](ExpertKey a, ExpertKey b) {
      const double sa = lead.log_score(a), sb = lead.log_score(b);
      return sa != sb ? sa > sb : a < b;
    });
    // (The shadows above admit as usual: they model each half-life's cache.)
    for (ExpertKey k : out.misses)
      if (admit_ && make_room(lead.log_score(k), protect, out.evicted))
        insert(k, lead.log_score(k)), out.admitted.push_back(k);
    std::sort(out.misses.begin(), out.misses.end());
  }

  // The other shadows' share of the last access, then the choice of leader.
  void settle() override {
    if (!pending_) return;
    pending_ = false;
    for (size_t j = 0; j < shadows_.size(); ++j)
      if (j != leader_) shadow_access(j, pending_step_, pending_keys_, pending_uses_, pending_protect_, pending_decay_);
    pick_leader();
  }

  // Every shadow's scores take the accepted drafts' uses (not its hit count:
  // the half-lives are judged on certain accesses), then the residents move
  // by the leader's.
  void credit(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses) override {
    settle();
    for (auto& s : shadows_) s->credit(step, keys, uses);
    const LfuDecayPolicy& lead = *shadows_[leader_];
    for (ExpertKey k : keys)
      if (resident_[k]) reorder(k, lead.log_score(k));
  }

  bool prefetch(uint64_t step, ExpertKey key, float confidence, std::span<const ExpertKey> protect,
                std::vector<ExpertKey>& evicted) override {
    settle();
    if (resident_[key]) return true;
    const LfuDecayPolicy& lead = *shadows_[leader_];
    const double c = std::max(1e-6f, std::min(1.0f, confidence));
    const double now = lead.halflife() > 0 ? double(step) / lead.halflife() : 0.0;
    if (!make_room(log2_add(lead.log_score(key), now + std::log2(c)), protect, evicted)) return false;
    insert(key, lead.log_score(key));
    return true;
  }

  bool contains(ExpertKey key) const override { return key < resident_.size() && resident_[key]; }
  size_t size() const override { return order_.size(); }
  std::vector<ExpertKey> resident() const override {
    std::vector<ExpertKey> v;
    for (const auto& [s, k] : order_) v.push_back(k);
    std::sort(v.begin(), v.end());
    return v;
  }
  double leader_halflife() const { return kHalflives[leader_]; }

 private:
  void shadow_access(size_t j, uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
                     std::span<const ExpertKey> protect, double decay) {
    shadows_[j]->access(step, keys, uses, protect, shadow_out_);
    perf_[j] = perf_[j] * decay + double(shadow_out_.hits.size());
  }
  void insert(ExpertKey k, double score) {
    resident_[k] = 1;
    stored_[k] = score;
    order_.insert({score, k});
  }
  void reorder(ExpertKey k, double score) {
    order_.erase({stored_[k], k});
    stored_[k] = score;
    order_.insert({score, k});
  }
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
  void pick_leader() {
    size_t best = leader_;
    for (size_t j = 0; j < perf_.size(); ++j)
      if (perf_[j] > perf_[best]) best = j;
    if (best == leader_ || perf_[best] <= perf_[leader_] * (1 + kSwitchMargin)) return;
    leader_ = best;
    // Re-rank the residents by the new leader's scores.
    std::set<std::pair<double, ExpertKey>> fresh;
    for (const auto& [s, k] : order_) {
      stored_[k] = shadows_[leader_]->log_score(k);
      fresh.insert({stored_[k], k});
    }
    order_.swap(fresh);
  }

  std::vector<std::unique_ptr<LfuDecayPolicy>> shadows_;
  std::vector<double> perf_;
  size_t leader_;
  std::vector<uint8_t> resident_;
  std::vector<double> stored_;
  std::set<std::pair<double, ExpertKey>> order_;  // residents by the leader's score, lowest first
  double log_margin_, perf_decay_;
  AccessResult shadow_out_;
  // The last access, until settle() replays it to the other shadows.
  bool pending_ = false;
  uint64_t pending_step_ = 0;
  double pending_decay_ = 1;
  std::vector<ExpertKey> pending_keys_, pending_protect_;
  std::vector<uint32_t> pending_uses_;
};

}  // namespace

std::unique_ptr<CachePolicy> make_adaptive(size_t capacity, const PolicyOptions& opts) {
  return std::make_unique<AdaptivePolicy>(capacity, opts.n_keys, opts.admit_margin);
}

}  // namespace ms
