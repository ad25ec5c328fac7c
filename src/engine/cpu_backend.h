// The forward pass on the CPU: the architecture's recipe (model/recipe.h) run
// over this backend's blocks (model/blocks.h), with weights bound from a GGUF
// file, for one token (decode) or a batch (prefill).
//
//   ThreadPool pool;                       // sized to the cores
//   CpuBackend be(weights, pool);
//   KvCache kv = be.make_cache(4096);
//   std::vector<float> logits;
//   be.forward(kv, prompt_ids, logits);    // logits of the last token
//   be.forward(kv, {next}, logits);        // one decode step
//
// A batch is processed as a whole: every projection is one matmul over its
// tokens, and routed experts are grouped by expert, so each expert's weights
// are read once per batch. Decode is the same code with one token; its
// per-layer work is six parallel regions (q/k/v, attention, output, router,
// expert gate+up, expert down).
//
// Hybrids (qwen35moe) run Gated DeltaNet (src/cpu/delta_net.h) in their
// linear-attention layers, with a recurrent state per sequence in the
// KvCache; prompts go through it in chunks, decode one recurrence step.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/backend.h"
#include "engine/expert_executor.h"
#include "engine/kv_cache.h"
#include "engine/moe_step.h"
#include "model/blocks.h"
#include "model/recipe.h"
#include "model/weights.h"

namespace ms {

class CpuBackend : public Backend, private LayerBlocks {
 public:
  struct Options {
    int max_batch = 256;  // tokens per internal batch (longer inputs are split)
  };
  CpuBackend(const ModelWeights& w, ThreadPool& pool) : CpuBackend(w, pool, Options{}) {}
  CpuBackend(const ModelWeights& w, ThreadPool& pool, Options opt);

  // Runs `tokens` at positions kv.n_past() .. and appends them to the cache.
  // logits receives n_vocab floats for the last token, or for every token
  // ([n_tokens][n_vocab]) with all_logits. Throws ms::Error "context full
  // (N tokens)" before computing anything if they do not fit, and for a token
  // id outside the vocabulary.
  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits,
               bool all_logits = false) override;

