// The DFlash drafter's forward pass on the CPU (model/dflash_weights.h for
// the file; docs/speculative.md, "The DFlash drafter").
//
// Two passes share one K/V cache whose positions are the target sequence's:
//   context: the target's hidden states of committed positions, fused
//     g = RMSNorm(fc . [h_l1 | h_l2 | ...]) (enc.output_norm), give every
//     drafter layer the keys k_norm(Wk g) (RoPE'd at the position) and values
//     Wv g (no attention norm: g is already normed), appended to the cache;
//   block: tokens [last sampled, mask, mask, ...] at positions L .. L+n-1
//     (L: the context's length) run through the layers as a Qwen3 decoder
//     does (attention norm, q/k norms, NeoX RoPE, SwiGLU FFN), each position
//     attending to the whole context and to every position of the block
//     (causal drafters: to the block's earlier ones only). The block's own
//     keys are written past the context and forgotten afterwards. Position
//     i's logits predict the token at L + i, so positions 1 .. n-1 give
//     n-1 drafts in one pass.
// Without their own, the drafter uses the target's token embeddings and
// output head.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/kv_cache.h"
#include "model/dflash_weights.h"
#include "model/weights.h"

namespace ms {

class DFlashForward {
 public:
  // Keeps references to both weights and the pool. ctx: the most context
  // positions it will hold (the target's context). Throws ms::Error when the
  // drafter does not fit the target (check_dflash_fits).
  DFlashForward(const DFlashWeights& w, const ModelWeights& target, ThreadPool& pool, int64_t ctx,
                KvType type = KvType::F16);

  // Appends n positions of fused context: features is [n][n_target_layers *
  // n_embd], each row the target's hidden states of one position in the
  // order of cfg.target_layers. Throws ms::Error when they do not fit.
  void add_context(std::span<const float> features, int n);
  int64_t context_len() const { return kv_.n_past(); }
  void truncate(int64_t n) { kv_.truncate(n); }

  // The block at positions context_len() .. + n - 1 (2 <= n <= block_size):
  // logits receives [n - 1][n_vocab], the predictions of positions 1 .. n-1.
  // Throws ms::Error for a bad size or a token outside the vocabulary.
  void draft_block(std::span<const int32_t> tokens, std::vector<float>& logits);

  const DFlashConfig& config() const { return w_.cfg; }
  int64_t n_vocab() const { return n_vocab_; }

 private:
  // K and V of n rows of x (already normed) for layer il, RoPE'd from pos0:
  // into k_, v_.
  void keys_values(int il, const float* x, int n, int64_t pos0);

  const DFlashWeights& w_;
  ThreadPool& pool_;
  TensorView embd_, head_;
  int64_t n_vocab_;
  KvCache kv_;
  std::vector<float> g_, h_, x_, q_, k_, v_, att_, o_, gate_, up_, cs_;
};

}  // namespace ms
