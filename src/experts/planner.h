// The per-layer plan: for each routed expert of one layer step, where it is
// computed — resident (VRAM slot), streamed (copied over PCIe, then the GPU),
// or on the host CPU — and which streamed experts the cache keeps.
//
// Timing model of a layer step (the engine overlaps three engines):
//   GPU:  resident experts from VRAM, then each streamed one after its copy
//         gpu_end = max(sum of GPU times, copy time of all streamed + GPU time of the last)
//   CPU:  host_end = sum of CPU times of host-computed experts
//   the layer step takes max(gpu_end, host_end).
// Cold experts the cache does not admit are split between PCIe and the CPU to
// minimise that maximum, so for one token both sides finish together, and in a
// batch experts chosen by many tokens go to the GPU (one copy amortised over
// all of them) while single-use ones stay on the CPU when that is cheaper.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "experts/access.h"
#include "experts/cost_model.h"
#include "experts/policy.h"

namespace ms {

enum class Tier : uint8_t { Resident, Stream, Host };
const char* tier_name(Tier t);

struct PlannedExpert {
  ExpertKey key = 0;
  uint32_t tokens = 0;
  Tier tier = Tier::Resident;
  bool admit = false;   // streamed and kept in the cache afterwards
  bool staged = false;  // streamed ahead of the step (prefetch): on the GPU already, no copy now
};

struct ExpertPlan {
  uint32_t layer = 0;
  std::vector<PlannedExpert> experts;  // one per routed expert, ascending key
  std::vector<ExpertKey> admitted;     // copied in and kept
  std::vector<ExpertKey> evicted;      // dropped to make room (never one of `experts`)
  uint64_t pcie_bytes = 0;
  uint32_t n_resident = 0, n_stream = 0, n_host = 0;
  uint32_t n_staged = 0;  // of n_stream: copied ahead of the step
  double gpu_s = 0, copy_s = 0, host_s = 0, time_s = 0;
};

// A cold (non-resident) expert to place.
struct ColdExpert {
  uint64_t bytes = 0;
  uint32_t tokens = 1;
  bool must_stream = false;  // admitted by the cache: it has to be copied anyway
};

// 1 for each cold expert to stream, 0 to compute on the CPU, chosen to
// minimise the layer time given `gpu_resident_s` of GPU work on resident
// experts and `link_busy_s` of copies the link carries besides (prefetch for
// the next layer). Deterministic.
std::vector<uint8_t> split_cold(std::span<const ColdExpert> cold, const CostModel& cost, double gpu_resident_s,
                                double link_busy_s = 0);

// The layer step time of a given placement (the model above).
struct LayerTime {
  double gpu_s = 0, copy_s = 0, host_s = 0, time_s = 0;
};
LayerTime layer_time(std::span<const ColdExpert> cold, std::span<const uint8_t> stream, const CostModel& cost,
                     double gpu_resident_s, double link_busy_s = 0);

class Planner {
 public:
  // expert_bytes: per layer (as in the trace header).
  Planner(const CostModel& cost, std::vector<uint64_t> expert_bytes, uint32_t n_expert);

  // Plans one layer step: asks `cache` (the pool holding this layer) which
  // experts are hits and which misses it admits, then places the rest.
  // `keys` sorted ascending, `tokens[i]` tokens routed to keys[i].
  // `staged` (sorted): experts already copied to the GPU for this step
  // outside the cache (prefetch): streamed with no copy left to do, so they
  // cost GPU time only. The cache still sees them as misses. `link_busy_s`:
  // time the link spends on other copies meanwhile (split_cold).
  // `certain` (a speculative verify, issue #42; empty: all): of tokens[i],
  // the tokens whose route is certain; the cache counts those only
  // (CachePolicy::access_speculative), and an expert only drafts chose is
  // placed as any cold one the cache does not admit (streamed or host).
  // Throws std::logic_error if the cache evicts a key of `keys` (a bug).
  ExpertPlan plan(uint64_t step, uint32_t layer, std::span<const ExpertKey> keys, std::span<const uint32_t> tokens,
                  CachePolicy& cache, std::span<const ExpertKey> staged = {}, double link_busy_s = 0,
                  std::span<const uint32_t> certain = {});

  const CostModel& cost() const { return cost_; }
  void set_cost(const CostModel& cost) { cost_ = cost; }
  // Without the host tier every cold expert streams (a pass whose link
  // beats the CPU: StepScheduler::begin_pass). On by default.
  void set_host_tier(bool on) { host_tier_ = on; }
  bool host_tier() const { return host_tier_; }
  uint64_t bytes_of(ExpertKey key) const { return expert_bytes_[key / n_expert_]; }

 private:
  CostModel cost_;
  std::vector<uint64_t> expert_bytes_;
  uint32_t n_expert_;
  bool host_tier_ = true;
  AccessResult result_;
};

}  // namespace ms
