// `sim --devices` (engine/sim_devices.h, issue #45): a synthetic trace
// replayed over the placement of 2 devices costs within 2% of what the
// planner predicted from the routes of other tokens (the first half of the
// trace plans, the second half replays); over the routes it was planned
// from, the replay is the planner's sum exactly; the per-device figures
// add up; a cache policy per device runs in the slots the plan leaves.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/sim_devices.h"
#include "experts/synthetic_trace.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr uint64_t MiB = 1ull << 20;

// The records of passes [from, to) (the ids stay where they are).
Trace passes(const Trace& t, uint32_t from, uint32_t to) {
  Trace out;
  out.header = t.header;
  out.ids = t.ids;
  out.weights = t.weights;
  out.pred_ids = t.pred_ids;
  for (const TraceRecord& r : t.records)
    if (r.step >= from && r.step < to) out.records.push_back(r);
  return out;
}

Trace synthetic() {
  SyntheticTraceOptions o;
  o.n_layer = 4;
  o.n_expert = 32;
  o.k = 4;
  o.tokens = 12000;
  o.prompt_tokens = 64;
  o.prompt_batch = 64;
  o.skew = 1.0;
  o.dense_first_layers = 1;
  o.expert_bytes = 2 * MiB;
  o.seed = 45;
  return make_synthetic_trace(o);
}

DeviceSimOptions two_devices() {
  DeviceSimOptions o;
  // Two layers each: device 0 (one dense layer, one MoE layer) holds all
  // of its experts with room to spare, so the plan uses every tier (owner,
  // peer, host RAM).
  o.devices = {{.id = 0, .budget = 90 * MiB, .link_gbps = 25, .hbm_gbps = 900},
               {.id = 1, .budget = 90 * MiB, .link_gbps = 12, .hbm_gbps = 1500}};
  o.rates.peer_gbps = 50;
  o.dense_bytes = 20 * MiB;
  o.reserve_bytes = 4 * MiB;
  return o;
}

TEST(SimDevices, TwoDevicesReplayWithinTwoPercentOfThePlan) {
  const Trace t = synthetic();
  uint32_t last = 0;
  for (const TraceRecord& r : t.records) last = std::max(last, r.step);
  const Trace first = passes(t, 0, last / 2), second = passes(t, last / 2, last + 1);
  DeviceSimOptions o = two_devices();
  o.popularity = trace_popularity(first.header, build_access_sequence(first));
  const DeviceSimResult r = simulate_devices(second, build_access_sequence(second), o);
  ASSERT_GT(r.decode_tokens, 5000u);
  const double pred = r.predicted_per_token_s(), meas = r.cost_per_token_s();
  EXPECT_NEAR(meas, pred, 0.02 * pred) << "replayed " << meas * 1e3 << " ms, planned " << pred * 1e3 << " ms";
  // Not a trivial plan: experts run in VRAM, on the peer and from host RAM.
  uint64_t hits = 0, peer = 0, cold = 0;
  for (const DeviceSimStats& d : r.devices) hits += d.hits, peer += d.peer_served, cold += d.streamed + d.cpu;
  EXPECT_GT(hits, 0u);
  EXPECT_GT(peer, 0u);
  EXPECT_GT(cold, 0u);
  // A plan made for other routes (uniform) costs more on these.
  DeviceSimOptions u = two_devices();
  u.popularity = uniform_popularity(placement_model_of(t.header, u.dense_bytes, u.reserve_bytes, u.hidden_bytes));
  EXPECT_GT(simulate_devices(second, build_access_sequence(second), u).cost_per_token_s(), meas);
}

TEST(SimDevices, OverItsOwnRoutesTheReplayIsThePlannersSum) {
  const Trace t = synthetic();
  const AccessSequence seq = build_access_sequence(t);
  const DeviceSimResult r = simulate_devices(t, seq, two_devices());  // popularity from the trace itself
  EXPECT_NEAR(r.cost_per_token_s(), r.predicted_per_token_s(), 1e-9 * r.predicted_per_token_s());
  EXPECT_NEAR(r.measured.link_bytes, r.plan.cost.link_bytes, 1e-6 * (1 + r.plan.cost.link_bytes));
  EXPECT_NEAR(r.measured.peer_bytes, r.plan.cost.peer_bytes, 1e-6 * (1 + r.plan.cost.peer_bytes));
  // Every decode use of an expert is counted once, on its layer's owner.
  uint64_t uses = 0, counted = 0, hosted = 0, peer = 0;
  for (const LayerStep& s : seq.steps)
    if (s.phase == Phase::Decode)
      for (uint32_t u : seq.uses_of(s)) uses += u;
  for (const DeviceSimStats& d : r.devices) {
    EXPECT_EQ(d.accesses, d.hits + d.peer_served + d.streamed + d.cpu) << "device " << d.id;
    counted += d.accesses;
    hosted += d.hosted;
    peer += d.peer_served;
  }
  EXPECT_EQ(counted, uses);
  EXPECT_EQ(hosted, peer);
  EXPECT_EQ(uses, r.decode_tokens * 3 * 4);  // 3 MoE layers x k
}

TEST(SimDevices, ACachePolicyPerDevice) {
  const Trace t = synthetic();
  const AccessSequence seq = build_access_sequence(t);
  DeviceSimOptions o = two_devices();
  o.policy = "lfu-decay";
  const DeviceSimResult r = simulate_devices(t, seq, o);
  const DeviceSimResult plan = simulate_devices(t, seq, two_devices());
  for (size_t d = 0; d < r.devices.size(); ++d) {
    const DeviceSimStats& s = r.devices[d];
    const DevicePlan& p = r.plan.devices[d];
    // Its slots: the plan's room for its own layers (budget less dense and hosted experts).
    uint64_t largest = 0;
    for (uint32_t l = p.first_layer; l < p.end_layer; ++l) largest = std::max(largest, t.header.expert_bytes[l]);
    if (largest == 0) continue;
    EXPECT_EQ(s.slots, (p.budget - p.fixed_bytes - p.hosted_expert_bytes) / largest);
    EXPECT_EQ(s.accesses, s.hits + s.peer_served + s.streamed + s.cpu);
    EXPECT_EQ(s.accesses, plan.devices[d].accesses);
    EXPECT_EQ(s.peer_served, plan.devices[d].peer_served);  // the peer tier stays as planned
    EXPECT_GT(s.hits, 0u);
  }
  EXPECT_THROW(
      [&] {
        DeviceSimOptions bad = two_devices();
        bad.policy = "nope";
        simulate_devices(t, seq, bad);
      }(),
      Error);
}

TEST(SimDevices, NoDecodeTokensIsAnError) {
  SyntheticTraceOptions o;
  o.n_layer = 2;
  o.n_expert = 8;
  o.k = 2;
  o.tokens = 64;
  o.prompt_tokens = 64;
  const Trace t = make_synthetic_trace(o);
  EXPECT_THROW(simulate_devices(t, build_access_sequence(t), two_devices()), Error);
}

}  // namespace
}  // namespace ms
