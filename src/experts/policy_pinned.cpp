// Static pinning combined with a dynamic policy: pinned experts (whole layers,
// e.g. the first and last, and/or the hottest experts of a saved profile) get
// reserved slots, are loaded on first use and never evicted; the remaining
// slots are run by any other policy.
#include "experts/policy.h"
#include "experts/policy_impl.h"

namespace ms {
namespace {

class PinnedPolicy final : public CachePolicy {
 public:
  PinnedPolicy(size_t capacity, const std::vector<ExpertKey>& pinned, uint32_t n_keys,
               std::unique_ptr<CachePolicy> dynamic)
      : CachePolicy(capacity), pinned_(n_keys, 0), loaded_(n_keys, 0), dynamic_(std::move(dynamic)) {
    for (ExpertKey k : pinned) pinned_[k] = 1;
  }
  std::string name() const override { return "pinned+" + dynamic_->name(); }
  using CachePolicy::access;

  // (Pinned experts keep no statistics: only their first certain use loads them.)
  void access(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
              std::span<const ExpertKey> protect, AccessResult& out) override {
    out.clear();
    dyn_keys_.clear();
    dyn_uses_.clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      const ExpertKey k = keys[i];
      if (!pinned_[k]) {
        dyn_keys_.push_back(k);
        dyn_uses_.push_back(uses.empty() ? 1 : uses[i]);
      } else if (loaded_[k]) {
        out.hits.push_back(k);
      } else if (!admit_) {
        out.misses.push_back(k);
      } else {
        loaded_[k] = 1;  // its reserved slot is waiting for it
        ++n_loaded_;
        out.misses.push_back(k);
        out.admitted.push_back(k);
      }
    }
    dynamic_->access(step, dyn_keys_, dyn_uses_, protect, dyn_out_);
    const auto append = [](std::vector<ExpertKey>& to, const std::vector<ExpertKey>& from) {
      to.insert(to.end(), from.begin(), from.end());
      std::sort(to.begin(), to.end());
    };
    append(out.hits, dyn_out_.hits);
    append(out.misses, dyn_out_.misses);
    append(out.admitted, dyn_out_.admitted);
    append(out.evicted, dyn_out_.evicted);
  }

  void credit(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses) override {
    dyn_keys_.clear();
    dyn_uses_.clear();
    for (size_t i = 0; i < keys.size(); ++i)
      if (!pinned_[keys[i]]) dyn_keys_.push_back(keys[i]), dyn_uses_.push_back(uses.empty() ? 1 : uses[i]);
    dynamic_->credit(step, dyn_keys_, dyn_uses_);
  }

  bool prefetch(uint64_t step, ExpertKey key, float confidence, std::span<const ExpertKey> protect,
                std::vector<ExpertKey>& evicted) override {
    if (pinned_[key]) {
      if (!loaded_[key]) loaded_[key] = 1, ++n_loaded_;
      return true;
    }
    return dynamic_->prefetch(step, key, confidence, protect, evicted);
  }

  void settle() override { dynamic_->settle(); }
  void set_admission(bool on) override {
    admit_ = on;
    dynamic_->set_admission(on);
  }
  bool contains(ExpertKey key) const override { return (pinned_[key] && loaded_[key]) || dynamic_->contains(key); }
  size_t size() const override { return n_loaded_ + dynamic_->size(); }
  std::vector<ExpertKey> resident() const override {
    std::vector<ExpertKey> v = dynamic_->resident();
    for (ExpertKey k = 0; k < loaded_.size(); ++k)
      if (loaded_[k]) v.push_back(k);
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  std::vector<uint8_t> pinned_, loaded_;
  size_t n_loaded_ = 0;
  std::unique_ptr<CachePolicy> dynamic_;
  std::vector<ExpertKey> dyn_keys_;
  std::vector<uint32_t> dyn_uses_;
  AccessResult dyn_out_;
};

}  // namespace

std::unique_ptr<CachePolicy> make_pinned(size_t capacity, std::vector<ExpertKey> pinned, uint32_t n_keys,
                                         std::unique_ptr<CachePolicy> dynamic) {
  return std::make_unique<PinnedPolicy>(capacity, pinned, n_keys, std::move(dynamic));
}

}  // namespace ms
