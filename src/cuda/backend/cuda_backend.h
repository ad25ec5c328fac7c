// The whole forward pass on one GPU: every weight in device memory in its
// file's quant format, the KV cache (f16, or f32: Options::kv_f32) on the
// device, the architecture's recipe (model/recipe.h, the same one CpuBackend
// runs) over blocks built from the kernels of src/cuda.
//
//   CudaBackend be(weights, {.ctx = 4096});
//   KvCache kv = be.make_cache(4096);     // counts positions; K/V live on the GPU
//   be.forward(kv, prompt_ids, logits);   // prefill: batched (tensor-core matmul, experts grouped)
//   be.forward(kv, {next}, logits);       // decode: one CUDA graph replay per token
//
// Memory: arenas sized up front (dense weights, resident experts, KV cache,
// activations); a model that does not fit fails at construction with an
// ms::Error saying how much was asked and how much the GPU has free.
// memory_use().weights counts the dense weights and the resident experts.
//
// Decode never goes back to the host inside the step: the router's top-k,
// the expert FFN (ids and weights on the device), the attention length and
// the position are all read from device memory, so one captured graph serves
// every step; it is re-captured only when the attention launch must grow
// (every 256 positions). The only host traffic per token is 16 bytes in and
// the logits out.
//
// Hybrids (qwen35moe): the Gated DeltaNet layers keep their recurrent state
// (conv window + delta-rule matrix) in the device cache beside the attention
// layers' K/V; it is zeroed when a sequence starts at position 0, and the
// KvCache refuses to rewind it (truncate keeps all positions or none), as
// the CPU backend's does.
//
// Sequences: the device holds Options::n_seq sequence states (K/V and the
// recurrent state of hybrids, each sized for Options::ctx), planned into the
// VRAM budget. With n_seq 1 every cache maps to the one state (callers make
// caches one after another, as before); with more, make_cache hands each
// cache a free state (the KvCache carries the claim and gives it back when
// it goes) and forward_seqs runs several sequences' tokens in one pass: the
// projections, the router and the experts (resident, or the tiered step's
// once-per-pass streaming) over all of the step's tokens, attention and the
// Gated DeltaNet recurrence per sequence against its own state, the head
// only for the rows whose logits are wanted. CUDA-only: include it only
// where MOESTREAM_HAVE_CUDA is defined.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "cuda/launch_defaults.h"
#include "engine/backend.h"
#include "experts/profile.h"
#include "experts/telemetry.h"
#include "model/weights.h"

namespace ms {

class CudaBackend : public Backend {
 public:
  struct Options {
    int device = 0;
    int64_t ctx = 0;             // device KV capacity in tokens per sequence (0: min(model context, 4096))
    // Sequence states on the device (serve's --parallel): caches that may be
    // live at once, each with its own K/V (ctx positions) and recurrent state.
    int n_seq = 1;
    // Prompt tokens per forward pass (longer inputs are split into passes of
    // equal size). 0: chosen from the budget (experts/pass_size.h): up to
    // 8192 when every expert is resident; tiered, the smallest pass whose once-per-pass
    // streaming of the cold experts stays a small share of its compute,
    // bounded by the VRAM its buffers may take and by the context.
    int max_batch = 0;
    // Batches of at least this many tokens take the tensor-core matmul:
    // dense projections, the head and the routed experts (all-resident and
    // pinned layers through ExpertWeights::gemm_min_tokens; the tiered step).
    int gemm_min_batch = cuda::kGemmMinTokens;
    bool use_graph = true;       // replay decode steps from a captured CUDA graph
    // decode: q/k norm + rope + cache append in one launch (decode_fused.h);
    // the experts' down projection + weighted sum in one (matvec.h)
    bool fused_decode = true;
    // Batches: q/k norms, RoPE and the cache append in one launch (prefill_fused.h).
    bool fused_prefill = true;
    // Programmatic dependent launch where the device has it (sm_90+;
    // cuda::set_pdl_allowed: it applies to the whole process).
    bool pdl = true;
    // Decode: time each step (GPU, forward() call, the caller's gap between
    // steps) and print the means to stderr when the backend goes (debugging
    // and profiling; two events per step).
    bool step_timing = false;
    // The device KV cache in f32 (KvType::F32): keys and values exactly as
    // computed (parity with f32 references), twice the bytes of the default
    // f16. make_cache switches it to the type asked for.
    bool kv_f32 = false;
    // The device KV cache's type when kv_f32 is false (Q8_0: 34/64 of f16's
    // bytes): the cache is allocated, and the VRAM budget planned, for it.
    KvType kv_type = KvType::F16;

