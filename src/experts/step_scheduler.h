// The tiered MoE step's decisions, in one place, as plain C++ (no CUDA): what
// the mechanism (src/cuda/backend/hybrid_*.cpp) and `moestream sim` both run.
//
// Inputs: a layer's routes (distinct experts and their token counts), the
// residency (experts/residency.h: slots, policy, staging banks), and times the
// mechanism measures and reports here (start-up probes of the link, the CPU
// and HBM; per step the copies it queues, the stretch from staging a layer to
// its routes, the host's fixed cost before CPU experts start). The moving
// averages of those live here.
// Outputs: per layer step the plan per tier (resident / streamed into a cache
// slot or a transit slot / CPU), the waves the streamed experts are copied
// and computed in, and the staging choices: a decode step's prefetch (how
// many predicted experts, and whether the device may take them as present)
// and a prompt's stage (which layer's cold experts go over the link before
// its routes are known, in which copy groups, and whether the CPU gets a
// share of the pass at all).
//
//   StepScheduler s(options);
//   s.set_measured_cost(probe);                 // start-up
//   for (auto& [key, slot] : s.initial_placement()) copy key into slot;
//   s.begin_pass(n_tokens, gated);  if it says so, stage_prompt(first_tiered())
//   per layer: plan_layer(...) -> waves; stage_decode(...) for a prediction
//   s.end_pass();
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "experts/cost_model.h"
#include "experts/residency.h"

namespace ms {

// Decode: the experts predicted for the next tiered layer are staged while
// this layer computes: Off, Next (every predicted cold expert) or Auto (as
// many as the link carries before the CPU would finish the rest).
enum class DecodePrefetch { Off, Next, Auto };
// "off" | "next" | "auto"; throws ms::Error naming the valid ones.
DecodePrefetch parse_decode_prefetch(const std::string& name);
const char* decode_prefetch_name(DecodePrefetch p);

// The scheduler's choices that a user tunes (--prefetch, --cost and the
// tiered step's tuning flags): the CLI fills one, the CUDA backend holds it
// (TieredOptions::step) and hands it here unchanged.
struct StepTuning {
  DecodePrefetch prefetch = DecodePrefetch::Auto;
  // Passes that route nearly every expert copy each tiered layer's cold
  // experts before its routes are known (while earlier layers compute).
  bool prompt_stage = true;
  // Staged prompt passes also give the CPU a share of the cold experts.
  // Off by default: measured slower (bench/results/hybrid_bench.md, "Run 15":
  // the CPU's host-memory reads slow the copies, and the host thread
  // computing them enqueues nothing meanwhile).
  bool prompt_cpu = false;
  // Gated decode with prefetch auto: the staging count and the split count
  // the link's queued copies and the GPU-only stretch before the staged
  // layer's routes; false: as if both were 0 (A/B runs).
  bool stage_gap = true;
  // Gated decode: a layer whose routed experts are all resident or staged
  // goes on without the host; false: such a layer waits for it (A/B runs).
  bool staged_hits = true;
  // Speculative verifies (issue #42): a draft token's experts count in the
  // cache policy only once the draft is accepted (MoeStep::set_draft_ranks,
  // confirm_drafts); false: every routed token counts when routed (A/B runs:
  // bench/results/spec_policy_sim.md compares both).
  bool draft_credit = true;
  CostOverrides cost;  // figures applied over the probe's
};

struct StepSchedulerOptions {
  // Slots, policy, cost model, profile. transit_slots as asked (the
  // scheduler rounds it: transit_slots()); stage_bank is set from
  // tuning.prefetch.
  ResidencyConfig residency;
  // Weight bytes of one expert per layer (gate + up + down, unaligned); empty:
  // residency.slot_bytes. The link-vs-CPU choice of prompts compares these.
  std::vector<uint64_t> expert_bytes;
  StepTuning tuning;
};

// What the mechanism measured at start-up; each pair is bytes and seconds
// (a rate is left at its default where the seconds are 0).
struct CostProbe {
  double link_bytes = 0, link_s = 0;  // pinned host->device expert copies
  double cpu_bytes = 0, cpu_s = 0;    // CPU expert FFN, one token over distinct experts
  // CPU expert FFN on a batch: weight bytes times tokens (its arithmetic rate
  // for prompt passes; decode keeps the default figure its split was tuned with)
  double batch_weight_bytes = 0, batch_s = 0;
  double hbm_bytes = 0, hbm_s = 0;    // device-to-device copies, bytes read + written
};

// One layer step's schedule (plan_layer); valid until the next call.
struct LayerSchedule {
  const StepPlan* plan = nullptr;
  // The staged experts come from the prompt's stage (in its copy groups'
  // waves) rather than a decode staging bank.
  bool from_prompt_stage = false;
  int32_t bank = -1;  // the decode staging bank the compute waits for (-1: none)
  // Indices into plan->plan.experts, per wave (CPU experts in none): wave 0
  // has the resident, admitted and bank-staged experts; with a prompt stage,
  // wave g its copy group g; transit experts follow (from wave 0, or after
  // the stage's groups), wave_experts() per wave, so a wave's copies overlap
  // the previous wave's compute.
  std::vector<std::vector<size_t>> waves;
  uint32_t n_transit = 0;  // experts copied into transit slots in this step
};

// The result of a decode staging (stage_decode).
struct DecodeStage {
  const StagePlan* plan = nullptr;
  // Gated decode: every predicted cold expert is staged, so the device may
  // take the layer's routes as present without the host (the mechanism
  // points the slot table at the staging slots and stamps them).
  bool publish = false;
};

// A prompt's stage of one layer (stage_prompt).
struct PromptStage {
  int layer = -1;                    // -1: nothing staged
  const StagePlan* plan = nullptr;   // the copies, in order
  std::vector<size_t> group_end;     // copy group g is copies [group_end[g-1], group_end[g])
};

class StepScheduler {
 public:
  using Clock = std::chrono::steady_clock;

