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
// Staging (prefetch): besides, each pool may have 2 x `stage_bank` staging
// slots, numbered after the transit slots, in two banks. stage() puts the
// predicted experts of a coming layer step into the next bank (the copies
// are the mechanism's to issue, on the copy stream behind the current step's
// demand copies); the plan of that layer step, in the same step, then takes
// the staged ones that were routed as streamed with nothing left to copy.
// The banks alternate, so the mechanism must not overwrite a bank before the
// compute that reads it has run (it waits for the one staged two calls ago).
// Staged experts evict nothing. One that the policy admits at its layer step
// is copied from its staging slot into its cache slot (StepPlan::copy_from),
// not over the link a second time.
//
// Prompt staging: a pass of many tokens routes nearly every expert of a
// layer, so the link can carry a layer's cold experts before its routes are
// known, while earlier layers compute. stage_transit() gives them the next
// transit slots, in the order streamed experts take them (the plan's own
// streamed experts follow); the plan takes the routed ones as staged. A
// transit slot may then be rewritten while a compute that read it is still
// queued: the mechanism must order each copy into a transit slot after the
// compute that last read it.
//
// Invariants (checked by tests): the slot map and the policy agree on what is
// resident; no expert of the current working set is evicted; a pool never
// holds more experts than it has cache slots.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
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
  uint32_t stage_bank = 0;      // staging slots per bank (two banks per pool, outside pool_bytes); 0: no staging
  std::string policy = "default";
  // A newcomer must out-score the expert it evicts by this ratio (decayed-
  // frequency policies): without it a near-uniform router makes every miss
  // evict a peer as hot as itself, and each such swap costs a full copy.
  double admit_margin = 1.0;
  CostModel cost;
  const ExpertProfile* profile = nullptr;  // initial placement: hottest first (optional)
  // The simulator's knobs (moestream sim): pools sized by this capacity
  // instead of pool_bytes, and these policy options instead of
  // admit_margin and the profile's pins (n_keys is filled in).
  std::optional<CapacitySpec> capacity;
  std::optional<PolicyOptions> policy_options;
};

struct SlotRef {
  int32_t pool = -1;
  int32_t slot = -1;  // < slots of the pool: a cache slot; beyond: a transit slot
  bool valid() const { return slot >= 0; }
};

// How a layer step's prediction (stage()) fared, for telemetry.
struct PredictionOutcome {
  uint32_t predicted = 0;   // experts predicted (0: this step had no prediction)
  uint32_t correct = 0;     // of those, routed
  uint32_t routed = 0;      // experts routed
  uint32_t staged = 0;      // copied ahead (predicted and not resident)
  uint32_t staged_used = 0; // of those, routed and taken from the staging slot (or admitted from it)
  uint32_t staged_admitted = 0;  // of staged_used, admitted to the cache from the staging slot
  uint32_t cold = 0;        // routed experts that were not resident (streamed, staged or host)
};

struct StepPlan {
  ExpertPlan plan;               // tiers, admitted, evicted, modelled times
  std::vector<SlotRef> where;    // per plan.experts[i]; invalid for Tier::Host
  std::vector<uint8_t> copy;     // bytes to copy in this step (Tier::Stream)
  // Per plan.experts[i]: for an admitted expert that a stage copied ahead,
  // the staging slot that holds it (copy[i] then copies from there, on the
  // device, behind the stage's copy); invalid otherwise.
  std::vector<SlotRef> copy_from;
  std::vector<uint8_t> transit;  // streamed into a transit or staging slot (not kept)
  int32_t staged_bank = -1;      // the staging bank some experts come from (-1: none)
  PredictionOutcome prediction;
};

// What stage() decided: copy each key into its staging slot.
struct StagePlan {
  // 0, 1: a staging bank; kTransitBank: transit slots (stage_transit); -1: nothing staged.
  static constexpr int32_t kTransitBank = 2;
  int32_t bank = -1;
  std::vector<std::pair<ExpertKey, SlotRef>> copies;
};

// Running totals for telemetry.
struct ResidencyCounters {
  uint64_t layer_steps = 0;
  uint64_t resident = 0, streamed = 0, host = 0;  // experts (distinct per layer step)
  uint64_t admitted = 0, evicted = 0;
  uint64_t copy_bytes = 0;   // demand and staging copies
  uint64_t staged = 0, staged_used = 0, stage_bytes = 0;
};

class ExpertResidency {
 public:
  // Throws ms::Error for a bad policy name or an empty model.
  explicit ExpertResidency(const ResidencyConfig& cfg);

  const PoolLayout& layout() const { return layout_; }
  uint32_t n_expert() const { return cfg_.n_expert; }
  uint32_t transit_slots() const { return cfg_.transit_slots; }
  uint32_t stage_bank() const { return cfg_.stage_bank; }
  // Slots of each pool past its cache slots: transit, then the two staging banks.
  uint32_t extra_slots() const { return cfg_.transit_slots + 2 * cfg_.stage_bank; }
  int32_t pool_of_layer(uint32_t layer) const { return layout_.pool_of_layer[layer]; }

