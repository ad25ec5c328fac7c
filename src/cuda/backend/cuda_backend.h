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
#include "cuda/backend/cuda_options.h"
#include "engine/backend.h"
#include "experts/profile.h"
#include "experts/telemetry.h"
#include "model/weights.h"

namespace ms {

class CudaBackend : public Backend {
 public:
  // The backend's options (cuda_options.h: the tiered step's are
  // Options::tiered, the scheduler's Options::tiered.step).
  using Options = CudaOptions;
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
  // Tiered experts (issue #42): the next forward's drafts plan as drafts
  // (token by token where it keeps token states, else in its passes);
  // confirm_drafts credits the kept ones. Without tiered experts: nothing.
  void mark_drafts(const KvCache& kv, int n_drafts) override;
  void confirm_drafts(const KvCache& kv, int accepted) override;

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

  // MTP drafting (Backend; mtp_on_host.cpp). The hidden hook gets the final
  // hidden rows of forward() and forward_seqs() (copied back and normed on
  // the host; forward_seqs: one event per entry and pass). The MTP block's
  // layer runs on the CPU, a CpuBackend over the same mapped weights
  // (eh_proj, attention, experts; not yet on the device), its output head on
  // the device.
  bool supports_mtp() const override;
  void set_hidden_hook(HiddenHook hook) override;
  KvCache make_mtp_cache(int64_t ctx, KvType type = KvType::F16) const override;
  void forward_mtp(KvCache& kv, std::span<const float> hidden, std::span<const int32_t> tokens,
                   std::vector<float>& logits, std::vector<float>& hidden_out) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int pending_drafts_ = 0;  // mark_drafts' count, for the next forward
  struct MtpOnHost;
  mutable std::unique_ptr<MtpOnHost> mtp_;  // made at the first MTP call
  MtpOnHost& mtp_host() const;
  // The hook's event for rows 0..n-1 of the last pass (positions pos0..).
  void emit_hidden(const KvCache& kv, int64_t pos0, int n);
};

}  // namespace ms