  // A pass of at most this many tokens brings its FFN input back with the
  // routes (decode: a few KB more in the same copy); larger passes fetch it
  // only when some expert runs on the CPU.
  static constexpr int kEagerInputTokens = 64;

  // Staging slots per bank (two banks per pool) for a prefetch mode.
  static uint32_t stage_bank(uint32_t k, DecodePrefetch prefetch);
  // Transit slots per pool for the count asked: even (waves take half each), at least 2.
  static uint32_t transit_slots(uint32_t asked);
  // Transit slots per pool when none is asked (asked 0): passes of fewer than
  // kPromptTransitFrom tokens take kDecodeTransit; larger ones the largest of
  // prompt_transit(n_expert), then down in steps of kDecodeTransit, for which
  // fits(t) says the budget still has room (the ring keeps the link busy
  // across a prompt's layers; its bytes come out of the cache slots), else
  // kDecodeTransit. A count asked is taken as it is.
  static constexpr uint32_t kDecodeTransit = 16, kPromptTransit = 48;
  static constexpr int kPromptTransitFrom = 64;
  // The ring a prompt pass wants: room to stage half of a layer's experts
  // (a long pass routes nearly all of them) ahead of its routes, so that the
  // copies left for after the routes are at most the other half, and never
  // fewer than kPromptTransit. With many small experts (Qwen3.6: 256 of a
  // layer) a fixed 48 staged a quarter of a layer's cold set and the rest
  // held each tiered layer's experts back (bench/results/long_context.md,
  // session 7).
  static uint32_t prompt_transit(int n_expert);
  static uint32_t choose_transit_slots(uint32_t asked, int max_tokens, int n_expert,
                                       const std::function<bool(uint32_t)>& fits);

  // Throws ms::Error for a bad policy name or an empty model.
  explicit StepScheduler(const StepSchedulerOptions& opt);

  ExpertResidency& residency() { return res_; }
  const ExpertResidency& residency() const { return res_; }
  const StepSchedulerOptions& options() const { return opt_; }

  // ---- cost model
  const CostModel& cost() const { return cost_; }
  // The figures as given (tests, sim); the residency plans with them.
  void set_cost(const CostModel& cost);
  // The start-up probe's figures over the defaults, then the overrides.
  // Throws ms::Error for a bad override.
  void set_measured_cost(const CostProbe& probe);
  double prompt_cpu_gflops() const { return prompt_cpu_gflops_; }

  // ---- start-up: fills the cache slots (what to copy where; fill = false:
  // only the policy's pins, see ExpertResidency), then finds the layers
  // pinned whole and the prompt staging threshold. Call once, before the
  // first pass.
  std::vector<std::pair<ExpertKey, SlotRef>> initial_placement(bool fill = true);
  bool layer_pinned(uint32_t layer) const { return layer < pinned_.size() && pinned_[layer]; }
  uint32_t pinned_layers() const { return n_pinned_; }
  // Layers planned here: MoE layers not pinned whole.
  int first_tiered() const { return first_tiered_; }
  int next_tiered(int layer) const { return next_tiered_.at(static_cast<size_t>(layer)); }
  // Passes of at least this many tokens stage their prompt (0: never): the
  // count at which an expert is routed with probability 0.95 (uniform
  // routing: 1 - (1 - k/E)^n).
  int prompt_stage_min() const { return prompt_stage_min_; }