  // Several sequences in one step (Backend::forward_seqs): the entries'
  // tokens (decode tokens and prompt chunks alike) are packed into batches of
  // at most max_batch tokens, an entry split across batches when it does not
  // fit, so projections, the router and the experts run once per batch over
  // every sequence in it (each expert's weights read once for all the tokens
  // routed to it); attention runs per entry against its own cache. The output
  // head runs only for the entries with want_logits. Throws like forward(),
  // before computing anything.
  void forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) override;
  // Token trees (SeqTokens::parents): up to max_batch tokens (a tree runs in
  // one batch). Hybrids' Gated DeltaNet layers run each node's recurrence
  // from its parent's state, kept per node in the cache (KvCache::begin_tree).
  int max_token_tree(const KvCache&) const override { return opt_.max_batch; }
  void keep_tree_path(KvCache& kv, int64_t base, std::span<const int32_t> nodes) override { kv.keep_path(base, nodes); }
  // One token per cache (tokens[i] to *kvs[i]): forward_seqs with one-token
  // entries, every one with logits ([n][n_vocab]). For the engine tests.
  void forward_multi(std::span<KvCache* const> kvs, std::span<const int32_t> tokens, std::vector<float>& logits);

  // F16 or F32 keys/values (attention runs over either).
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override;
  // K/V in pages of a shared pool: attention reads rows through each cache's block table.
  bool paged_kv() const override { return true; }
  std::shared_ptr<KvPages> make_kv_pages(int64_t total_tokens, KvType type, int32_t page_tokens) const override;
  KvCache make_paged_cache(std::shared_ptr<KvPages> pages, int64_t ctx, KvType type) const override;
  const ModelWeights& weights() const { return w_; }
  const ModelConfig& config() const override { return w_.cfg; }
  std::string name() const override { return "cpu"; }
  ThreadPool& pool() { return pool_; }


  // The router's choice per MoE layer and batch (Backend::set_route_hook);
  // hidden, when asked for, points at the layer's FFN input rows.
  void set_route_hook(RouteHook hook, bool want_hidden = false) override {
    route_hook_ = std::move(hook);
    route_hook_hidden_ = want_hidden;
  }

  // The MTP block (Backend::forward_mtp): the same attention and MoE blocks
  // as a main-stack layer, run as layer n_layer (its experts through the same
  // executor), against its own one-layer cache. The route hook does not see it.
  bool supports_mtp() const override { return !w_.mtp.empty(); }
  void set_hidden_hook(HiddenHook hook) override { hidden_hook_ = std::move(hook); }
  // Throws ms::Error for a layer id outside 0 .. n_layer-1.
  void set_hidden_layers(std::vector<int> layers) override;
  KvCache make_mtp_cache(int64_t ctx, KvType type = KvType::F16) const override;
  void forward_mtp(KvCache& kv, std::span<const float> hidden, std::span<const int32_t> tokens,
                   std::vector<float>& logits, std::vector<float>& hidden_out) override;
  // forward_mtp without the head: last_row receives the last pair's output
  // before the head norm (n_embd floats). For a device that runs the head
  // itself (the CUDA backend).
  void forward_mtp_block(KvCache& kv, std::span<const float> hidden, std::span<const int32_t> tokens,
                         std::vector<float>& last_row);

  // How often each expert was chosen since the last reset: [layer][expert].
  const std::vector<uint64_t>& expert_counts() const { return expert_counts_; }
  void reset_expert_counts() { std::fill(expert_counts_.begin(), expert_counts_.end(), 0); }

 private:
  // A run of consecutive tokens of the batch that belong to one sequence.
  struct Span {
    KvCache* kv;
    int64_t pos0;  // the position of its first token
    int t0, n;     // its tokens in the batch
    // A token tree (SeqTokens::parents, never split across batches): its
    // parents within the span; null for a chain.
    const int32_t* parents = nullptr;
  };
  // One batch of at most max_batch tokens over `spans`; logits receives the
  // output head's [out_rows.size()][n_vocab] for the batch rows out_rows
  // (ascending; none: logits may be null).
  void forward_spans(const std::vector<Span>& spans, const int32_t* tokens, int n, std::span<const int> out_rows,
                     float* logits);

  // The blocks (model/blocks.h) over the batch being run: spans_, n_ tokens.
  void attention(int il, const AttentionBlock& b) override;
  // Gated DeltaNet (hybrids): each span against its own recurrent state.
  void linear_attention(int il, const LinearAttentionBlock& b) override;
  void dense_ffn(int il, const DenseFfnBlock& b) override;
  void moe_ffn(int il, const MoeFfnBlock& b) override;
  void shared_expert(int il, int n);
  // Layer il's weights: the main stack's, or (il >= n_layer) MTP block il - n_layer's.
  const LayerWeights& layer_weights(int il) const;
  RecurrentLayout recurrent_layout() const;  // every layer listed (none recurrent: all false)
  // Its layer in the cache it runs against (an MTP block's own cache starts at 0).
  int cache_layer(int il) const { return il < w_.cfg.n_layer ? il : il - w_.cfg.n_layer; }
  // Hands each span's final hidden states (after the output norm) to the hook.
  void emit_hidden(const std::vector<Span>& spans, const int32_t* tokens);
  struct HostTier;

  const ModelWeights& w_;
  ThreadPool& pool_;
  Options opt_;
  CpuExpertExecutor cpu_executor_;
  // The MoE step with a host tier only (the sequence the CUDA backend's tiered
  // step shares); made by the first MoE layer.
  std::unique_ptr<MoeStep> moe_step_;
  const Recipe& recipe_;
  std::vector<uint64_t> expert_counts_;
  RouteHook route_hook_;
  HiddenHook hidden_hook_;
  std::vector<BlockCall> mtp_calls_;  // the MTP block's blocks (a full-attention layer's)
  std::vector<int> hidden_layers_;  // set_hidden_layers
  std::vector<float> layer_rows_;   // [n_][hidden_layers_.size()][n_embd] of the batch being run
  std::vector<float> mtp_in_, hidden_rows_, mtp_last_;  // [n][2 n_embd] eh_proj's input; the hook's rows
  bool route_hook_hidden_ = false;

  // The batch the blocks run on (set by forward_spans).
  const std::vector<Span>* spans_ = nullptr;
  // Per span: the checkpoint entry for the state after each of its tokens
  // (KvCache::keep_token_states), or empty.
  std::vector<std::vector<int>> span_entries_;
  int n_ = 0;

  // Scratch for one batch (sized to max_batch tokens).
  std::vector<float> h_, x_, q_, k_, v_, att_, tmp_, rope_cs_, router_logits_, route_w_, expert_y_, ff_gate_, ff_up_;
  std::vector<int32_t> route_ids_;
  std::vector<uint8_t> act_, act2_;
  // Hybrids: the [q | gate] projection of gated attention; Gated DeltaNet's
  // projections, conv output, gates and output; the shared expert's.
  std::vector<float> q_gate_, lin_qkv_, lin_conv_, lin_z_, lin_a_, lin_b_, lin_g_, lin_beta_, lin_out_;
  std::vector<float> sh_gate_, sh_up_, sh_score_;
};

}  // namespace ms
