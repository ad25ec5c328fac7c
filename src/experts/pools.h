// How the VRAM expert budget is divided into slot pools, and a cache made of
// one policy instance per pool.
//
// A pool holds experts of one size (a slot class): layers whose experts have
// the same byte size share a pool ("global" across layers), or every layer
// gets its own pool ("per-layer quotas"). A byte budget is shared between
// slot classes in proportion to the bytes of their experts; a slot count in
// proportion to their number of experts (largest remainder, deterministic).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/policy.h"
#include "experts/trace.h"

namespace ms {

struct CapacitySpec {
  enum class Kind { Bytes, Slots, Fraction } kind = Kind::Fraction;
  double value = 0.5;         // bytes, slots, or fraction of all routed experts
  uint64_t dense_bytes = 0;   // subtracted from a byte budget first (dense weights, KV cache)
  bool per_layer = false;     // one pool per layer instead of one per slot class
  std::string describe() const;  // "4.0 GiB", "512 slots", "50% of experts"
};

struct Pool {
  uint64_t slot_bytes = 0;
  size_t slots = 0;
  std::vector<uint32_t> layers;  // model layers whose experts live here
};

struct PoolLayout {
  std::vector<Pool> pools;
  std::vector<int32_t> pool_of_layer;  // -1 for dense layers
  size_t total_slots() const;
  uint64_t total_bytes() const;        // bytes of all slots
};

// Throws ms::Error when the budget is negative after dense bytes, a fraction
// is outside 0..1, etc.
PoolLayout make_pool_layout(const TraceHeader& header, const CapacitySpec& capacity);

// A CachePolicy over several pools: each access (all keys of one layer) goes to
// the pool of its layer. `opts.pinned` may name keys of any pool; each pool
// gets its own (hottest first order kept). Each pool's policy sees compact
// pool-local keys (its layers renumbered 0, 1, ...), so per-layer quotas of a
// large model do not cost n_layer x the whole key space in memory.
class PooledCache final : public CachePolicy {
 public:
  PooledCache(const PoolLayout& layout, uint32_t n_expert, const std::string& policy, const PolicyOptions& opts);
  std::string name() const override { return name_; }
  using CachePolicy::access;
  // keys and protect: experts of one pool (one layer step).
  void access(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
              std::span<const ExpertKey> protect, AccessResult& out) override;
  void credit(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses) override;
  bool prefetch(uint64_t step, ExpertKey key, float confidence, std::span<const ExpertKey> protect,
                std::vector<ExpertKey>& evicted) override;
  void settle() override;
  void set_admission(bool on) override;
  bool contains(ExpertKey key) const override;
  size_t size() const override;
  std::vector<ExpertKey> resident() const override;
  CachePolicy& pool_policy(size_t pool) { return *pools_[pool]; }

 private:
  size_t pool_index(ExpertKey key) const;
  // The pool of `keys` (all of one pool; throws ms::Error otherwise), made local into `local`.
  size_t to_local(std::span<const ExpertKey> keys, std::vector<ExpertKey>& local, const char* what) const;
  ExpertKey to_local(ExpertKey key) const {
    return local_layer_[key / n_expert_] * n_expert_ + key % n_expert_;
  }
  ExpertKey to_global(size_t pool, ExpertKey local) const {
    return layers_of_pool_[pool][local / n_expert_] * n_expert_ + local % n_expert_;
  }
  void to_global(size_t pool, std::vector<ExpertKey>& keys) const {
    for (ExpertKey& k : keys) k = to_global(pool, k);
  }
  std::vector<std::unique_ptr<CachePolicy>> pools_;
  std::vector<int32_t> pool_of_layer_;
  std::vector<uint32_t> local_layer_;                 // layer -> its index within its pool
  std::vector<std::vector<uint32_t>> layers_of_pool_;
  std::vector<ExpertKey> local_keys_, local_protect_;
  uint32_t n_expert_;
  std::string name_;
};

}  // namespace ms
