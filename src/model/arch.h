// The architectures the engine runs, as data: one row per GGUF
// `general.architecture` with the switches the loader (model/weights.cpp)
// and the recipes (model/recipe*.cpp, over the blocks of model/blocks.h)
// read. A Llama-like architecture is a row here and a line in kRecipes
// (model/recipe.cpp) naming the shared decoder recipe, not a forward pass.
//
// The decoder recipe (model/recipe_decoder.cpp), for every layer:
//   x = rmsnorm(h, attn_norm)
//   q, k, v = Wq x (+bq), Wk x (+bk), Wv x (+bv)         bias: qkv_bias
//   q, k = rmsnorm per head (attn_q_norm, attn_k_norm)   qk_norm
//   q, k = rope(q, k, pos)                               rope_mode
//   h += Wo attention(q, k, v)
//   x = rmsnorm(h, ffn_norm)
//   dense: h += Wdown (silu(Wgate x) * Wup x)
//   MoE:   ids, w = router(Wr x)                         router_mode
//          h += sum_j w_j * down_j(silu(gate_j x) * up_j x)
// then logits = Woutput rmsnorm(h, output_norm) (Woutput = token_embd if absent).
//
// Hybrids (qwen35moe, Qwen3.5/3.6-MoE) switch three more parts of the recipe:
//   linear_attention: most layers replace attention with Gated DeltaNet
//                     (src/cpu/delta_net.h); every full_attention_interval-th
//                     layer keeps softmax attention
//   attn_output_gate: attn_q yields per head [q | gate]; the attention output
//                     is multiplied by sigmoid(gate) before Wo
//   shared_expert:    every MoE layer adds sigmoid(w_s . x) * SwiGLU_shexp(x)
//   the FFN norm is named post_attention_norm, and RoPE may cover only the
//   first rope.dimension_count dims of each head (partial RoPE).
//
// gpt-oss (OpenAI) adds biases and two attention features:
//   attn_sinks:   a learned logit per head in the softmax denominator (blk.N.attn_sinks)
//   swa_pattern:  sliding-window attention (`<arch>.attention.sliding_window`
//                 keys back) on layers il % swa_pattern < swa_pattern - 1
//                 (gpt-oss: 2, the even layers), full attention on the others
//   attn_out_bias, router_bias, expert_bias: attn_output.bias,
//                 ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias
//   clamped_swiglu: the experts' activation (cpu/ops.h: swiglu_oai)
//   the FFN norm is named post_attention_norm here too.
#pragma once
#include <string>
#include <vector>

#include "model/rope_router.h"

namespace ms {

struct ArchInfo {
  const char* name;        // GGUF general.architecture
  RopeMode rope_mode;      // Normal (adjacent pairs) for llama; Neox (halves) for the Qwen family
  bool qk_norm;            // per-head RMSNorm of q and k (attn_q_norm / attn_k_norm)
  bool qkv_bias;           // attn_q/k/v.bias present (qwen2)
  bool moe;                // routed experts: required (qwen3moe) ...
  bool moe_optional;       // ... or only when `<arch>.expert_count` > 0 (llama: Mixtral)
  RouterMode router_mode;  // how router logits become expert weights
  bool default_renorm;     // SoftmaxTopK: renormalise the top-k unless `<arch>.expert_weights_norm` says otherwise
  bool linear_attention;   // Gated DeltaNet layers between the full-attention ones (qwen35moe)
  bool attn_output_gate;   // attn_q holds [q | gate] per head; output *= sigmoid(gate)
  bool shared_expert;      // ffn_{gate,up,down}_shexp + ffn_gate_inp_shexp in every MoE layer
  // gpt-oss; defaulted so the rows above need not spell them.
  bool attn_sinks = false;     // blk.N.attn_sinks: one learned logit per q head
  int swa_pattern = 0;         // > 0: layers il % swa_pattern < swa_pattern - 1 use the sliding window
  bool attn_out_bias = false;  // attn_output.bias
  bool router_bias = false;    // ffn_gate_inp.bias, added to the logits before top-k
  bool expert_bias = false;    // ffn_{gate,up,down}_exps.bias
  bool clamped_swiglu = false; // experts: (clamp(up) + 1) * g * sigmoid(1.702 g), g = min(gate, 7)
  bool post_attention_norm = false;  // the FFN norm is blk.N.post_attention_norm (not ffn_norm)
};

// The row for a GGUF architecture name. Throws ms::Error naming the
// architecture and listing the supported ones.
const ArchInfo& arch_info(const std::string& name);
const std::vector<ArchInfo>& all_archs();
std::string supported_arch_names();  // "llama, qwen2, qwen3, qwen3moe, qwen35moe, gpt-oss"

}  // namespace ms
