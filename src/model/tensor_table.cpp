#include "model/tensor_table.h"

#include <variant>

#include "util/error.h"

namespace ms {

const char* ffn_norm_name(const ArchInfo& a) {
  return a.linear_attention || a.post_attention_norm ? "post_attention_norm.weight" : "ffn_norm.weight";
}

namespace {

// The one spelling of each dense layer tensor's GGUF name (after "blk.N.").
struct FieldName {
  TensorView LayerWeights::*field;
  const char* suffix;
};
constexpr FieldName kFieldNames[] = {
    {&LayerWeights::attn_norm, "attn_norm.weight"},
    {&LayerWeights::wq, "attn_q.weight"},
    {&LayerWeights::wk, "attn_k.weight"},
    {&LayerWeights::wv, "attn_v.weight"},
    {&LayerWeights::wo, "attn_output.weight"},
    {&LayerWeights::bq, "attn_q.bias"},
    {&LayerWeights::bk, "attn_k.bias"},
    {&LayerWeights::bv, "attn_v.bias"},
    {&LayerWeights::bo, "attn_output.bias"},
    {&LayerWeights::attn_sinks, "attn_sinks.weight"},
    {&LayerWeights::q_norm, "attn_q_norm.weight"},
    {&LayerWeights::k_norm, "attn_k_norm.weight"},
    {&LayerWeights::ssm_qkv, "attn_qkv.weight"},
    {&LayerWeights::ssm_z, "attn_gate.weight"},
    {&LayerWeights::ssm_beta, "ssm_beta.weight"},
    {&LayerWeights::ssm_alpha, "ssm_alpha.weight"},
    {&LayerWeights::ssm_a, "ssm_a"},
    {&LayerWeights::ssm_dt, "ssm_dt.bias"},
    {&LayerWeights::ssm_conv, "ssm_conv1d.weight"},
    {&LayerWeights::ssm_norm, "ssm_norm.weight"},
    {&LayerWeights::ssm_out, "ssm_out.weight"},
    {&LayerWeights::ffn_gate, "ffn_gate.weight"},
    {&LayerWeights::ffn_up, "ffn_up.weight"},
    {&LayerWeights::ffn_down, "ffn_down.weight"},
    {&LayerWeights::router, "ffn_gate_inp.weight"},
    {&LayerWeights::router_b, "ffn_gate_inp.bias"},
    {&LayerWeights::shexp_router, "ffn_gate_inp_shexp.weight"},
    {&LayerWeights::shexp_gate, "ffn_gate_shexp.weight"},
    {&LayerWeights::shexp_up, "ffn_up_shexp.weight"},
    {&LayerWeights::shexp_down, "ffn_down_shexp.weight"},
};

}  // namespace

const char* layer_tensor_suffix(TensorView LayerWeights::*field, const ArchInfo& a) {
  if (field == &LayerWeights::ffn_norm) return ffn_norm_name(a);
  for (const FieldName& f : kFieldNames)
    if (f.field == field) return f.suffix;
  throw Error("tensor table: a LayerWeights field with no GGUF name (add it to kFieldNames in model/tensor_table.cpp)");
}

std::string layer_tensor_name(int il, TensorView LayerWeights::*field, const ArchInfo& a) {
  return "blk." + std::to_string(il) + "." + layer_tensor_suffix(field, a);
}

std::vector<LayerTensorSpec> layer_tensor_table(const ModelConfig& c, int il, const std::vector<BlockCall>& blocks) {
  std::vector<LayerTensorSpec> t;
  const std::string p = "blk." + std::to_string(il) + ".";
  auto add = [&](TensorView LayerWeights::*field, std::vector<int64_t> shape, bool f32 = false) {
    t.push_back({field, p + layer_tensor_suffix(field, *c.arch), std::move(shape), f32});
  };
  const int64_t D = c.n_embd, hd = c.head_dim;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * hd, kv_dim = static_cast<int64_t>(c.n_head_kv) * hd;
  for (const BlockCall& call : blocks) {
    if (const auto* a = std::get_if<AttentionBlock>(&call)) {
      add(&LayerWeights::attn_norm, {D}, true);
      add(&LayerWeights::wq, {D, a->output_gate ? 2 * q_dim : q_dim});  // gate: [q | gate] per head
      add(&LayerWeights::wk, {D, kv_dim});
      add(&LayerWeights::wv, {D, kv_dim});
      if (a->qkv_bias) {
        add(&LayerWeights::bq, {q_dim}, true);
        add(&LayerWeights::bk, {kv_dim}, true);
        add(&LayerWeights::bv, {kv_dim}, true);
      }
      add(&LayerWeights::wo, {q_dim, D});
      if (a->output_bias) add(&LayerWeights::bo, {D}, true);
      if (a->sinks) add(&LayerWeights::attn_sinks, {static_cast<int64_t>(c.n_head)}, true);
      if (a->qk_norm) {
        add(&LayerWeights::q_norm, {hd}, true);
        add(&LayerWeights::k_norm, {hd}, true);
      }
    } else if (std::holds_alternative<LinearAttentionBlock>(call)) {
      const auto& L = c.lin;
      const int64_t nv = L.n_v_heads;
      add(&LayerWeights::attn_norm, {D}, true);
      add(&LayerWeights::ssm_qkv, {D, L.conv_dim()});
      add(&LayerWeights::ssm_z, {D, L.value_dim()});
      add(&LayerWeights::ssm_beta, {D, nv});
      add(&LayerWeights::ssm_alpha, {D, nv});
      add(&LayerWeights::ssm_a, {nv}, true);
      add(&LayerWeights::ssm_dt, {nv}, true);
      add(&LayerWeights::ssm_conv, {L.conv_kernel, L.conv_dim()}, true);
      add(&LayerWeights::ssm_norm, {L.head_v}, true);
      add(&LayerWeights::ssm_out, {L.value_dim(), D});
    } else if (std::holds_alternative<DenseFfnBlock>(call)) {
      add(&LayerWeights::ffn_norm, {D}, true);
      add(&LayerWeights::ffn_gate, {D, c.n_ff});
      add(&LayerWeights::ffn_up, {D, c.n_ff});
      add(&LayerWeights::ffn_down, {c.n_ff, D});
    } else if (const auto* m = std::get_if<MoeFfnBlock>(&call)) {
      add(&LayerWeights::ffn_norm, {D}, true);
      add(&LayerWeights::router, {D, c.n_expert});
      if (m->router_bias) add(&LayerWeights::router_b, {c.n_expert}, true);
      if (m->shared_expert) {
        add(&LayerWeights::shexp_router, {D});
        add(&LayerWeights::shexp_gate, {D, c.n_ff_shexp});
        add(&LayerWeights::shexp_up, {D, c.n_ff_shexp});
        add(&LayerWeights::shexp_down, {c.n_ff_shexp, D});
      }
    }
  }
  return t;
}

}  // namespace ms
