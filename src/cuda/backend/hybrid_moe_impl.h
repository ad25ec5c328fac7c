// HybridMoe's private state, shared by hybrid_moe.cpp (set-up, passes, the
// mechanism both plans share), hybrid_tiers.cpp (the tiers of
// engine/moe_step.h's planned step: prompts, and decode without the gate)
// and hybrid_gated.cpp (the tiers of its gated plan: the gated decode). CUDA-only; include it only from
// those.
#pragma once
#include <algorithm>
#include <chrono>
#include <string>
#include <memory>
#include <vector>

#include "cuda/backend/hybrid_moe.h"
#include "cuda/backend/link_timeline.h"
#include "cuda/device.h"
#include "cuda/expert_copier.h"
#include "cuda/expert_gate.h"
#include "cuda/expert_slots.h"
#include "engine/expert_executor.h"
#include "engine/moe_step.h"
#include "experts/residency.h"
#include "experts/step_scheduler.h"

namespace ms {
namespace hybrid_detail {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr size_t kAlign = 256;
inline size_t align_up(size_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }

// Bytes of the step's expert scratch (hg) for passes of up to max_tokens,
// with per-row buffers of `rows` rows (HybridMoe::buffer_rows).
size_t step_scratch_bytes(const ModelConfig& c, int max_tokens, int rows);

// Entries of the index buffer's group tables (offsets; experts one fewer)
// for passes of up to max_tokens (MoeStep::group_entries_bound; passes of no
// more pairs than a chunk are never chunked: HybridMoe::Impl::chunk_rows_for).
inline size_t group_entries(const ModelConfig& c, int max_tokens, int chunk_rows) {
  const int64_t P = int64_t{max_tokens} * c.n_expert_used;
  return MoeStep::group_entries_bound(P, c.n_expert, P > chunk_rows ? chunk_rows : 0);
}

}  // namespace hybrid_detail

struct HybridMoe::Impl {
  const ModelWeights& w;
  const ModelConfig& c;
  HybridMoeOptions opt;
  cudaStream_t stream;
  std::unique_ptr<ThreadPool> own_pool;
  ThreadPool* pool = nullptr;
  ModelWeights host_w;  // w with the experts where the CPU reads them (the pinned copy, if any)
  std::unique_ptr<CpuExpertExecutor> cpu;
  // Every decision of the step (plans, waves, staging, the cost model and
  // the moving averages of measured times) is the scheduler's; this
  // mechanism carries out what it says and reports times to it.
  std::unique_ptr<StepScheduler> sched;
  // The step's sequence and host tables (src/engine owns them): run(), the
  // gated decode's device half and its serve all go through it.
  std::unique_ptr<MoeStep> moe_step;
  ExpertResidency* res = nullptr;  // sched's residency (slots, layout)
  std::unique_ptr<cuda::DeviceExpertSlots> slots;
  std::unique_ptr<cuda::ExpertCopier> copier;
  std::vector<cuda::SlotGeometry> geom;  // per layer
  std::vector<int64_t> first_source;     // per layer: the copier's index of its expert 0 (-1: dense)
  // Per layer: which all-resident decode kernels take its experts.
  static constexpr uint8_t kExpertFfn = 1;
  std::vector<uint8_t> decode_path;
  size_t decode_scratch_bytes = 0;  // hg's bytes, lent to cuda::expert_ffn at decode

  cuda::DeviceArena arena;
  float *xg = nullptr, *hg = nullptr, *hu = nullptr, *yc = nullptr, *exp_y = nullptr;
  cuda::Q8Act xg_q8, h_q8;
  // [token_of_row | pair_of_row | offsets | group_expert | cpu_pair]: P, P,
  // G, G - 1, P entries (G: group_entries).
  int32_t* idx = nullptr;
  cuda::PinnedBuffer ids_host, x_host, idx_host, cpu_y_host;
  cuda::Event routes_ready{false}, x_ready{false};
  // Staging banks (prefetch): copied (copy stream) / read by the layer that used them (compute stream).
  cuda::Event stage_ready[2] = {cuda::Event(false), cuda::Event(false)};
  cuda::Event bank_free[2] = {cuda::Event(false), cuda::Event(false)};
  uint32_t bank_size = 0;                // staging slots per bank (0: prefetch off)
  bool copy0_recorded = false;           // this run() opened the copy timing window
  std::vector<std::unique_ptr<cuda::Event>> copied;
  cuda::Event gpu0{true}, gpu1{true}, copy0{true}, copy1{true};
  bool timing_pending = false, copy_timing_pending = false;
  // The GPU and copy phases are timed with events on one layer step in
  // kTimingEvery (and counted that many times): each event call is a
  // driver call on the step's critical path, and the sample is enough for
  // the telemetry's split.
  static constexpr int kTimingEvery = 8;
  uint64_t layer_steps = 0;
  bool timed = false;

