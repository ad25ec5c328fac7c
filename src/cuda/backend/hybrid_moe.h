// The hybrid MoE step: the one place that knows a layer's routed experts run
// split between VRAM slots, PCIe streaming and the CPU. Used by CudaBackend
// when the VRAM budget does not hold every expert. The step's sequence and
// host tables are src/engine's (engine/moe_step.h), its decisions
// src/experts' (StepScheduler); this is the CUDA mechanism under them (the
// tiers, hybrid_tiers.h) and its set-up.
//
// One layer, as data flows:
//   route    the router's ids (and, for CPU experts, the FFN input rows) come
//            back to the host: the one round trip of the layer
//   plan     experts/step_scheduler.h: resident / stream (into a cache slot
//            or a transit slot) / host, by the cache policy and the cost
//            model; waves, staging and prefetch choices too. Every decision
//            is the scheduler's (plain C++, tested without a GPU, replayed
//            by `moestream sim`); this mechanism does what it says and
//            reports measured times to it.
//   experts  copy stream: the streamed experts' bytes into their slots, in
//            waves over the transit slots; compute stream: per wave, waits for
//            its copies, then gate/up -> SwiGLU -> down over the wave's
//            (token, expert) rows. Prompt waves take the all-resident step's
//            int8 GEMMs, reading each row's token in place and writing its
//            pair's output (cuda::grouped_rows_ffn); other waves gather the
//            rows first. Meanwhile the CPU computes its experts from the
//            mapped file
//   combine  the CPU's rows go up, every pair's output sits at its pair index,
//            and one weighted sum in fixed order adds them to the residual
// A pass long enough to route nearly every expert (a prompt) does not wait
// for the routes to start a layer's copies: the next tiered layer's cold
// experts go into the transit slots behind this layer's, so the link keeps
// busy while this layer, the CPU and the resident layers in between compute.
//
// Decode takes the same step's gated plan where it can (hybrid_gated.cpp):
// the route is checked against a resident bitmap on the GPU, and the host is
// waited for only when some routed expert is not resident.
//
// CUDA-only header.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "cuda/backend/cuda_options.h"
#include "cuda/expert_bias.h"
#include "cuda/expert_ffn.h"
#include "cuda/matvec.h"
#include "experts/cost_model.h"
#include "experts/profile.h"
#include "experts/telemetry.h"
#include "model/weights.h"

namespace ms {

// The next tiered layer's predicted experts (decode), on the device, most
// likely first. When ids directly follows the layer's routes they come back
// in the same read-back.
struct HybridPrediction {
  int layer = -1;
  const int32_t* ids = nullptr;
  int n = 0;
};

// Rows per chunk of the device step by default (HybridMoeOptions::chunk_rows;
// 0: no chunks, the per-row buffers hold a whole pass). At the Qwen3-30B-A3B
// shape ~25 KiB of buffers a row: 16384 rows are ~400 MiB, against ~1.6 GiB
// for the rows of an 8192-token pass. Not fewer rows: a grouped GEMM launch
// spreads over (experts of the chunk) x (weight rows / 128) x 2 blocks, and
// an 8192-token prompt gives an expert ~512 rows, so a chunk of 4096 rows
// (8 experts) would leave most of a large GPU idle in the gate/up GEMMs;
// 16384 rows give ~32 experts a launch, as many blocks as the device holds.
inline constexpr int kHybridChunkRows = 16384;
// Rows per chunk where the budget holds no prompt ring (experts/pass_size.h,
// choose_pass_plan): then every expert streams through a ring of two waves
// and a wave's rows are what a launch gets anyway (8 experts of a 512-token
// pass of top-8 of 128: 256 rows), so a chunk of two such waves keeps the
// launches as they are while the bytes it saves hold a longer pass.
inline constexpr int kHybridStreamChunkRows = 512;

// The tiered step's options as the backend hands them over: the user's
// (TieredOptions, with the policy resolved and transit_slots chosen) and the
// sizes the backend worked out.
struct HybridMoeOptions : TieredOptions {
  HybridMoeOptions() = default;
  explicit HybridMoeOptions(const TieredOptions& t) : TieredOptions(t) {}
  uint64_t pool_bytes = 0;        // VRAM for cache slots (0: every cold expert streams or runs on the CPU)
  int max_tokens = 512;           // tokens per forward chunk
  // Rows per chunk of the device step (HybridMoe::kChunkRows; 0: none): a
  // pass of more (token, expert) rows runs its waves in chunks of at most
  // this many, so the per-row buffers (gathered input, gate/up, their Q8
  // rows, compact output) hold one chunk, not the pass. The same kernels on
  // fewer rows a launch; each pair's output still lands at its pair index.
  int chunk_rows = kHybridChunkRows;
  int gemm_min_batch = cuda::kGemmMinTokens;  // tensor-core matmul from this many tokens
  // Per layer (gpt-oss): the experts' biases in device memory (resident, by
  // expert id) and their activation, carried by the slot tables; empty: none.
  std::vector<cuda::ExpertBias> expert_bias;
};

class HybridTiers;
class GatedTiers;
class GatedDeviceTier;

class HybridMoe {
 public:
  // Rows of the step's per-row buffers for passes of max_tokens with chunks
  // of chunk_rows (0: none): every pair, or one chunk where that is fewer.
  static int buffer_rows(const ModelConfig& c, int max_tokens, int chunk_rows);
  // Device bytes the step's own buffers take for these sizes (the budget
  // counts them before the slot pool).
  static uint64_t buffer_bytes(const ModelConfig& c, int max_tokens, uint32_t transit_slots,
                               uint64_t largest_slot, size_t n_pools, int chunk_rows = kHybridChunkRows);
  // Slot bytes of one expert of layer L (gate|up|down, aligned).
  static uint64_t slot_bytes(const ExpertWeights& e);
  // Staging slots per bank (two banks per slot pool) for a prefetch mode
  // (StepScheduler::stage_bank).
  static uint32_t stage_bank(const ModelConfig& c, DecodePrefetch prefetch);

