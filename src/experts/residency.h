// Which routed experts live in which VRAM slot, and where each expert of a
// layer step is computed: the policy half of the hybrid step (pure C++, no
// CUDA; the GPU side only carries out what a StepPlan says).
//
//   ExpertResidency r(cfg);                       // pools sized from a byte budget
//   for (auto& [key, slot] : r.initial_placement()) copy key into slot;
//   const StepPlan& p = r.plan(step, layer, keys, tokens);
//   for each i: p.plan.experts[i].tier says resident / stream / host;
//               p.where[i] is its slot (cache slot, or a transit slot when
//               p.transit[i]); p.copy[i] says whether its bytes must be
//               copied in first.
//
// Slots are numbers per pool (a pool holds experts of one byte size, see
// pools.h), never pointers. Every pool has, besides its cache slots, a few
// transit slots for experts that are streamed for one step without being
// kept (the policy declined to admit them). Transit slot t of a step is
// numbered slots + (t mod n_transit): the mechanism reuses them in order and
// must not overwrite one before the compute that reads it has run.
//
// Invariants (checked by tests): the slot map and the policy agree on what is
// resident; no expert of the current working set is evicted; a pool never
// holds more experts than it has cache slots.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "experts/cost_model.h"
#include "experts/planner.h"
#include "experts/pools.h"
#include "experts/profile.h"

namespace ms {

struct ResidencyConfig {
  uint32_t n_layer = 0, n_expert = 0, k = 0;
  // Bytes of one expert's slot for each layer (0: a dense layer).
  std::vector<uint64_t> slot_bytes;
  uint64_t pool_bytes = 0;      // VRAM for cache slots, all pools together
  uint32_t transit_slots = 16;  // per pool, outside pool_bytes
  std::string policy = "default";
  // A newcomer must out-score the expert it evicts by this ratio (decayed-
  // frequency policies): without it a near-uniform router makes every miss
  // evict a peer as hot as itself, and each such swap costs a full copy.
  double admit_margin = 1.0;
  CostModel cost;
  const ExpertProfile* profile = nullptr;  // initial placement: hottest first (optional)
};

struct SlotRef {
  int32_t pool = -1;
  int32_t slot = -1;  // < slots of the pool: a cache slot; beyond: a transit slot
  bool valid() const { return slot >= 0; }
};

struct StepPlan {
  ExpertPlan plan;               // tiers, admitted, evicted, modelled times
  std::vector<SlotRef> where;    // per plan.experts[i]; invalid for Tier::Host
  std::vector<uint8_t> copy;     // bytes to copy in this step (Tier::Stream)
  std::vector<uint8_t> transit;  // streamed into a transit slot (not kept)
};

// Running totals for telemetry.
struct ResidencyCounters {
  uint64_t layer_steps = 0;
  uint64_t resident = 0, streamed = 0, host = 0;  // experts (distinct per layer step)
  uint64_t admitted = 0, evicted = 0;
  uint64_t copy_bytes = 0;
};

class ExpertResidency {
 public:
  // Throws ms::Error for a bad policy name or an empty model.
  explicit ExpertResidency(const ResidencyConfig& cfg);

  const PoolLayout& layout() const { return layout_; }
  uint32_t n_expert() const { return cfg_.n_expert; }
  uint32_t transit_slots() const { return cfg_.transit_slots; }
  int32_t pool_of_layer(uint32_t layer) const { return layout_.pool_of_layer[layer]; }

  // Fills the cache slots before the first step (profile's hottest experts
  // first, then an even spread over layers) and returns what to copy where.
  std::vector<std::pair<ExpertKey, SlotRef>> initial_placement();

  // Policy "layers": the initial placement fills whole layers and nothing
  // changes after; layer_pinned(l) says layer l holds every expert (a step
  // there never needs planning: every expert is resident).
  bool whole_layers() const;
  bool layer_pinned(uint32_t layer) const;
  // Plans one layer step. keys: distinct experts, ascending; tokens[i]: how
  // many tokens chose keys[i]. The returned plan stays valid until the next call.
  const StepPlan& plan(uint64_t step, uint32_t layer, std::span<const ExpertKey> keys,
                       std::span<const uint32_t> tokens);

  // The cache slot of a resident expert (invalid when not resident).
  SlotRef slot_of(ExpertKey key) const;
  bool resident(ExpertKey key) const { return slot_of(key).valid(); }
  size_t resident_count() const;
  const ResidencyCounters& counters() const { return counters_; }
  // Replaces the cost model (e.g. with figures measured after start-up).
  void set_cost(const CostModel& cost) { planner_.set_cost(cost); }

 private:
  void release(ExpertKey key);
  int32_t take_slot(int32_t pool);

  ResidencyConfig cfg_;
  PoolLayout layout_;
  PooledCache cache_;
  Planner planner_;
  std::vector<int32_t> slot_of_key_;               // [key] cache slot, -1
  std::vector<std::vector<int32_t>> free_slots_;  // per pool, a stack
  std::vector<uint32_t> transit_next_;            // per pool, next transit slot
  StepPlan plan_;
  ResidencyCounters counters_;
};

// The TraceHeader that sizes pools from per-layer slot bytes.
TraceHeader residency_header(const ResidencyConfig& cfg);

}  // namespace ms
