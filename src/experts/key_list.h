// An intrusive doubly-linked list of expert keys over a fixed key space: O(1)
// push to front (most recent), unlink, and walk from the back (least recent).
// LRU and SLRU segments are built from it; arrays instead of std::list keep
// replays of millions of accesses fast and allocation-free.
#pragma once
#include <cstdint>
#include <vector>

#include "experts/access.h"

namespace ms {

class KeyList {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;
  explicit KeyList(uint32_t n_keys) : prev_(n_keys, kNone), next_(n_keys, kNone), in_(n_keys, 0) {}

  bool contains(ExpertKey k) const { return k < in_.size() && in_[k]; }
  size_t size() const { return size_; }
  ExpertKey back() const { return tail_; }     // least recent, kNone when empty
  ExpertKey prev(ExpertKey k) const { return prev_[k]; }  // towards the front

  void push_front(ExpertKey k) {
    prev_[k] = kNone;
    next_[k] = head_;
    if (head_ != kNone) prev_[head_] = k;
    head_ = k;
    if (tail_ == kNone) tail_ = k;
    in_[k] = 1;
    ++size_;
  }
  void unlink(ExpertKey k) {
    if (prev_[k] != kNone) next_[prev_[k]] = next_[k];
    else head_ = next_[k];
    if (next_[k] != kNone) prev_[next_[k]] = prev_[k];
    else tail_ = prev_[k];
    prev_[k] = next_[k] = kNone;
    in_[k] = 0;
    --size_;
  }
  void move_to_front(ExpertKey k) { unlink(k); push_front(k); }
  template <class F>
  void for_each(F&& f) const {
    for (uint32_t k = head_; k != kNone; k = next_[k]) f(k);
  }

 private:
  std::vector<uint32_t> prev_, next_;
  std::vector<uint8_t> in_;
  uint32_t head_ = kNone, tail_ = kNone;
  size_t size_ = 0;
};

}  // namespace ms
