#include "model/tensor_table.h"

#include <variant>

namespace ms {

const char* ffn_norm_name(const ArchInfo& a) {
  return a.linear_attention || a.post_attention_norm ? "post_attention_norm.weight" : "ffn_norm.weight";
}

std::vector<LayerTensorSpec> layer_tensor_table(const ModelConfig& c, int il, const std::vector<BlockCall>& blocks) {
  std::vector<LayerTensorSpec> t;
  const std::string p = "blk." + std::to_string(il) + ".";
  auto add = [&](TensorView LayerWeights::*field, const char* name, std::vector<int64_t> shape, bool f32 = false) {
    t.push_back({field, p + name, std::move(shape), f32});
  };
  const int64_t D = c.n_embd, hd = c.head_dim;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * hd, kv_dim = static_cast<int64_t>(c.n_head_kv) * hd;
  for (const BlockCall& call : blocks) {
    if (const auto* a = std::get_if<AttentionBlock>(&call)) {
      add(&LayerWeights::attn_norm, "attn_norm.weight", {D}, true);
      add(&LayerWeights::wq, "attn_q.weight", {D, a->output_gate ? 2 * q_dim : q_dim});  // gate: [q | gate] per head
      add(&LayerWeights::wk, "attn_k.weight", {D, kv_dim});
      add(&LayerWeights::wv, "attn_v.weight", {D, kv_dim});
      if (a->qkv_bias) {
        add(&LayerWeights::bq, "attn_q.bias", {q_dim}, true);
        add(&LayerWeights::bk, "attn_k.bias", {kv_dim}, true);
        add(&LayerWeights::bv, "attn_v.bias", {kv_dim}, true);
      }
      add(&LayerWeights::wo, "attn_output.weight", {q_dim, D});
      if (a->output_bias) add(&LayerWeights::bo, "attn_output.bias", {D}, true);
      if (a->sinks) add(&LayerWeights::attn_sinks, "attn_sinks.weight", {static_cast<int64_t>(c.n_head)}, true);
      if (a->qk_norm) {
        add(&LayerWeights::q_norm, "attn_q_norm.weight", {hd}, true);
        add(&LayerWeights::k_norm, "attn_k_norm.weight", {hd}, true);
      }
    } else if (std::holds_alternative<LinearAttentionBlock>(call)) {
      const auto& L = c.lin;
      const int64_t nv = L.n_v_heads;
      add(&LayerWeights::attn_norm, "attn_norm.weight", {D}, true);
      add(&LayerWeights::ssm_qkv, "attn_qkv.weight", {D, L.conv_dim()});
      add(&LayerWeights::ssm_z, "attn_gate.weight", {D, L.value_dim()});
      add(&LayerWeights::ssm_beta, "ssm_beta.weight", {D, nv});
      add(&LayerWeights::ssm_alpha, "ssm_alpha.weight", {D, nv});
      add(&LayerWeights::ssm_a, "ssm_a", {nv}, true);
      add(&LayerWeights::ssm_dt, "ssm_dt.bias", {nv}, true);
      add(&LayerWeights::ssm_conv, "ssm_conv1d.weight", {L.conv_kernel, L.conv_dim()}, true);
      add(&LayerWeights::ssm_norm, "ssm_norm.weight", {L.head_v}, true);
      add(&LayerWeights::ssm_out, "ssm_out.weight", {L.value_dim(), D});
    } else if (std::holds_alternative<DenseFfnBlock>(call)) {
      add(&LayerWeights::ffn_norm, ffn_norm_name(*c.arch), {D}, true);
      add(&LayerWeights::ffn_gate, "ffn_gate.weight", {D, c.n_ff});
      add(&LayerWeights::ffn_up, "ffn_up.weight", {D, c.n_ff});
      add(&LayerWeights::ffn_down, "ffn_down.weight", {c.n_ff, D});
    } else if (const auto* m = std::get_if<MoeFfnBlock>(&call)) {
      add(&LayerWeights::ffn_norm, ffn_norm_name(*c.arch), {D}, true);
      add(&LayerWeights::router, "ffn_gate_inp.weight", {D, c.n_expert});
      if (m->router_bias) add(&LayerWeights::router_b, "ffn_gate_inp.bias", {c.n_expert}, true);
      if (m->shared_expert) {
        add(&LayerWeights::shexp_router, "ffn_gate_inp_shexp.weight", {D});
        add(&LayerWeights::shexp_gate, "ffn_gate_shexp.weight", {D, c.n_ff_shexp});
        add(&LayerWeights::shexp_up, "ffn_up_shexp.weight", {D, c.n_ff_shexp});
        add(&LayerWeights::shexp_down, "ffn_down_shexp.weight", {c.n_ff_shexp, D});
      }
    }
  }
  return t;
}

}  // namespace ms
