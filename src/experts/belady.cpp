#include "experts/belady.h"

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

#include "util/error.h"

namespace ms {

namespace {

constexpr uint32_t kNever = std::numeric_limits<uint32_t>::max();

// The future of a key from one occurrence: the positions (in keys[]) of its
// later occurrences, chained. Keys are ranked by their next use, and — since
// working sets make ties common (two experts next needed by the same step) —
// ties are broken by the use after that, and so on: keeping the key whose
// future uses come earlier is what the exhaustive search confirms optimal.
struct Futures {
  std::vector<uint32_t> next_pos;   // keys[] index of the next occurrence, kNever if none
  std::vector<uint32_t> request_of; // request index of each keys[] position
  static constexpr int kDepth = 64; // identical futures this deep: call them equal

  // True when the future starting at position `a` comes strictly earlier
  // than the one at `b` (positions of next occurrences; kNever = none).
  bool sooner(uint32_t a, uint32_t b) const {
    for (int d = 0; d < kDepth; ++d) {
      if (a == kNever || b == kNever) return a != kNever && b == kNever;
      if (request_of[a] != request_of[b]) return request_of[a] < request_of[b];
      a = next_pos[a];
      b = next_pos[b];
    }
    return false;
  }
};

struct Entry {
  uint32_t next;  // keys[] position of the next use, kNever if none
  ExpertKey key;
};

}  // namespace

uint64_t belady_hits(const RequestSequence& requests, size_t capacity, uint32_t n_keys,
                     std::vector<uint32_t>* hits_per_request) {
  const size_t n = requests.size();
  Futures f;
  f.next_pos.assign(requests.keys.size(), kNever);
  f.request_of.resize(requests.keys.size());
  std::vector<uint32_t> upcoming(n_keys, kNever);
  for (size_t i = n; i-- > 0;) {
    for (uint32_t j = requests.offsets[i]; j < requests.offsets[i + 1]; ++j) {
      const ExpertKey k = requests.keys[j];
      if (k >= n_keys) throw Error("belady_hits: key outside the key space");
      f.next_pos[j] = upcoming[k];
      f.request_of[j] = uint32_t(i);
      upcoming[k] = j;
    }
  }
  // Soonest future first; the victim is the last.
  const auto before = [&f](const Entry& a, const Entry& b) {
    if (f.sooner(a.next, b.next)) return true;
    if (f.sooner(b.next, a.next)) return false;
    return a.key < b.key;
  };
  std::set<Entry, decltype(before)> evictable(before);  // residents outside the working set
  std::vector<uint32_t> resident_next(n_keys, kNever);
  std::vector<uint8_t> resident(n_keys, 0);
  size_t size = 0;
  uint64_t hits = 0;
  std::vector<Entry> keep, misses;
  if (hits_per_request) hits_per_request->assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    keep.clear();
    misses.clear();
    for (uint32_t j = requests.offsets[i]; j < requests.offsets[i + 1]; ++j) {
      const ExpertKey k = requests.keys[j];
      if (resident[k]) {
        ++hits;
        if (hits_per_request) ++(*hits_per_request)[i];
        evictable.erase({resident_next[k], k});  // in use: protected for this request
        keep.push_back({f.next_pos[j], k});
      } else {
        misses.push_back({f.next_pos[j], k});
      }
    }
    // Soonest needed first: those are the misses worth a slot most.
    std::sort(misses.begin(), misses.end(), before);
    for (const Entry& m : misses) {
      if (size < capacity) {
        if (m.next == kNever) continue;  // never needed again: keeping it gains nothing
        ++size;
        keep.push_back(m);
        resident[m.key] = 1;
        continue;
      }
      if (evictable.empty()) continue;  // all slots hold this request's experts: bypass
      auto victim = std::prev(evictable.end());
      if (!f.sooner(m.next, victim->next)) continue;  // the newcomer is not needed sooner: bypass it
      resident[victim->key] = 0;
      evictable.erase(victim);
      keep.push_back(m);
      resident[m.key] = 1;
    }
    for (const Entry& e : keep) {
      resident_next[e.key] = e.next;
      evictable.insert(e);
    }
  }
  return hits;
}

namespace {
struct BruteForce {
  const RequestSequence& req;
  size_t capacity;
  std::vector<std::unordered_map<uint64_t, uint64_t>> memo_at;

  uint64_t best(size_t i, uint64_t state) {
    if (i == req.size()) return 0;
    auto it = memo_at[i].find(state);
    if (it != memo_at[i].end()) return it->second;
    uint64_t need = 0;
    for (ExpertKey k : req[i]) need |= uint64_t(1) << k;
    const uint64_t hits_mask = state & need;
    const uint64_t h = __builtin_popcountll(hits_mask);
    // Next state: hits kept, plus any subset of the other candidates that fits.
    const uint64_t optional = (state | need) & ~hits_mask;
    std::vector<int> bits;
    for (int b = 0; b < 64; ++b)
      if (optional >> b & 1) bits.push_back(b);
    uint64_t result = 0;
    const size_t room = capacity - __builtin_popcountll(hits_mask);
    for (uint64_t sub = 0; sub < (uint64_t(1) << bits.size()); ++sub) {
      if (size_t(__builtin_popcountll(sub)) > room) continue;
      uint64_t next = hits_mask;
      for (size_t b = 0; b < bits.size(); ++b)
        if (sub >> b & 1) next |= uint64_t(1) << bits[b];
      result = std::max(result, best(i + 1, next));
    }
    memo_at[i][state] = h + result;
    return h + result;
  }
};
}  // namespace

uint64_t brute_force_hits(const RequestSequence& requests, size_t capacity) {
  for (ExpertKey k : requests.keys)
    if (k >= 64) throw Error("brute_force_hits: keys must be < 64");
  BruteForce bf{requests, capacity, std::vector<std::unordered_map<uint64_t, uint64_t>>(requests.size())};
  return bf.best(0, 0);
}

}  // namespace ms
