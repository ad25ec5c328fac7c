#include "engine/state_checkpoints.h"

#include <algorithm>

#include "util/error.h"

namespace ms {

StateCheckpoints::StateCheckpoints(CheckpointOptions o) : opt_(o) {
  if (o.capacity < 0) throw Error("state checkpoints: a negative capacity");
  if (o.spacing < 1) throw Error("state checkpoints: the spacing must be at least 1");
  pos_.assign(static_cast<size_t>(o.capacity), -1);
  taken_.assign(static_cast<size_t>(o.capacity), 0);
}

int StateCheckpoints::find(int64_t pos) const {
  if (pos <= 0) return -1;
  for (size_t i = 0; i < pos_.size(); ++i)
    if (pos_[i] == pos) return static_cast<int>(i);
  return -1;
}

int64_t StateCheckpoints::at_or_below(int64_t pos) const {
  int64_t best = -1;
  for (int64_t p : pos_)
    if (p >= 0 && p <= pos) best = std::max(best, p);
  return best;
}

bool StateCheckpoints::due(int64_t pos, int64_t n_tokens) const {
  if (pos_.empty() || pos <= 0) return false;
  if (n_tokens > 1) return true;
  const int64_t last = newest();
  return pos - std::max<int64_t>(last, 0) >= opt_.spacing;
}

int StateCheckpoints::reserve(int64_t pos) {
  if (pos <= 0 || pos_.empty()) return -1;
  int e = find(pos);
  if (e < 0)
    for (size_t i = 0; i < pos_.size() && e < 0; ++i)
      if (pos_[i] < 0) e = static_cast<int>(i);
  if (e < 0) {
    // Evict the entry whose neighbours are closest together once it goes.
    // Neighbours in position order; the new position counts as one.
    std::vector<size_t> order(pos_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pos_[a] < pos_[b]; });
    int64_t best_gap = INT64_MAX;
    for (size_t r = 0; r < order.size(); ++r) {
      const size_t i = order[r];
      // The newest stays too: the likeliest one to go back to.
      if (taken_[i] == forward_ || r + 1 == order.size()) continue;
      const int64_t prev = r == 0 ? 0 : pos_[order[r - 1]];
      const int64_t gap = pos_[order[r + 1]] - prev;
      if (gap < best_gap) {
        best_gap = gap;
        e = static_cast<int>(i);
      }
    }
    // Nothing else may go (a capacity of one): the newest gives way.
    if (e < 0 && taken_[order.back()] != forward_) e = static_cast<int>(order.back());
  }
  if (e < 0) return -1;
  pos_[static_cast<size_t>(e)] = pos;
  taken_[static_cast<size_t>(e)] = forward_;
  return e;
}

void StateCheckpoints::drop_after(int64_t pos) {
  for (int64_t& p : pos_)
    if (p > pos) p = -1;
}

void StateCheckpoints::clear() { std::fill(pos_.begin(), pos_.end(), -1); }

std::vector<int64_t> StateCheckpoints::positions() const {
  std::vector<int64_t> out;
  for (int64_t p : pos_)
    if (p >= 0) out.push_back(p);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ms
