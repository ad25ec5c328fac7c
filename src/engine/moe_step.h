// One MoE layer's step, owned here (issues #30, #41): route -> plan ->
// execute per tier -> combine, the one sequence every backend's routed
// experts go through (the all-resident kernel, the planned tiered step, the
// gated decode, the CPU's). Plain C++: the decisions are the StepScheduler's
// (experts/step_scheduler.h), the mechanism a backend's MoeTiers
// (engine/moe_tiers.h says which calls each plan makes, in which order);
// this keeps the order between them and the host tables the tiers read:
//   - the routes grouped by expert (each expert's pairs in pair order), as
//     the scheduler's keys and token counts;
//   - the device rows in wave order (a wave's rows consecutive, so its
//     elementwise steps touch only its own rows): token_of_row, pair_of_row,
//     and per group (one expert of a wave) its first row and its expert;
//   - the host tier's work list (cpu/expert_ffn.h's ExpertWork) and the pair
//     of each of its rows.
// Without a scheduler every expert is the host's (the CPU backend): the work
// list is group_by_expert's, its rows the pair indices.
#pragma once
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "cpu/expert_ffn.h"
#include "engine/moe_tiers.h"
#include "experts/step_scheduler.h"

namespace ms {

// One wave's part of the device rows.
struct MoeWave {
  size_t index = 0;                    // into LayerSchedule::waves (row chunks of one wave share it)
  int row_begin = 0, row_end = 0;      // device rows [row_begin, row_end)
  int group_begin = 0, group_end = 0;  // groups (one expert each) [group_begin, group_end)
  int max_rows = 1;                    // rows of the wave's largest group
  bool copies = false;                 // some expert of the wave is copied in this step (its first chunk)
  int prompt_group = -1;               // the prompt stage's copy group it waits for (-1: none)
};

struct MoeStepTables {
  int n_tokens = 0;
  // Per expert: its pairs are by_expert[start[e] .. start[e + 1]).
  std::vector<int32_t> start;
  std::vector<int32_t> by_expert;  // pair indices grouped by expert, in pair order
  std::vector<ExpertKey> keys;     // routed experts, ascending (the scheduler's input)
  std::vector<uint32_t> tokens;    // pairs per key
  // A speculative verify (MoeStep::set_draft_ranks): of tokens[i], the
  // certain ones (the token fed, not a draft); empty: every token certain.
  std::vector<uint32_t> certain;
  // Device rows in wave order.
  int rows = 0, groups = 0;
  std::vector<int32_t> token_of_row, pair_of_row;  // [rows]
  // Unchunked: [groups + 1], the first row of each group, then rows.
  // Chunked (MoeStep::set_chunk_rows): each chunk's groups are followed by
  // one end entry (its row count; group_expert -1 there), and offsets count
  // from the chunk's first row, so a chunk-sized buffer takes its rows at 0.
  std::vector<int32_t> group_offset;
  std::vector<int32_t> group_expert;  // [groups] (chunked: with the end entries)
  std::vector<MoeWave> waves;
  // Host tier (its MoeShare).
  std::vector<ExpertWork> host_work;
  std::vector<int32_t> host_pair;  // [host_rows]: the pair of host row r
  int host_rows = 0;
  bool host_rows_at_pair = false;  // host_work's slots are pair indices (no host_pair step)

  int pairs_of(int e) const { return start[static_cast<size_t>(e) + 1] - start[static_cast<size_t>(e)]; }
};

class MoeStep {
 public:
  using Clock = std::chrono::steady_clock;

  // sched null: a host-only step (every expert on the host tier).
  MoeStep(int n_expert, int k, StepScheduler* sched);

  // Layer `layer`'s step of n tokens through the tiers, in MoeTiers' order
  // for the plan they take (resident, planned or gated). step: the forward
  // pass's ordinal (the policies' clock). Throws ms::Error for a routed id
  // out of range, and for a gated layer the device found present that the
  // plan does not hold on the device.
  void run(uint64_t step, int layer, int n, MoeTiers& tiers);

  // A decode prediction of `layer` (ids [n], most likely first) into the
  // scheduler's staging: nothing (plan null) for a layer it does not tier.
  // Throws ms::Error for an id out of range.
  DecodeStage stage_decode(uint64_t step, int layer, const int32_t* ids, int n);

