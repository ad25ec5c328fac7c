// The tiers of a MoE layer step, as a backend provides them: the mechanism
// MoeStep (engine/moe_step.h) drives. Plain C++ (no CUDA).
//
// Who owns what (issues #30, #41):
//   src/experts  every decision (StepScheduler: tiers, slots, waves, staging,
//                the cost model fed by measured times)
//   src/engine   the step's one sequence and its host tables (MoeStep:
//                route -> plan -> execute per tier -> combine)
//   a backend    the tiers (this interface): where routes come from, how a
//                slot is pointed at, how a wave is copied and computed, how
//                a tier computes its share of the pairs and how the pairs
//                are combined. The CUDA ones: the resident tier of
//                cuda/backend/resident_tier.h (the fused all-resident kernel),
//                hybrid_tiers.* (the planned step) and the gated tiers of
//                hybrid_gated.cpp; the CPU backend has a host tier only.
//
// Every layer's routed experts go through MoeStep::run, one of three plans:
//   resident  every routed expert is resident for good (an all-resident
//             model, a pinned layer) or the device checks residency itself
//             (the device half of a gated decode): device_runs_layer says so,
//             and run_on_device runs the layer from the device's own routes,
//             combine included. Nothing comes to the host; this is what a
//             CUDA graph captures.
//   planned   the routes come to the host (fetch_routes), the scheduler
//             plans, each tier executes its part, the pairs are combined:
//               planned, point (each device-tier expert)
//               then either decode_on_device (one token, every expert on the
//                           device: the backend's fused kernel)
//               or          fetch_input (host rows, input not fetched with
//                           the routes), upload_tables, begin_waves,
//                           per non-empty wave: copy_wave (if it copies),
//                           compute_wave, end_waves
//               stage_decode (a prediction), stage_prompt (a long pass),
//               enqueued, compute_share (the host tier's rows),
//               combine (not after decode_on_device).
//   gated     (MoeRoutes::gated) the host half of a gated decode token: the
//             device checked the routes against its residency and runs the
//             fused kernel behind a gate; the routes came from its mailbox.
//               planned, point (each device-tier expert; none when present)
//               decode_on_device (not when present: the copies, then the
//                             device's experts may go on)
//               compute_share, combine (the host tier's rows into the
//                             device's sum), stage_decode, enqueued.
//             present: the device found every expert resident or staged and
//             went on; the plan must agree (MoeStep throws where it does not).
// A backend with no device tier (no scheduler) gets fetch_routes,
// compute_share and combine only (tests/engine/moe_step_test.cpp checks each
// order with a recording implementation).
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "cpu/expert_ffn.h"
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
  // A gated decode token (see above): the device checked the routes and
  // waits at its gate; present: it found every expert resident or staged and
  // went on; staged: some in this step's staging slots, so the plan may not
  // admit (the device may be reading cache slots the admission would take).
  bool gated = false, present = false, staged = false;
  // When the routes reached the host, if the tier knows better than the
  // return of fetch_routes (the step's host overhead counts from here).
  std::chrono::steady_clock::time_point arrived{};
};

// One tier's share of a layer step, as the plan gave it: the (token, expert)
// pairs it computes, grouped by expert (ExpertWork: the expert, each pair's
// token and the row its output goes to), and the pair of each row, so that
// its partial outputs reach the combine at their pair indices. The host tier
// gets one today; a tier that computes away from the device's rows (a peer
// GPU, a low-bit copy) is one more share of the same form.
struct MoeShare {
  Tier tier = Tier::Host;
  int layer = 0, n_tokens = 0;
  const std::vector<ExpertWork>* work = nullptr;
  int rows = 0;                          // rows of the share's outputs
  const int32_t* pair_of_row = nullptr;  // [rows]; null: row r is pair r
  int pair(int row) const { return pair_of_row ? pair_of_row[row] : row; }
};

class MoeTiers {
 public:
  virtual ~MoeTiers() = default;

  // ---- the resident plan: the device runs layer `layer` of n tokens whole
  // from its own routes (no read-back, nothing planned on the host).
  virtual bool device_runs_layer(int /*layer*/, int /*n*/) const { return false; }
  virtual void run_on_device(int /*layer*/, int /*n*/) {}

  // ---- route: the layer's routes on the host, valid until the step ends;
  // with_input: the FFN input rows come back in the same trip.
  virtual MoeRoutes fetch_routes(int layer, int n, bool with_input) = 0;

  // ---- the plan's results (device tiers): bookkeeping on the schedule
  // (residency mirror, telemetry, a staging bank to wait for), then each
  // device-tier expert's slot.
  virtual void planned(int /*layer*/, const LayerSchedule& /*s*/, const MoeStepTables& /*t*/) {}
  virtual void point(int /*layer*/, int /*expert*/, SlotRef /*where*/) {}

  // ---- one decode token through the backend's fused kernel (planned: if it
  // takes this layer, the scheduler decides with this answer; gated: always).
  // `experts` indexes the plan (the device-tier ones), `copies`: some are
  // copied first.
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
  // Everything of the layer's device work is queued (planned: before the
  // host rows; gated: the layer is served).
  virtual void enqueued(int /*layer*/) {}

  // ---- a share tier (the host's): its pairs' outputs, each at its row
  // (MoeShare::pair says whose), for the combine.
  virtual void compute_share(const MoeShare& s) = 0;
  // Every pair's output times its weight into the residual, in pair order.
  virtual void combine(int layer, int n) = 0;
};

}  // namespace ms