  // Fills the cache slots before the first step (profile's hottest experts
  // first, then an even spread over layers) and returns what to copy where.
  // fill = false: only what the policy holds from the start (its pins); the
  // rest of the cache starts empty (sim, beside Belady's MIN from empty).
  std::vector<std::pair<ExpertKey, SlotRef>> initial_placement(bool fill = true);

  // Policy "layers": the initial placement fills whole layers and nothing
  // changes after; layer_pinned(l) says layer l holds every expert (a step
  // there never needs planning: every expert is resident).
  bool whole_layers() const;
  bool layer_pinned(uint32_t layer) const;
  // Plans one layer step. keys: distinct experts, ascending; tokens[i]: how
  // many tokens chose keys[i]. The returned plan stays valid until the next call.
  // link_backlog_s: seconds of copies the link still has queued (the caller
  // tracks its copy stream); negative: not known, and a decode step with a
  // staged bank assumes the link also carries about as much staging again.
  // may_admit false: the policy admits (and so evicts) nothing in this
  // step; the plan changes no slot (a step the GPU already ran).
  // certain: a speculative verify's certain tokens per key (Planner::plan;
  // empty: every token certain).
  const StepPlan& plan(uint64_t step, uint32_t layer, std::span<const ExpertKey> keys,
                       std::span<const uint32_t> tokens, double link_backlog_s = -1, bool may_admit = true,
                       std::span<const uint32_t> certain = {});
  // A verify's accepted drafts' uses of one layer step (CachePolicy::credit).
  void credit(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses) {
    cache_.credit(step, keys, uses);
  }

  // Stages the experts predicted for `layer`'s step `step` (most confident
  // first; at most `max_experts`, and at most a bank): those not resident go
  // into the next staging bank, replacing what it held. Call before that
  // layer's plan() in the same step; a later stage() for the same layer
  // replaces this one.
  const StagePlan& stage(uint64_t step, uint32_t layer, std::span<const ExpertKey> predicted, uint32_t max_experts);

  // Prompt staging: of `wanted` (experts of `layer`, in order), those not
  // resident take the next transit slots, at most max_experts and at most
  // the transit slots; layer's plan in the same step takes the routed ones
  // as staged, with nothing to copy. Replaces an earlier stage_transit()
  // that no plan used; independent of the banks (stage()).
  const StagePlan& stage_transit(uint64_t step, uint32_t layer, std::span<const ExpertKey> wanted,
                                 uint32_t max_experts);
  // The policy's deferred bookkeeping of the last plan (CachePolicy::settle):
  // call it once the plan is acted on, off the step's critical path.
  void settle() { cache_.settle(); }

  // The cache slot of a resident expert (invalid when not resident).
  SlotRef slot_of(ExpertKey key) const;
  bool resident(ExpertKey key) const { return slot_of(key).valid(); }
  size_t resident_count() const;
  const ResidencyCounters& counters() const { return counters_; }
  // Replaces the cost model (e.g. with figures measured after start-up).
  void set_cost(const CostModel& cost) { planner_.set_cost(cost); }
  const CostModel& cost() const { return planner_.cost(); }
  std::string policy_name() const { return cache_.name(); }
  // Off: plans stream every cold expert (no CPU share); see Planner.
  void set_host_tier(bool on) { planner_.set_host_tier(on); }
  uint64_t bytes_of(ExpertKey key) const { return planner_.bytes_of(key); }

 private:
  void release(ExpertKey key);
  struct Bank;
  void fill_bank(Bank& b, uint64_t step, uint32_t layer, int32_t pool, std::span<const ExpertKey> keys, uint32_t cap,
                 const std::function<int32_t()>& next_slot);
  int32_t take_slot(int32_t pool);

  ResidencyConfig cfg_;
  PoolLayout layout_;
  PooledCache cache_;
  Planner planner_;
  std::vector<int32_t> slot_of_key_;               // [key] cache slot, -1
  std::vector<std::vector<int32_t>> free_slots_;  // per pool, a stack
  std::vector<uint32_t> transit_next_;            // per pool, next transit slot
  struct Bank {  // staged experts of one coming layer step
    uint64_t step = 0;
    int64_t layer = -1;                            // -1: nothing waiting to be used
    std::vector<ExpertKey> predicted;              // as given
    std::vector<std::pair<ExpertKey, int32_t>> staged;  // sorted by key; staging slot
  };
  Bank banks_[2];
  Bank transit_bank_;  // stage_transit's experts (slots in the transit range)
  int32_t next_bank_ = 0;
  uint64_t last_stage_bytes_ = 0;  // bytes the last stage() copies
  StagePlan stage_plan_;
  StepPlan plan_;
  ResidencyCounters counters_;
};

// The TraceHeader that sizes pools from per-layer slot bytes.
TraceHeader residency_header(const ResidencyConfig& cfg);

}  // namespace ms