  uint64_t step = 0;
  int pass_tokens = 0;
  hybrid_detail::Clock::time_point pass_start;
  ExpertTelemetry tel;
  TierCounts pass_counts;
  double pass_cpu_s = 0;

  Impl(const ModelWeights& weights, const HybridMoeOptions& o, cudaStream_t s) : w(weights), c(weights.cfg), opt(o), stream(s) {}

  cuda::Event& event(std::vector<std::unique_ptr<cuda::Event>>& v, size_t i) {
    while (v.size() <= i) v.push_back(std::make_unique<cuda::Event>(false));
    return *v[i];
  }

  int P() const { return opt.max_tokens * c.n_expert_used; }
  // Rows of the per-row buffers (xg, hg, hu, yc, their Q8 rows): P, or one
  // chunk of rows where passes are cut into chunks (HybridMoe::buffer_rows).
  int R() const { return HybridMoe::buffer_rows(c, opt.max_tokens, opt.chunk_rows); }
  int G() const { return static_cast<int>(hybrid_detail::group_entries(c, opt.max_tokens, opt.chunk_rows)); }
  // Index buffer entries: the layout above.
  size_t idx_entries() const { return 3 * static_cast<size_t>(P()) + 2 * static_cast<size_t>(G()) - 1; }
  int32_t* token_of_row() const { return idx; }
  int32_t* pair_of_row() const { return idx + P(); }
  int32_t* offsets() const { return idx + 2 * P(); }
  int32_t* group_expert() const { return idx + 2 * P() + G(); }
  int32_t* cpu_pair() const { return idx + 2 * P() + 2 * G() - 1; }
  // The MoeStep chunk bound for a pass of n tokens: chunks only where the
  // pass has more rows than the buffers (so shorter passes keep the
  // unchunked tables, offsets from the pass's first row).
  int chunk_rows_for(int n) const {
    return opt.chunk_rows > 0 && int64_t{n} * c.n_expert_used > opt.chunk_rows ? opt.chunk_rows : 0;
  }

  void allocate_buffers();
  void make_slots();

  // The copier's index of expert e of MoE layer l.
  size_t source_index(int l, int e) const {
    return static_cast<size_t>(first_source[static_cast<size_t>(l)]) + static_cast<size_t>(e);
  }

  void make_copier();

  // Expert e of layer l into `dst` (a slot), on the copy stream; the
  // scheduler keeps the link's queue as the host sees it.
  void copy_expert(int l, int e, void* dst) {
    copier->copy_expert(source_index(l, e), dst);
    sched->note_link(geom[static_cast<size_t>(l)].slot_bytes);
  }

  // Plan entry i (expert e of layer l) into its slot, on the copy stream:
  // over the link, or from the staging slot a stage copied it into
  // (StepPlan::copy_from; behind that copy on the same stream).
  void copy_planned(int l, int e, const StepPlan& sp, size_t i) {
    void* dst = slots->slot_address(sp.where[i].pool, sp.where[i].slot);
    const SlotRef from = sp.copy_from[i];
    if (!from.valid()) return copy_expert(l, e, dst);
    MS_CUDA_CHECK(cudaMemcpyAsync(dst, slots->slot_address(from.pool, from.slot), geom[static_cast<size_t>(l)].slot_bytes,
                                  cudaMemcpyDeviceToDevice, copier->stream()));
  }

  int first_moe_layer() const {
    for (int l = 0; l < c.n_layer; ++l)
      if (res->pool_of_layer(static_cast<uint32_t>(l)) >= 0) return l;
    return 0;
  }

  // PCIe, CPU expert and GPU bandwidths of this machine, for the split
  // (the scheduler turns the probe into its cost model).
  void measure_cost();
  void place_initial();

  // The previous layer's timings. Its end events are done or nearly so (the
  // compute stream has passed them, and copy1 follows the last copy the
  // compute stream waited for), but "nearly" is not "done" for
  // cudaEventElapsedTime: wait for each first. block=false (the gated step,
  // where the copy stream may still be busy with a prefetch): collect only
  // what is done, leaving the rest pending.
  void collect_timing(bool block = true);

  void run(int il, int n, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids, const float* wts, float* h,
           const HybridPrediction* pred);
  // A decode prediction's staging (MoeStep::stage_decode's choice) into its
  // bank, on the copy stream behind this layer's copies.
  void stage_decode(int layer, const DecodeStage& ds);
  void note_prediction(int il, const PredictionOutcome& o);
  static void count_pairs(TierCounts& layer, TierCounts& pass, Tier t, uint64_t pairs);
  void copy_wave(int il, const StepPlan& sp, const std::vector<size_t>& wave, size_t wv);
  void decode_on_gpu(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids, const float* wts, float* h,
                     bool copies);

