// A DFlash block drafter (GGUF architecture `dflash`, as llama.cpp's
// converter writes it from z-lab's DFlashDraftModel): a few Qwen3-shaped
// layers that draft a block of tokens in one pass, conditioned on the target
// model's hidden states. docs/speculative.md, "The DFlash drafter".
//
// What the file holds (names and keys as llama.cpp reads them):
//   fc.weight {n_target_layers * n_embd, n_embd}: fuses the target's hidden
//     states of the layers dflash.target_layers (the residual stream entering
//     each of those target layers), enc.output_norm.weight its RMSNorm;
//   blk.N.{attn_norm, attn_q, attn_k, attn_v (optional: V shares K), attn_output,
//     attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down} and,
//     optional, attn_post_norm / ffn_post_norm;
//   output_norm.weight; token_embd.weight and output.weight optional (absent:
//     the target's embeddings and output head, which is how the published
//     drafters ship);
//   dflash.block_size (default 16), dflash.attention.causal (default false:
//     the block attends to itself both ways), dflash.embedding_scale,
//     dflash.attention.scale, tokenizer.ggml.mask_token_id (the token that
//     fills the block's undrafted positions; required here).
// The DFlash variants llama.cpp also reads from this architecture (DFlash2's
// conv/selector, DSpark's Markov head, reduced vocabularies via d2t, DSV4
// stages, sliding windows, attention sinks) are refused with an error naming
// the tensor or key: moestream runs the plain drafter.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"

namespace ms {

class GgufFile;

struct DFlashConfig {
  int n_layer = 0;
  int64_t n_embd = 0;     // also the target's hidden size (fc reads n_target_layers of them)
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-6f;
  float rope_base = 10000.0f;
  float attn_scale = 0;       // 0: 1 / sqrt(head_dim)
  float embedding_scale = 0;  // 0: none
  int block_size = 16;        // drafts per pass: block_size - 1
  bool causal = false;        // the block's positions see only earlier ones of the block
  int32_t mask_token = -1;
  std::vector<int> target_layers;  // target layer whose input is read, in fc's column order
  int64_t n_vocab = 0;        // rows of its own token_embd / output; 0: it has neither
  std::string describe() const;
};

struct DFlashLayer {
  TensorView attn_norm, wq, wk, wv, wo, q_norm, k_norm, attn_post_norm;
  TensorView ffn_norm, ffn_gate, ffn_up, ffn_down, ffn_post_norm;
};

struct DFlashWeights {
  DFlashConfig cfg;
  TensorView fc, enc_norm, output_norm;
  TensorView token_embd, output;  // absent: the target's (output == token_embd when only that is there)
  std::vector<DFlashLayer> layers;
};

// Limits on what a file may ask for (hostile headers must not size
// allocations): the published drafters are far inside them.
constexpr int kDFlashMaxLayers = 64;
constexpr int kDFlashMaxBlock = 64;
constexpr int kDFlashMaxTargetLayers = 32;

// Reads and checks the hyper-parameters and binds every tensor. Throws
// ms::Error naming the missing or ill-shaped tensor, the missing or
// out-of-range key, or the unsupported variant.
DFlashWeights bind_dflash(const GgufFile& file);

// Throws ms::Error unless the drafter can draft for `target`: the same hidden
// size, target layers inside its stack, its own vocabulary (if any) and the
// mask token inside the target's.
void check_dflash_fits(const DFlashConfig& d, const ModelConfig& target);

}  // namespace ms
