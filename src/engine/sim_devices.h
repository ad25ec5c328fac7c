// `moestream sim --devices N`: replays a routing trace over a multi-device
// placement (experts/device_placement.h) with no GPU. Each simulated device
// has its own expert cache holding experts of the layers it owns:
//   policy "plan" (the default): the plan's residents, fixed -- the replay
//     then measures what the planner predicts, on the trace's real routes;
//   any cache policy name (lru, lfu-decay, adaptive, ...): each device runs
//     that policy over as many slots as the plan leaves it for its own
//     layers (its budget less its dense part and the experts it hosts for
//     other devices); the plan's peer tier stays as planned.
// Time is the planner's sum (PlacementCosts), added per routed expert use:
// every decode token counts as if it ran alone (a pass of several
// sequences counts each token's dense weights and experts). Prompt passes
// feed the dynamic caches but are not timed or counted in the figures: the
// cost model is per decode token.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experts/access.h"
#include "experts/device_placement.h"
#include "experts/policy.h"
#include "experts/trace.h"

namespace ms {

struct DeviceSimOptions {
  std::vector<PlacementDevice> devices;
  PlacementRates rates;
  uint64_t dense_bytes = 0;      // the model's dense weights, spread evenly over the trace's layers
  uint64_t reserve_bytes = 0;    // per device
  uint64_t hidden_bytes = 8192;  // one token's hidden state
  // The popularity the plan is made for; empty: measured from the trace's
  // decode tokens (trace_popularity).
  ExpertPopularity popularity;
  std::string policy = "plan";   // "plan" or a cache policy name (experts/policy.h)
  PolicyOptions policy_options;  // n_keys is filled in
};

struct DeviceSimStats {
  int id = 0;
  uint32_t first_layer = 0, end_layer = 0;
  size_t slots = 0;             // cache slots for its own layers' experts (dynamic policies; plan: its residents)
  uint64_t accesses = 0;        // its layers' expert uses in decode tokens
  uint64_t hits = 0;            // of those, resident on it
  uint64_t peer_served = 0;     // of those, computed on a peer
  uint64_t streamed = 0, cpu = 0;  // of those, from host RAM
  uint64_t hosted = 0;          // uses of other devices' experts computed on it
  uint64_t link_bytes = 0;      // host -> device copies over its link
  uint64_t peer_bytes = 0;      // hidden states it sent to other devices
  double hit_rate() const { return accesses ? double(hits) / double(accesses) : 0; }
};

struct DeviceSimResult {
  DevicePlacement plan;
  std::string policy;
  std::vector<DeviceSimStats> devices;
  uint64_t decode_tokens = 0, prompt_tokens = 0;
  PlacementCost measured;  // per decode token, by piece, over the replay
  double cost_per_token_s() const { return measured.total_s(); }
  double predicted_per_token_s() const { return plan.cost.total_s(); }
};

// The placement's view of a trace's model: each layer's experts from the
// header, `dense_bytes` spread evenly over the layers (the trace does not
// hold per-layer dense sizes).
PlacementModel placement_model_of(const TraceHeader& h, uint64_t dense_bytes, uint64_t reserve_bytes,
                                  uint64_t hidden_bytes);
// Uses per decode token of every expert, measured over the trace's decode
// passes (a pass of T tokens counts T). Throws ms::Error when the trace has
// no decode tokens.
ExpertPopularity trace_popularity(const TraceHeader& h, const AccessSequence& seq);

DeviceSimResult simulate_devices(const Trace& trace, const AccessSequence& seq, const DeviceSimOptions& opts);

// The per-device table and the cost lines `sim --devices` prints.
std::string device_sim_table(const DeviceSimResult& r);

}  // namespace ms
