// LRU: evict the least recently used expert that the current step does not need.
#include <algorithm>

#include "experts/key_list.h"
#include "experts/policy.h"
#include "experts/policy_impl.h"

namespace ms {
namespace {

class LruPolicy final : public CachePolicy {
 public:
  LruPolicy(size_t capacity, uint32_t n_keys) : CachePolicy(capacity), list_(n_keys) {}
  std::string name() const override { return "lru"; }
  using CachePolicy::access;

  void access(uint64_t, std::span<const ExpertKey> keys, std::span<const uint32_t>, std::span<const ExpertKey> protect,
              AccessResult& out) override {
    out.clear();
    for (ExpertKey k : keys) {
      if (list_.contains(k)) {
        out.hits.push_back(k);
        list_.move_to_front(k);
      } else {
        out.misses.push_back(k);
      }
    }
    for (ExpertKey k : out.misses)
      if (admit_ && make_room(protect, out.evicted)) {
        list_.push_front(k);
        out.admitted.push_back(k);
      }
  }

  // An accepted draft's use makes its expert recent, as a hit would.
  void credit(uint64_t, std::span<const ExpertKey> keys, std::span<const uint32_t>) override {
    for (ExpertKey k : keys)
      if (list_.contains(k)) list_.move_to_front(k);
  }

  bool prefetch(uint64_t, ExpertKey key, float, std::span<const ExpertKey> protect,
                std::vector<ExpertKey>& evicted) override {
    if (list_.contains(key)) return true;
    if (!make_room(protect, evicted)) return false;
    list_.push_front(key);
    return true;
  }

  bool contains(ExpertKey key) const override { return list_.contains(key); }
  size_t size() const override { return list_.size(); }
  std::vector<ExpertKey> resident() const override { return sorted_keys(list_); }

 private:
  // Frees a slot if the cache is full, evicting the least recent key not in
  // `protect`; false when every resident key is protected (or capacity is 0).
  bool make_room(std::span<const ExpertKey> protect, std::vector<ExpertKey>& evicted) {
    if (list_.size() < capacity_) return true;
    for (ExpertKey k = list_.back(); k != KeyList::kNone; k = list_.prev(k)) {
      if (in_sorted(protect, k)) continue;
      list_.unlink(k);
      evicted.push_back(k);
      return true;
    }
    return false;
  }
  KeyList list_;
};

}  // namespace

std::unique_ptr<CachePolicy> make_lru(size_t capacity, const PolicyOptions& opts) {
  return std::make_unique<LruPolicy>(capacity, opts.n_keys);
}

}  // namespace ms
