// Segmented LRU: newcomers enter a probation segment; a second use promotes
// them to a protected segment (a share of the slots). Victims come from the
// probation tail first, so one-off experts cannot flush the ones used often.
#include "experts/key_list.h"
#include "experts/policy.h"
#include "experts/policy_impl.h"

namespace ms {
namespace {

class SlruPolicy final : public CachePolicy {
 public:
  SlruPolicy(size_t capacity, uint32_t n_keys, double protected_fraction)
      : CachePolicy(capacity), probation_(n_keys), protected_(n_keys),
        protected_cap_(static_cast<size_t>(double(capacity) * protected_fraction)) {}
  std::string name() const override { return "slru"; }
  using CachePolicy::access;

  void access(uint64_t, std::span<const ExpertKey> keys, std::span<const uint32_t>, std::span<const ExpertKey> protect,
              AccessResult& out) override {
    out.clear();
    for (ExpertKey k : keys) {
      if (touch(k)) out.hits.push_back(k);
      else out.misses.push_back(k);
    }
    for (ExpertKey k : out.misses)
      if (admit_ && make_room(protect, out.evicted)) {
        probation_.push_front(k);
        out.admitted.push_back(k);
      }
  }

  // An accepted draft's use counts as a hit would: a second use promotes.
  void credit(uint64_t, std::span<const ExpertKey> keys, std::span<const uint32_t>) override {
    for (ExpertKey k : keys) touch(k);
  }

  bool prefetch(uint64_t, ExpertKey key, float, std::span<const ExpertKey> protect,
                std::vector<ExpertKey>& evicted) override {
    if (contains(key)) return true;
    if (!make_room(protect, evicted)) return false;
    probation_.push_front(key);
    return true;
  }

  bool contains(ExpertKey key) const override { return probation_.contains(key) || protected_.contains(key); }
  size_t size() const override { return probation_.size() + protected_.size(); }
  std::vector<ExpertKey> resident() const override {
    std::vector<ExpertKey> a = sorted_keys(probation_), b = sorted_keys(protected_);
    a.insert(a.end(), b.begin(), b.end());
    std::sort(a.begin(), a.end());
    return a;
  }

 private:
  // A use of k: a resident one moves up (probation -> protected); false when
  // k is not resident.
  bool touch(ExpertKey k) {
    if (protected_.contains(k)) {
      protected_.move_to_front(k);
      return true;
    }
    if (!probation_.contains(k)) return false;
    probation_.unlink(k);
    protected_.push_front(k);
    // Over its share: the protected segment's tail goes back on probation.
    if (protected_.size() > protected_cap_) {
      const ExpertKey d = protected_.back();
      protected_.unlink(d);
      probation_.push_front(d);
    }
    return true;
  }
  static bool evict_from(KeyList& list, std::span<const ExpertKey> protect, std::vector<ExpertKey>& evicted) {
    for (ExpertKey k = list.back(); k != KeyList::kNone; k = list.prev(k)) {
      if (in_sorted(protect, k)) continue;
      list.unlink(k);
      evicted.push_back(k);
      return true;
    }
    return false;
  }
  bool make_room(std::span<const ExpertKey> protect, std::vector<ExpertKey>& evicted) {
    if (size() < capacity_) return true;
    return evict_from(probation_, protect, evicted) || evict_from(protected_, protect, evicted);
  }
  KeyList probation_, protected_;
  size_t protected_cap_;
};

}  // namespace

std::unique_ptr<CachePolicy> make_slru(size_t capacity, const PolicyOptions& opts) {
  return std::make_unique<SlruPolicy>(capacity, opts.n_keys, opts.slru_protected_fraction);
}

}  // namespace ms
