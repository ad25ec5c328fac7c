// Belady's MIN: the most hits any cache of a given capacity can get on a known
// sequence of requests — the limit online policies are measured against.
//
// Model (the same rules as every CachePolicy): each request is a working set
// of distinct experts needed at once; resident ones are hits and cannot be
// evicted during that request; a miss may be admitted (evicting a resident
// outside the working set) or bypassed (computed without being kept). No
// prefetching. With bypass allowed, evicting the candidate whose next use is
// furthest away — the newcomer itself included — is optimal; tests check this
// against exhaustive search on small sequences.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "experts/access.h"

namespace ms {

// Working sets in order: request i is keys[offsets[i] .. offsets[i+1]), each
// sorted ascending without duplicates.
struct RequestSequence {
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> offsets{0};
  size_t size() const { return offsets.size() - 1; }
  std::span<const ExpertKey> operator[](size_t i) const { return {keys.data() + offsets[i], offsets[i + 1] - offsets[i]}; }
  void push(std::span<const ExpertKey> working_set) {
    keys.insert(keys.end(), working_set.begin(), working_set.end());
    offsets.push_back(static_cast<uint32_t>(keys.size()));
  }
};

// Hits of Belady's MIN with bypass at `capacity` slots (keys < n_keys);
// optionally the hits of each request.
uint64_t belady_hits(const RequestSequence& requests, size_t capacity, uint32_t n_keys,
                     std::vector<uint32_t>* hits_per_request = nullptr);

// The optimum by exhaustive search over every legal cache state after every
// request (any subset of resident ∪ requested that keeps the hits and fits).
// Exponential: only for tests with keys < 64 and a few dozen requests.
uint64_t brute_force_hits(const RequestSequence& requests, size_t capacity);

}  // namespace ms
