// The pre-norm decoder of llama (Mixtral: llama with experts), qwen2, qwen3
// and qwen3moe: one recipe, because these architectures differ only by
// switches of the same two blocks, read from their model/arch.cpp rows.
//   h += attention(rmsnorm(h, attn_norm))     RoPE pairing, q/k norm, qkv bias
//   h += ffn(rmsnorm(h, ffn_norm))            dense SwiGLU, or routed experts
#include "model/recipe.h"

namespace ms {

void decoder_layer(LayerBlocks& b, const ModelConfig& c, int il) {
  const ArchInfo& a = *c.arch;
  AttentionBlock attn;
  attn.rope_mode = a.rope_mode;
  attn.qk_norm = a.qk_norm;
  attn.qkv_bias = a.qkv_bias;
  b.attention(il, attn);
  if (!c.is_moe()) {
    b.dense_ffn(il, DenseFfnBlock{});
    return;
  }
  MoeFfnBlock moe;
  moe.router_mode = a.router_mode;
  moe.renorm = c.router_renorm;
  b.moe_ffn(il, moe);
}

}  // namespace ms