  // ---- transit slots: which compute last read each. Within one layer step
  // the waves reuse them in order; a prompt's stage (below) rewrites them
  // while the previous layer's waves may still be queued. Reads are numbered;
  // read_events[q % kReadEvents] is recorded after read q (a reused event
  // only makes a copy wait for a later read, never for one not yet queued).
  static constexpr size_t kReadEvents = 256;
  std::vector<std::vector<uint64_t>> transit_reader;  // [pool][transit index]: the last read (0: none)
  uint64_t read_seq = 0;     // reads recorded so far
  uint64_t read_done = 0;    // every read up to this one has run (a synchronisation passed it)
  uint64_t copy_waited = 0;  // the copy stream already waits for every read up to this one
  std::vector<std::unique_ptr<cuda::Event>> read_events;
  // The copy stream waits until the compute that last read `where` has run
  // (transit slots; others need no wait in the planned step).
  void wait_slot_free(SlotRef where);
  // After a wave's compute: its transit slots are read by read_seq + 1.
  void mark_read(const StepPlan& sp, const std::vector<size_t>& wave);

  // ---- prompt staging (StepScheduler::stage_prompt): a tiered layer's cold
  // experts go into transit slots before its routes are known, the first
  // tiered layer's at begin_pass, the next one's after each tiered layer's
  // waves; ring_copied[g] is recorded after the stage's copy group g.
  std::vector<std::unique_ptr<cuda::Event>> ring_copied;
  void init_prompt_stage();
  void stage_prompt(const PromptStage& ps);

  // ---- the resident bitmap: which experts sit in cache slots, as the
  // device's residency check sees it (word e / 32 of layer l, bit e % 32)
  uint32_t mask_words = 0;                // per layer
  cuda::PinnedBuffer resident_host;       // the host's copy, kept in step with `res`
  bool resident_dirty = false;            // changed since its last upload
  void note_residency(const ExpertPlan& plan);
  void set_resident(ExpertKey key, bool on);

  // ---- gated decode (hybrid_gated.cpp)
  // Device words: the step's sequence number, two gates per layer (its
  // experts', its combine's), the host rows' mask; the bitmap; the CPU's rows
  // (copied there from the mailbox by the combine's gate).
  cuda::DeviceArena gate_arena;
  uint32_t *seq_dev = nullptr, *gate_dev = nullptr, *host_mask_dev = nullptr, *resident_dev = nullptr;
  // Staging stamps [layer][expert]: the step whose stage holds the expert in
  // a staging slot (the check takes it as present then). The host's copy is
  // the copy stream's source, written when it stages.
  uint32_t* staged_dev = nullptr;
  cuda::PinnedBuffer staged_host;
  float* host_y_dev = nullptr;
  // Mapped host memory: a mailbox per layer, then the gates' timeout flag.
  cuda::PinnedBuffer mailbox;
  char* mailbox_dev = nullptr;  // its device address
  size_t box_bytes = 0;
  uint32_t* timed_out_host = nullptr;
  uint32_t* timed_out_dev = nullptr;
  // Pinned source of the copy stream's small writes: the step's sequence
  // number twice (opens one gate or both).
  cuda::PinnedBuffer gate_src;
  uint32_t seq = 0;
  // Per layer: the layer's decode step is gated (captured in the decode
  // graph) and the tiered layer its prediction is for (-1: none).
  std::vector<uint8_t> gated;
  std::vector<int> gated_pred;
  // Host seconds of serve_layer by part (HybridMoeOptions::serve_profile prints them at exit).
  struct ServeProfile {
    double timing_s = 0, policy_s = 0, enqueue_s = 0, stage_s = 0, settle_s = 0;
    uint64_t hits = 0, misses = 0;
  } prof;
  // The copy stream's idle time per prompt pass (HybridMoeOptions::link_timeline).
  LinkTimeline timeline{opt.link_timeline};
  ~Impl();

  static uint64_t gate_bytes(const ModelConfig& c);  // gate_arena's size
  bool gated_supported() const;
  void make_gates();
  void upload_resident(cudaStream_t s);
  void begin_gated();
  void open_gate(int il, int which);
  const cuda::GateMailbox& await_box(int il);
  cuda::GateMailbox* box(int il) const { return reinterpret_cast<cuda::GateMailbox*>(mailbox.as<char>() + il * box_bytes); }
  void enqueue_gated(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids, const float* wts, float* h,
                     const int32_t* pred_ids, int pred_layer);
  void enqueue_gate_and_experts(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids, const float* wts,
                                float* h, const int32_t* pred_ids, int pred_layer);
  void serve_gated();
  void serve_layer(int il);
  void release_gates();
};

}  // namespace ms