  const MoeStepTables& tables() const { return t_; }

  // ---- a speculative verify (issue #42): the draft tokens' routes must not
  // teach the cache policy before they are known to be kept.
  // The draft rank of each token of the passes from now on (0: certain, the
  // token fed; r > 0: the r-th draft of the verify), or empty: every token
  // certain. The plans then count the certain tokens only (unless the
  // scheduler's StepTuning::draft_credit is off)
  // (CachePolicy::access_speculative) and keep the drafts' routes for
  // confirm_drafts(). run() throws ms::Error for a pass whose token count is
  // not the ranks'.
  void set_draft_ranks(std::span<const int32_t> ranks) { draft_rank_.assign(ranks.begin(), ranks.end()); }
  // The verify is sampled: drafts 1..accepted were kept. Their routes of each
  // layer step since the ranks were set count in the policy's statistics now
  // (StepScheduler::credit, at the step they were routed); the rejected
  // drafts' never do. Clears the ranks and the kept routes.
  void confirm_drafts(int accepted);
  // Draft routes kept for confirm_drafts() (pairs).
  size_t pending_draft_pairs() const { return draft_uses_.size(); }

  // Measured host times go to the scheduler (its overhead and prompt-CPU
  // delay figures); off for a replay (`moestream sim`), whose wall time is
  // not the engine's.
  void set_report_times(bool on) { report_times_ = on; }

  // Row chunks (issue #29): a wave of more than `rows` device rows becomes
  // several MoeWave of at most `rows` each (an expert's rows may be cut
  // between two), so the device tier's per-row buffers (gathered input,
  // gate/up, compact output) need `rows` rows instead of a whole pass's
  // pairs. The wave's copies come with its first chunk. 0 (the default):
  // one MoeWave per wave, offsets from the pass's first row.
  void set_chunk_rows(int rows) { chunk_rows_ = rows < 0 ? 0 : rows; }
  int chunk_rows() const { return chunk_rows_; }

  // The most group_offset entries a step of up to `pairs` pairs makes with
  // set_chunk_rows(chunk_rows) (a device tier sizes its tables by it):
  // groups + 1 unchunked; chunked, each chunk's groups and end entry: a
  // group has a row or more, and a wave (an expert or more, but some waves
  // may be empty: twice the experts, with room) gives one chunk plus one per
  // chunk_rows of its rows.
  static size_t group_entries_bound(int64_t pairs, int n_expert, int chunk_rows) {
    if (chunk_rows <= 0) return static_cast<size_t>(pairs) + 1;
    return static_cast<size_t>(pairs + 2 * int64_t{n_expert} + pairs / chunk_rows + 2);
  }

 private:
  void group(int layer, const int32_t* ids, int n);
  // Host work of the schedule's host-tier experts (all of them without a
  // schedule); device-tier experts pointed at their slots.
  void split(int layer, const LayerSchedule* ls, bool rows_at_pair, MoeTiers* tiers);
  void build_rows(const LayerSchedule& ls);
  // The gated plan (MoeRoutes::gated), after the routes.
  void run_gated(uint64_t step, int layer, const MoeRoutes& r, MoeTiers& tiers, Clock::time_point t_plan);
  // The host tier's share (t_'s host work).
  MoeShare host_share(int layer) const;
  void build_chunked_rows(const LayerSchedule& ls);
  // t_.certain from the draft ranks, and the drafts' pairs into draft_uses_.
  void note_drafts(uint64_t step, int n);

  int n_expert_, k_;
  StepScheduler* sched_;
  MoeStepTables t_;
  std::vector<int32_t> cursor_;
  std::vector<size_t> device_experts_;  // a fused decode's device-tier experts (kept: no allocation per token)
  int chunk_rows_ = 0;
  bool report_times_ = true;
  struct DraftUse {
    uint64_t step;
    ExpertKey key;
    int32_t rank;
  };
  std::vector<int32_t> draft_rank_;     // per token of a pass (empty: all certain)
  std::vector<DraftUse> draft_uses_;    // the drafts' pairs since set_draft_ranks
};

}  // namespace ms
