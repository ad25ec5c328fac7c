// Replays a routing trace with no GPU through the engine's own MoE step
// (engine/moe_step.h, over tiers that move nothing) and its scheduler
// (experts/step_scheduler.h: the residency, the per-layer plan, decode
// staging of predicted experts, prompt staging, the link-vs-CPU split, the
// gated plan of decode tokens), so every decision the CUDA mechanism takes
// is exercised here in the engine's order: hit rates, PCIe
// bytes, experts computed on the CPU, the predicted expert time of each step
// from the cost model, and Belady's MIN at the same capacity.
// The time model has no stretch between layers (attention, norms): a stage's
// copies count in full against the layer step that queues them, so staging
// shows in where experts run and in link bytes more than in predicted time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experts/access.h"
#include "experts/cost_model.h"
#include "experts/policy.h"
#include "experts/pools.h"
#include "experts/step_scheduler.h"
#include "experts/trace.h"

namespace ms {

enum class PrefetchMode { None, Oracle, Predicted };
PrefetchMode parse_prefetch_mode(const std::string& name);  // none | oracle | predicted
const char* prefetch_mode_name(PrefetchMode m);

struct SimOptions {
  CapacitySpec capacity;
  std::string policy = "default";
  PolicyOptions policy_options;     // pinned keys etc. (n_keys is filled in)
  CostModel cost;
  // Where a decode step's predictions of the next tiered layer come from
  // (none: no staging); the scheduler stages them into its banks.
  PrefetchMode prefetch = PrefetchMode::None;
  float prefetch_min_confidence = 0;
  uint32_t transit_slots = 16;      // per pool (prompt stages take at most these)
  // The scheduler's choices, as the engine takes them: step.prefetch is the
  // count staged (auto: the link against the CPU; next: every cold one;
  // ignored when `prefetch` above is None), step.cost stays empty (`cost`
  // above is the model).
  StepTuning step;
  // Fill the cache before the first step as the engine does; off by default
  // so that hit rates compare with Belady's MIN, which starts empty.
  bool warm_start = false;
  bool belady = true;               // also compute Belady's MIN (costs one more pass)
  // Decode tokens take the gated plan, as the engine's decode does where its
  // kernels take every tiered layer: a layer found present (every expert
  // resident, or staged by a published stage) plans without admitting, and
  // its prediction is staged after its host experts.
  bool gated = false;
};

struct LayerSimStats {
  uint32_t layer = 0;
  uint64_t accesses = 0, hits = 0, belady_hits = 0;
};

struct SimResult {
  std::string policy;
  std::string capacity;             // as given
  size_t slots = 0;                 // all pools
  uint64_t slot_bytes = 0;          // bytes of all slots
  double fraction = 0;              // slots / all routed experts
  uint64_t accesses = 0, hits = 0;  // per distinct expert per layer step
  double hit_rate = 0;
  uint64_t belady_hits = 0;
  double belady_hit_rate = -1;      // < 0 when not computed
  std::vector<LayerSimStats> layers;  // MoE layers only
  uint64_t pcie_bytes = 0;          // demand streams + prefetch copies
  uint64_t prefetch_bytes = 0;
  uint64_t streamed = 0, host_computed = 0, resident = 0;  // expert computations by tier
  uint64_t prefetched = 0, prefetch_used = 0;              // decode staging copies, and those the layer used
  uint64_t prompt_staged = 0;       // prompt stage copies (a layer's cold experts before its routes)
  uint64_t staged = 0;              // expert computations from a staging slot (decode or prompt): no copy in the step
  double time_s = 0, prompt_time_s = 0, decode_time_s = 0; // predicted expert time
  uint64_t prompt_tokens = 0, decode_tokens = 0;
  double decode_tokens_per_s() const { return decode_time_s > 0 ? double(decode_tokens) / decode_time_s : 0; }
};

SimResult simulate(const Trace& trace, const AccessSequence& seq, const SimOptions& opts);

// The scheduler the engine would run for this trace, capacity and policy
// (what simulate() and the speculative replay, sim_spec.h, drive).
StepSchedulerOptions scheduler_options(const TraceHeader& h, const SimOptions& opts);

// Fills the Belady figures of `r` from per-layer hits (belady_hits_per_layer).
void set_belady(SimResult& r, const std::vector<uint64_t>& per_layer_hits);

// Belady's MIN hits per MoE layer at the layout's capacity (each pool on its own).
std::vector<uint64_t> belady_hits_per_layer(const AccessSequence& seq, const PoolLayout& layout);

}  // namespace ms
