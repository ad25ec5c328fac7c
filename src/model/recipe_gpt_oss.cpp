// OpenAI gpt-oss (GGUF gpt-oss): a pre-norm decoder whose attention has
// biases on q/k/v/o, a learned sink logit per head and, on alternate layers,
// a sliding window; its FFN is routed experts with a biased router (top k of
// the logits, softmax over the k), biased experts and the clamped SwiGLU.
//   h += attention(rmsnorm(h, attn_norm))                 window on swa layers
//   h += experts(rmsnorm(h, post_attention_norm))
#include "model/recipe.h"

namespace ms {

void gpt_oss_layer(LayerBlocks& b, const ModelConfig& c, int il) {
  AttentionBlock attn;
  attn.rope_mode = RopeMode::Neox;
  attn.qkv_bias = true;
  attn.output_bias = true;
  attn.sinks = true;
  attn.window = c.is_swa(il) ? static_cast<int>(c.n_swa) : 0;
  b.attention(il, attn);
  MoeFfnBlock moe;
  moe.router_mode = RouterMode::TopKSoftmax;
  moe.renorm = false;
  moe.router_bias = true;
  moe.expert_bias = true;
  moe.act.kind = GluActivation::Kind::ClampedSwiGLU;  // alpha 1.702, limit 7
  b.moe_ffn(il, moe);
}

}  // namespace ms
