// The tiers of a MoE layer step, as a backend provides them: the mechanism
// MoeStep (engine/moe_step.h) drives. Plain C++ (no CUDA).
//
// Who owns what (issue #30):
//   src/experts  every decision (StepScheduler: tiers, slots, waves, staging,
//                the cost model fed by measured times)
//   src/engine   the step's sequence and its host tables (MoeStep: route ->
//                plan -> execute per tier -> combine)
//   a backend    the tiers (this interface): where routes come from, how a
//                slot is pointed at, how a wave is copied and computed, how
//                the host computes its rows and how the pairs are combined.
//                src/cuda/backend/hybrid_tiers.* is the CUDA one; the CPU
//                backend has a host tier only.
//
// MoeStep calls these in a fixed order per layer (what the tests of
// tests/engine/moe_step_test.cpp check with a recording implementation):
//   fetch_routes
//   planned, point (each device-tier expert)
//   then either decode_on_device (one token, every expert on the device)
//   or          fetch_input (host rows, input not fetched with the routes),
//               upload_tables, begin_waves,
//               per non-empty wave: copy_wave (if it copies), compute_wave,
//               end_waves
//   stage_decode (a prediction), stage_prompt (a long pass), enqueued,
//   compute_host (host rows), combine (not after decode_on_device).
// A backend with no device tier (no scheduler) gets fetch_routes,
// compute_host and combine only.
#pragma once
#include <cstdint>
#include <vector>

#include "experts/step_scheduler.h"

namespace ms {

struct MoeStepTables;  // engine/moe_step.h
struct MoeWave;

// A layer's routes on the host (fetch_routes), and the prediction that came
// back with them (decode prefetch).
struct MoeRoutes {
  const int32_t* ids = nullptr;       // [n][k]
  const int32_t* pred_ids = nullptr;  // [pred_n] experts of pred_layer, most likely first (null: none)
  int pred_layer = -1;
  int pred_n = 0;
};

class MoeTiers {
 public:
  virtual ~MoeTiers() = default;

  // ---- route: the layer's routes on the host, valid until the step ends;
  // with_input: the FFN input rows come back in the same trip.
  virtual MoeRoutes fetch_routes(int layer, int n, bool with_input) = 0;

  // ---- the plan's results (device tiers): bookkeeping on the schedule
  // (residency mirror, telemetry, a staging bank to wait for), then each
  // device-tier expert's slot.
  virtual void planned(int /*layer*/, const LayerSchedule& /*s*/, const MoeStepTables& /*t*/) {}
  virtual void point(int /*layer*/, int /*expert*/, SlotRef /*where*/) {}

  // ---- one decode token with every expert on the device: the backend's
  // all-resident kernel, if it takes this layer (the scheduler decides with
  // this answer); `experts` indexes the plan, `copies`: some are copied first.
  virtual bool decode_kernels_take(int /*layer*/) const { return false; }
  virtual void decode_on_device(int /*layer*/, const StepPlan& /*sp*/, const std::vector<size_t>& /*experts*/,
                                bool /*copies*/) {}

  // ---- the waves (device and stream tiers)
  // The host rows' input, when it did not come with the routes (queued ahead
  // of the waves so that waiting for it does not wait for them).
  virtual void fetch_input(int /*layer*/, int /*n*/) {}
  // The row tables (MoeStepTables) and slot table to the device.
  virtual void upload_tables(int /*layer*/, const MoeStepTables& /*t*/) {}
  virtual void begin_waves(int /*layer*/, bool /*any_copy*/) {}
  // Stream tier: the wave's copied experts into their slots; the wave's
  // compute then waits for them.
  virtual void copy_wave(int /*layer*/, const StepPlan& /*sp*/, const std::vector<size_t>& /*wave*/,
                         size_t /*index*/) {}
  // Device tier: the wave's rows (w.row_begin..w.row_end of the tables),
  // each pair's output at its pair index; after the prompt stage's copy group
  // w.prompt_group when that is >= 0.
  virtual void compute_wave(int /*layer*/, int /*n*/, const StepPlan& /*sp*/, const std::vector<size_t>& /*wave*/,
                            const MoeWave& /*w*/) {}
  virtual void end_waves(int /*layer*/, bool /*any_copy*/) {}

  // ---- staging, behind this layer's copies
  virtual void stage_decode(int /*layer*/, const DecodeStage& /*ds*/) {}
  virtual void stage_prompt(const PromptStage& /*ps*/) {}
  // Everything of the layer's device work is queued (before the host rows).
  virtual void enqueued(int /*layer*/) {}

  // ---- host tier: t.host_work into the pairs' outputs (rows at t.host_pair,
  // or at the pair index itself where the step was built so).
  virtual void compute_host(int layer, int n, const MoeStepTables& t) = 0;
  // Every pair's output times its weight into the residual, in pair order.
  virtual void combine(int layer, int n) = 0;
};

}  // namespace ms