  // ---- passes
  // A forward pass of n tokens starts (gated: a gated decode step). Returns
  // true when the mechanism should stage the first tiered layer's prompt
  // (stage_prompt(step, first_tiered(), n)).
  bool begin_pass(int n_tokens, bool gated);
  void end_pass();
  bool gated_pass() const { return gated_pass_; }
  // A pass of n tokens stages each tiered layer's cold experts ahead.
  bool stages_prompt(int n) const { return prompt_stage_min_ > 0 && n >= prompt_stage_min_ && !gated_pass_; }
  // Layer's cold experts are copied faster than the CPU computes them at a
  // pass of n tokens (tokens per expert n k / E): staging pays, and the CPU
  // takes no share of the pass (unless prompt_cpu).
  bool prompt_copies_win(int layer, int n) const;
  // The pass fetches its FFN input with the routes.
  static bool input_with_routes(int n) { return n <= kEagerInputTokens; }
  // Experts per wave of transit copies (and per copy group of a prompt's stage).
  uint32_t wave_experts() const;

  // ---- a layer step
  // Plans layer's step from its routes (keys ascending, tokens per key).
  // gated_layer: a gated decode layer (the link's backlog counts, with
  // stage_gap). may_admit false: no slot changes (the GPU already ran it).
  // certain: a speculative verify's certain tokens per key (empty: all; see
  // ExpertResidency::plan).
  const LayerSchedule& plan_layer(uint64_t step, uint32_t layer, std::span<const ExpertKey> keys,
                                  std::span<const uint32_t> tokens, bool gated_layer = false, bool may_admit = true,
                                  std::span<const uint32_t> certain = {});
  // A verify's accepted drafts: their uses of one layer step at `step` count
  // in the cache policy's statistics now (CachePolicy::credit).
  void credit(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses) {
    res_.credit(step, keys, uses);
  }
  // One decode token whose experts are all on the GPU (none on the CPU, every
  // streamed one in its own transit slot) takes the all-resident kernels
  // over the slot table, when they take this layer (kernels_take_layer).
  bool decode_all_on_gpu(int n_tokens, const LayerSchedule& s, bool kernels_take_layer) const;

  // Decode prefetch: the predicted experts of `layer` (most likely first)
  // into the next staging bank, as many as the prefetch mode says.
  DecodeStage stage_decode(uint64_t step, uint32_t layer, std::span<const ExpertKey> predicted);
  // Prompt staging: layer's cold experts into the next transit slots, in copy
  // groups of wave_experts(); nothing where the CPU would compute them faster.
  const PromptStage& stage_prompt(uint64_t step, int layer, int n_tokens);
  // The copy group of a staged expert of the current prompt stage (-1: not staged).
  int prompt_group(uint32_t expert) const;
  // Copy groups of the current prompt stage (0: none).
  size_t prompt_stage_groups() const { return prompt_.layer < 0 ? 0 : prompt_.group_end.size(); }

  // ---- times the mechanism reports
  // Copies of `bytes` queued on the link at `now`: when the link will be free.
  void note_link(uint64_t bytes, Clock::time_point now = Clock::now());
  double link_backlog_s(Clock::time_point now = Clock::now()) const;
  // Host seconds from a layer's routes to its CPU experts' start (the CPU
  // tier's fixed cost per layer: the least seen).
  void note_host_overhead(double s);
  double host_overhead_s() const { return min_overhead_s_; }
  // Gated decode: the step `seq` staged `layer`'s prediction at `t`, and the
  // layer's routes reached the host at `t`: the stretch between (the GPU
  // computing the layers in between) is link time the staging may fill.
  void note_staged(uint32_t layer, uint32_t seq, Clock::time_point t);
  void note_routes(uint32_t layer, uint32_t seq, Clock::time_point t);
  double route_gap_s(uint32_t layer) const { return route_gap_s_.at(layer); }
  // A staged prompt layer's CPU share started this long after its routes.
  void note_prompt_cpu_delay(double s);
  double prompt_cpu_start_s() const { return prompt_cpu_start_s_; }

  // Gated auto staging, for the profile: gaps and counts summed per staging.
  struct StagingStats {
    double gap_sum_s = 0, staged_sum = 0;
    uint64_t stagings = 0;
  };
  const StagingStats& staging_stats() const { return staging_; }

 private:
  uint64_t expert_bytes(uint32_t layer) const;

  StepSchedulerOptions opt_;
  ExpertResidency res_;
  CostModel cost_;                 // measured (or given) figures
  double prompt_cpu_gflops_ = 0;   // the CPU's rate on a batch (0: cost_'s)
  bool prompt_cost_set_ = false;   // res_ plans with the prompt's cost this pass
  bool gated_pass_ = false;

  std::vector<uint8_t> pinned_;
  uint32_t n_pinned_ = 0;
  std::vector<int> next_tiered_;
  int first_tiered_ = -1;
  int prompt_stage_min_ = 0;

  PromptStage prompt_;
  std::vector<int16_t> prompt_group_;  // per expert of prompt_.layer
  LayerSchedule sched_;

  Clock::time_point link_free_at_{};
  double min_overhead_s_ = 0;
  std::vector<Clock::time_point> staged_at_;
  std::vector<uint32_t> staged_seq_;
  std::vector<double> route_gap_s_;
  double prompt_cpu_start_s_ = 0;
  StagingStats staging_;
};

}  // namespace ms
