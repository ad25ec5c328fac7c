// The block interface: what a layer of any architecture is built from. A
// recipe (model/recipe.h) calls these blocks, in order and with parameters,
// for each layer; every backend (CpuBackend, CudaBackend) implements them.
// A backend's fusion (the CUDA decode prologue, graph capture, prefill
// fusion, the routed experts' fused next norm) is its implementation of a
// block, never a fork of the recipe.
//
// Every block is pre-norm and residual: it normalises the hidden state h with
// its own norm weight (the layer's attn_norm for the mixers; ffn_norm, which
// hybrids and gpt-oss name post_attention_norm, for the FFNs), computes, and
// adds its output to h. The weights are the layer's (LayerWeights), bound by
// the loader; the parameters below say which optional parts of the math run.
// A backend that lacks a part a recipe asks for refuses the model when it is
// constructed (ms::Error naming the part and the layer), never mid-forward.
//
// Embedding and output head are not blocks: every architecture so far embeds
// by row lookup and ends in rmsnorm(output_norm) + Woutput; the backends' own
// drivers run them around the recipe's layers.
#pragma once
#include "model/rope_router.h"

namespace ms {

// Softmax attention over the sequence's KV cache (the layer's slot in it).
struct AttentionBlock {
  RopeMode rope_mode = RopeMode::Neox;
  bool qkv_bias = false;     // bq, bk, bv added after the projections (qwen2; gpt-oss)
  bool qk_norm = false;      // per-head RMSNorm of q and k before RoPE (attn_q_norm / attn_k_norm)
  bool output_gate = false;  // Wq rows are [q | gate] per head; att *= sigmoid(gate) before Wo (qwen35moe)
  bool output_bias = false;  // bo added after Wo (gpt-oss)
  bool sinks = false;        // a learned logit per head in the softmax's denominator, no value (gpt-oss)
  int window = 0;            // > 0: the query at position p sees keys at (p - window, p] only (sliding layers)
};

// Gated DeltaNet (linear attention of hybrids), its recurrent state in the
// sequence's cache; the shape is ModelConfig::lin.
struct LinearAttentionBlock {};

// The gated activation of an FFN: act(gate x) * (up x), before the down projection.
struct GluActivation {
  enum class Kind { SiLU, ClampedSwiGLU };
  Kind kind = Kind::SiLU;
  // ClampedSwiGLU (gpt-oss): g = min(gate, limit), u = clamp(up, -limit, limit),
  // out = (u + 1) * g * sigmoid(alpha * g).
  float alpha = 1.702f, limit = 7.0f;
};

// A SwiGLU FFN every token runs (dense models): ffn_gate, ffn_up, ffn_down.
struct DenseFfnBlock {
  GluActivation act;
};

// Routed experts: router -> top k -> each chosen expert's FFN -> weighted sum.
struct MoeFfnBlock {
  RouterMode router_mode = RouterMode::SoftmaxTopK;
  bool renorm = true;        // SoftmaxTopK: renormalise the k weights to sum 1
  bool router_bias = false;  // ffn_gate_inp.bias added to the logits before top-k (gpt-oss)
  bool expert_bias = false;  // ffn_{gate,up,down}_exps.bias inside each expert's FFN (gpt-oss)
  GluActivation act;
  // Also every token's shared expert, scaled by sigmoid(w_s . x) (qwen35moe).
  // Part of this block rather than a block of its own because backends may
  // order the two sums differently: CUDA adds it between the router and the
  // routed experts, whose last launch then fuses the next layer's norm.
  bool shared_expert = false;
};

class LayerBlocks {
 public:
  virtual ~LayerBlocks() = default;
  virtual void attention(int il, const AttentionBlock& b) = 0;
  virtual void linear_attention(int il, const LinearAttentionBlock& b) = 0;
  virtual void dense_ffn(int il, const DenseFfnBlock& b) = 0;
  virtual void moe_ffn(int il, const MoeFfnBlock& b) = 0;
};

}  // namespace ms