  HybridMoe(const ModelWeights& w, const HybridMoeOptions& opt, cudaStream_t compute);
  ~HybridMoe();
  HybridMoe(const HybridMoe&) = delete;
  HybridMoe& operator=(const HybridMoe&) = delete;

  // A forward call starts / ends (the policies' clock; telemetry). gated:
  // a decode step of the gated kind follows (enqueue_gated, serve_gated).
  void begin_pass(int n_tokens, bool gated = false);
  void end_pass();
  // A speculative verify (Backend::mark_drafts; MoeStep::set_draft_ranks):
  // the draft rank of each token of the passes from now on (0: certain;
  // empty: all certain). confirm_drafts: the first `accepted` drafts were
  // kept (their routes count in the policy now, the rest never).
  void set_draft_ranks(std::span<const int32_t> ranks);
  void confirm_drafts(int accepted);

  // Gated decode (cuda/expert_gate.h): the whole step is one captured graph
  // in which each tiered layer checks its experts' residency on the GPU and
  // waits for the host only when one is not resident; no round trip on a
  // hit. Available when every tiered layer's experts take the all-resident
  // decode kernels (and options.gated).
  bool gated_decode() const;
  // Layer il's experts of a gated decode step (one token; graph-capturable):
  // the residency check, the gate, the experts over the slot table with the
  // CPU's rows in the sum. pred_ids (optional): the prediction for tiered
  // layer pred_layer, posted with the routes.
  void enqueue_gated(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids, const float* weights,
                     float* h, const int32_t* pred_ids, int pred_layer);
  // After the step is launched: serves each gated layer in order (policy
  // bookkeeping on a hit; copies, CPU experts and opening the gate on a miss).
  void serve_gated();
  // Layer il for n tokens: x [n][n_embd] the FFN input (x_q8 the same as Q8,
  // valid when the experts take Q8), ids/weights [n][k] from the router, all
  // on the device; h[t] += sum_j weights[t][j] * expert_j(x[t]).
  // Decode with every expert of the step on the GPU runs the all-resident
  // expert kernels over the slot table, so the result is the all-resident
  // run's, bit for bit.
  // pred (optional): the next tiered layer's prediction, staged after this
  // layer's own copies.
  void run(int il, int n, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids, const float* weights, float* h,
           const HybridPrediction* pred = nullptr);
  // Prefetch is on (the backend then computes predictions).
  bool prefetching() const;
  // Layer il's experts as the kernels address them (the slot table).
  const cuda::ExpertWeights& weights(int il) const;
  // Layer il holds every expert in VRAM for good (policy "layers"): the
  // backend runs its experts as all-resident, over weights(il), without
  // calling run() (no round trip, nothing to plan; end_pass counts its pairs
  // as resident).
  bool layer_pinned(int il) const;
  // The step's buffers as one scratch, for the backend's own expert kernels
  // on pinned layers (a full prompt batch fits): idle then, as every use is
  // on the compute stream.
  // whole = false: the decode scratch (hg) alone.
  void* scratch(size_t& bytes, bool whole = true) const;

  ExpertTelemetry telemetry() const;
  uint64_t device_bytes() const;

 private:
  struct Impl;
  // The tiers of the engine's step: planned (hybrid_tiers.h) and gated
  // (hybrid_gated.cpp).
  friend class HybridTiers;
  friend class GatedTiers;
  friend class GatedDeviceTier;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms
