// Qwen3.5/3.6-MoE (GGUF qwen35moe), a hybrid: most layers mix tokens with
// Gated DeltaNet, every full_attention_interval-th one with output-gated
// softmax attention (partial RoPE comes from rope.dimension_count); every
// layer's FFN is routed experts plus a shared expert.
//   h += gated_deltanet(rmsnorm(h, attn_norm))        linear layers
//   h += gated_attention(rmsnorm(h, attn_norm))       the others
//   h += experts(x) + sigmoid(w_s . x) shared(x),  x = rmsnorm(h, post_attention_norm)
#include "model/recipe.h"

namespace ms {

void qwen35moe_layer(LayerBlocks& b, const ModelConfig& c, int il) {
  if (c.is_linear(il)) {
    b.linear_attention(il, LinearAttentionBlock{});
  } else {
    AttentionBlock attn;
    attn.rope_mode = RopeMode::Neox;
    attn.qk_norm = true;
    attn.output_gate = true;
    b.attention(il, attn);
  }
  MoeFfnBlock moe;
  moe.router_mode = RouterMode::SoftmaxTopK;
  moe.renorm = c.router_renorm;
  moe.shared_expert = true;
  b.moe_ffn(il, moe);
}

}  // namespace ms