    // ---- VRAM budget (what `--vram` sets)
    // Bytes of device memory this backend may use (weights, KV cache,
    // activations, expert slots; the CUDA context comes out of the reserve
    // model/tensor_roles.h counts). 0: free memory minus kAutoMargin. When the
    // whole model fits the budget, every expert is resident (the fused,
    // graph-replayed path); otherwise routed experts are tiered: VRAM slots,
    // PCIe streaming and the CPU (hybrid_moe.h). A budget below the dense
    // weights + KV + reserve throws, naming the minimum.
    uint64_t vram_budget = 0;
    bool vram_full = false;           // every expert resident, whatever the budget (`--vram full`)
    std::string policy = "default";   // expert cache policy (experts/policy.h)
    std::string host_pin = "auto";    // auto | register | staging (cuda/expert_copier.h)
    const ExpertProfile* profile = nullptr;  // initial placement: hottest first
    // Per slot pool, for streamed-not-kept experts; 0: chosen
    // (StepScheduler::choose_transit_slots: a small ring when passes are
    // small, else the lead a prompt's copies may take over its compute,
    // prompt staging, hybrid_moe.h).
    uint32_t transit_slots = 0;
    bool prompt_stage = true;         // false: a prompt's copies start at each layer's routes (A/B runs)
    // Pinned layers take the all-resident expert kernels on prompt batches
    // too, in the hybrid step's idle buffers; false: only up to the decode
    // scratch, larger batches through HybridMoe::run (A/B runs).
    bool pinned_prompt_kernels = true;
    // At most this many tokens per launch of those kernels (0: as many as
    // the lent scratch holds; tests and A/B runs of the sub-batched pass).
    int pinned_batch_cap = 0;
    bool prompt_cpu = false;          // staged prompt passes give the CPU a share too (HybridMoeOptions)
    bool stage_gap = true;            // decode staging fills the GPU-only stretch (HybridMoeOptions)
    bool staged_hits = true;          // gated layers with every expert resident or staged skip the host (HybridMoeOptions)
    std::string prefetch = "auto";    // off | next | auto: experts of the next tiered layer copied ahead (decode)
    // Hybrid decode as one graph that checks residency on the GPU and waits
    // for the host only on a miss (hybrid_moe.h); false: a round trip per
    // tiered layer (A/B runs, tests).
    bool gated_decode = true;
    std::string cost_overrides;       // CostModel figures replacing the measured ones
    bool verbose_steps = false;       // one stderr line per forward pass (hybrid)
    bool hybrid_profile = false;      // the gated step's host-side profile, printed at exit (HybridMoeOptions)
    int link_timeline = 0;            // prompt passes' link idle time: 0 off, 1 per pass, 2 per layer too (HybridMoeOptions)
    ThreadPool* cpu_pool = nullptr;   // CPU experts (hybrid); null: the backend makes one
  };
  // Margin left free when no budget is given.
  static constexpr uint64_t kAutoMargin = 512ull << 20;
  struct MemoryUse {
    uint64_t weights = 0, kv = 0, activations = 0, experts = 0;
  };

  explicit CudaBackend(const ModelWeights& w) : CudaBackend(w, Options{}) {}
  CudaBackend(const ModelWeights& w, Options opt);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits,
               bool all_logits = false) override;
  // ctx must be at most the device capacity (Options::ctx); throws otherwise.
  // A type other than the device cache's reallocates that cache (contents
  // lost, a cache made earlier is then refused by forward()).
  // With n_seq > 1 each cache takes one of the device's sequence states until
  // it is destroyed; throws ms::Error "the CUDA backend holds N sequences
  // (--parallel N); all are in use" when none is free.
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override;
  // Backend::forward_seqs: the entries in passes of at most max_batch()
  // tokens (an entry may be split across passes). One entry: forward().
  void forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) override;
  int max_sequences() const override;  // Options::n_seq
  // Device slot to device slot (K/V rows and recurrent state) and the
  // checkpoints' host copies; needs two sequence states (Options::n_seq > 1).
  void fork(const KvCache& src, KvCache& dst) override;
  const ModelConfig& config() const override;
  std::string name() const override { return "cuda"; }

  // Backend::set_route_hook: after every router the ids and weights (and,
  // with want_hidden, the FFN input rows) are copied back and the stream
  // synchronised; while a hook is set, decode steps run without the graph.
  void set_route_hook(RouteHook hook, bool want_hidden = false) override;

  int64_t ctx_capacity() const;
  int max_batch() const;               // prompt tokens per pass, as chosen or given
  std::string batch_reason() const;    // one line: the pass size and why
  MemoryUse memory_use() const;
  std::string device_description() const;  // cuda::describe() of the device
  std::string device_name() const;         // "NVIDIA H100 80GB HBM3"
  // How often a decode graph was (re)captured: the one-sequence decode
  // graph's and the multi-sequence decode steps' captures together.
  int graph_captures() const;
  // MoE layer passes whose experts, pinned in VRAM, ran in sub-batches (the
  // hybrid step lent less scratch than the whole pass needed).
  uint64_t pinned_split_passes() const;
  // Where experts ran (hybrid is false when every expert is resident).
  ExpertTelemetry expert_telemetry() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms
