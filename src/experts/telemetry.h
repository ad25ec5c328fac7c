// What the hybrid expert step reports: where experts were computed, what
// crossed PCIe, and where a token's time went. Filled by the backend that
// runs experts in tiers (CudaBackend with a VRAM budget below the model);
// printed by `run`, `bench --json` and `--verbose-steps`. Plain data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ms {

struct TierCounts {
  uint64_t resident = 0, streamed = 0, host = 0;  // (token, expert) pairs
  uint64_t total() const { return resident + streamed + host; }
  double hit_rate() const { return total() ? double(resident) / double(total()) : 0.0; }
};

// Prefetch (`--prefetch`): how the next tiered layer's predicted experts
// compared with what it routed. Summed over layer steps that had a prediction.
struct PrefetchCounts {
  uint64_t layer_steps = 0;
  uint64_t predicted = 0, correct = 0, routed = 0;  // precision correct/predicted, recall correct/routed
  uint64_t staged = 0, staged_used = 0, cold = 0;   // copied ahead; of those used; routed and not resident
  uint64_t staged_admitted = 0;                     // of staged_used: admitted to the cache from the staging slot
  double precision() const { return predicted ? double(correct) / double(predicted) : 0.0; }
  double recall() const { return routed ? double(correct) / double(routed) : 0.0; }
  double staged_precision() const { return staged ? double(staged_used) / double(staged) : 0.0; }
  double cold_covered() const { return cold ? double(staged_used) / double(cold) : 0.0; }
};

struct ExpertTelemetry {
  bool hybrid = false;           // false: every expert resident (nothing below applies)
  std::string policy, host_pin;  // cache policy; "registered ..." or "pinned staging ring"
  uint64_t budget_bytes = 0, pool_bytes = 0;
  uint64_t cache_slots = 0, transit_slots = 0, experts_total = 0;
  // Bandwidths measured at start-up (GB/s) that the CPU-vs-PCIe split used.
  double pcie_gbps = 0, cpu_gbps = 0, gpu_gbps = 0;
  double host_gbps = 0;  // host memory read with all the pool's threads (the floor's shared DMA + CPU term)

  uint64_t passes = 0, tokens = 0;        // forward calls, tokens through them
  uint64_t decode_tokens = 0;             // of which one-token (decode) passes
  std::vector<TierCounts> layers;         // per layer (dense layers stay zero)
  TierCounts decode;                      // decode pairs only (experts per token = this / decode_tokens)
  uint64_t h2d_bytes = 0, h2d_copies = 0;
  double copy_busy_s = 0;                 // copy stream time of those copies (GPU events)
  uint64_t admitted = 0, evicted = 0;
  std::string prefetch_mode;              // off | next | auto
  uint64_t stage_bytes = 0;               // of h2d_bytes: copied ahead (prefetch)
  PrefetchCounts prefetch;                // all layers
  std::vector<PrefetchCounts> prefetch_layers;
  // Gated decode (the GPU checks residency, the host is waited for only on a
  // miss): tiered layer steps that went on without the host, and that waited.
  uint64_t gated_hits = 0, gated_misses = 0;
  uint64_t gated_staged_hits = 0;  // of gated_hits: some experts came from this step's staging slots
  // Host-side seconds, summed over the run.
  double route_wait_s = 0;   // blocked until a layer's routes reached the host (attention + router + read-back)
  double plan_s = 0;         // planning and enqueueing copies and kernels
  double cpu_experts_s = 0;  // CPU expert FFN
  double gpu_experts_s = 0;  // GPU expert phase (events: first wave to combine, incl. waiting for copies)
  double total_s = 0;        // inside forward()

  TierCounts all() const;
  double h2d_gbps() const { return copy_busy_s > 0 ? double(h2d_bytes) / copy_busy_s / 1e9 : 0.0; }
  // Multi-line human summary (empty when !hybrid).
  std::string summary() const;
  nlohmann::json to_json() const;
};

}  // namespace ms
