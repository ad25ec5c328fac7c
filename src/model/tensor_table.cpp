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

// The routed experts' names: the tensor holding every expert, and the stem of
// one expert's matrix in the per-expert layout (blk.N.<stem>.E.weight).
struct ExpertName {
  ExpertPart part;
  const char* suffix;
  const char* per_expert_stem;  // nullptr: no per-expert form
};
constexpr ExpertName kExpertNames[] = {
    {ExpertPart::Gate, "ffn_gate_exps.weight", "ffn_gate"},
    {ExpertPart::Up, "ffn_up_exps.weight", "ffn_up"},
    {ExpertPart::Down, "ffn_down_exps.weight", "ffn_down"},
    {ExpertPart::GateUp, "ffn_gate_up_exps.weight", nullptr},
    {ExpertPart::GateBias, "ffn_gate_exps.bias", nullptr},
    {ExpertPart::UpBias, "ffn_up_exps.bias", nullptr},
    {ExpertPart::DownBias, "ffn_down_exps.bias", nullptr},
};

// An MTP block's own tensors (after "blk.N.").
struct MtpName {
  TensorView MtpWeights::*field;
  const char* suffix;
};
constexpr MtpName kMtpNames[] = {
    {&MtpWeights::eh_proj, "nextn.eh_proj.weight"},
    {&MtpWeights::enorm, "nextn.enorm.weight"},
    {&MtpWeights::hnorm, "nextn.hnorm.weight"},
    {&MtpWeights::shared_head_norm, "nextn.shared_head_norm.weight"},
    {&MtpWeights::shared_head_head, "nextn.shared_head_head.weight"},
    {&MtpWeights::embed_tokens, "nextn.embed_tokens.weight"},
};

std::string blk(int il) { return "blk." + std::to_string(il) + "."; }

}  // namespace

const char* layer_tensor_suffix(TensorView LayerWeights::*field, const ArchInfo& a) {
  if (field == &LayerWeights::ffn_norm) return ffn_norm_name(a);
  for (const FieldName& f : kFieldNames)
    if (f.field == field) return f.suffix;
  throw Error("tensor table: a LayerWeights field with no GGUF name (add it to kFieldNames in model/tensor_table.cpp)");
}

std::string layer_tensor_name(int il, TensorView LayerWeights::*field, const ArchInfo& a) {
  return blk(il) + layer_tensor_suffix(field, a);
}

std::string expert_tensor_name(int il, ExpertPart part, int expert) {
  for (const ExpertName& n : kExpertNames) {
    if (n.part != part) continue;
    if (expert < 0) return blk(il) + n.suffix;
    if (!n.per_expert_stem) break;
    return blk(il) + n.per_expert_stem + "." + std::to_string(expert) + ".weight";
  }
  throw Error("tensor table: no per-expert name for this expert tensor (model/tensor_table.cpp, kExpertNames)");
}

std::string mtp_tensor_name(int il, TensorView MtpWeights::*field) {
  for (const MtpName& n : kMtpNames)
    if (n.field == field) return blk(il) + n.suffix;
  throw Error("tensor table: an MtpWeights field with no GGUF name (add it to kMtpNames in model/tensor_table.cpp)");
}

const char* expert_layout_name(ExpertLayout l) {
  switch (l) {
    case ExpertLayout::Stacked: return "stacked";
    case ExpertLayout::Merged: return "merged";
    case ExpertLayout::PerExpert: return "per-expert";
  }
  return "?";
}

namespace {

// The layer's tensors; `layout` null: the dense ones only.
std::vector<LayerTensorSpec> build_layer(const ModelConfig& c, int il, const std::vector<BlockCall>& blocks,
                                         const ExpertLayout* layout) {
  std::vector<LayerTensorSpec> t;
  auto add = [&](TensorView LayerWeights::*field, std::vector<int64_t> shape, bool f32 = false) {
    LayerTensorSpec s;
    s.field = field;
    s.layer = il;
    s.name = layer_tensor_name(il, field, *c.arch);
    s.shape = std::move(shape);
    s.f32 = f32;
    t.push_back(std::move(s));
  };
  auto add_expert = [&](ExpertPart part, std::vector<int64_t> shape, int expert = -1, bool f32 = false) {
    LayerTensorSpec s;
    s.kind = LayerTensorSpec::Kind::Expert;
    s.part = part;
    s.expert = expert;
    s.layer = il;
    s.name = expert_tensor_name(il, part, expert);
    s.shape = std::move(shape);
    s.f32 = f32;
    t.push_back(std::move(s));
  };
  // The routed experts, in `layout`, then their biases.
  auto add_experts = [&](const MoeFfnBlock& m) {
    const int64_t D = c.n_embd, F = c.n_ff_exp, E = c.n_expert;
    switch (*layout) {
      case ExpertLayout::Stacked:
        add_expert(ExpertPart::Gate, {D, F, E});
        add_expert(ExpertPart::Up, {D, F, E});
        add_expert(ExpertPart::Down, {F, D, E});
        break;
      case ExpertLayout::Merged:
        add_expert(ExpertPart::GateUp, {D, 2 * F, E});
        add_expert(ExpertPart::Down, {F, D, E});
        break;
      case ExpertLayout::PerExpert:  // every gate, then every up, then every down
        for (ExpertPart p : {ExpertPart::Gate, ExpertPart::Up, ExpertPart::Down})
          for (int e = 0; e < c.n_expert; ++e)
            add_expert(p, p == ExpertPart::Down ? std::vector<int64_t>{F, D} : std::vector<int64_t>{D, F}, e);
        break;
    }
    if (m.expert_bias) {  // one row per expert
      add_expert(ExpertPart::GateBias, {F, E}, -1, true);
      add_expert(ExpertPart::UpBias, {F, E}, -1, true);
      add_expert(ExpertPart::DownBias, {D, E}, -1, true);
    }
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
      if (layout) add_experts(*m);  // right after the router, as the published files store them
      if (m->shared_expert) {
        add(&LayerWeights::shexp_router, {D});
        add(&LayerWeights::shexp_gate, {D, c.n_ff_shexp});
        add(&LayerWeights::shexp_up, {D, c.n_ff_shexp});
        add(&LayerWeights::shexp_down, {c.n_ff_shexp, D});
      }
    }
  }
  if (layout && il >= c.n_layer) {  // an MTP block's own tensors: [enorm(embedding) | hnorm(hidden)] -> n_embd
    auto add_mtp = [&](TensorView MtpWeights::*field, std::vector<int64_t> shape, bool f32, bool required,
                       bool written) {
      LayerTensorSpec s;
      s.kind = LayerTensorSpec::Kind::Mtp;
      s.mtp = field;
      s.layer = il;
      s.name = mtp_tensor_name(il, field);
      s.shape = std::move(shape);
      s.f32 = f32;
      s.required = required;
      s.written = written;
      t.push_back(std::move(s));
    };
    add_mtp(&MtpWeights::eh_proj, {2 * D, D}, false, true, true);
    add_mtp(&MtpWeights::enorm, {D}, true, true, true);
    add_mtp(&MtpWeights::hnorm, {D}, true, true, true);
    add_mtp(&MtpWeights::shared_head_norm, {D}, true, false, true);
    // Its own output head and embeddings: files that have them (the MTP
    // block otherwise shares the model's).
    add_mtp(&MtpWeights::shared_head_head, {D, c.n_vocab}, false, false, false);
    add_mtp(&MtpWeights::embed_tokens, {D, c.n_vocab}, false, false, false);
  }
  return t;
}

}  // namespace

std::vector<LayerTensorSpec> layer_tensor_table(const ModelConfig& c, int il, const std::vector<BlockCall>& blocks) {
  return build_layer(c, il, blocks, nullptr);
}

std::vector<LayerTensorSpec> layer_file_tensors(const ModelConfig& c, int il, const std::vector<BlockCall>& blocks,
                                                ExpertLayout layout) {
  return build_layer(c, il, blocks, &layout);
}

std::vector<LayerTensorSpec> global_tensor_table(const ModelConfig& c, bool tied_output) {
  std::vector<LayerTensorSpec> t;
  auto add = [&](TensorView ModelWeights::*field, const char* name, std::vector<int64_t> shape, bool f32,
                 bool required) {
    LayerTensorSpec s;
    s.kind = LayerTensorSpec::Kind::Global;
    s.global = field;
    s.name = name;
    s.shape = std::move(shape);
    s.f32 = f32;
    s.required = required;
    t.push_back(std::move(s));
  };
  add(&ModelWeights::token_embd, "token_embd.weight", {c.n_embd, c.n_vocab}, false, true);
  add(&ModelWeights::output_norm, "output_norm.weight", {c.n_embd}, true, true);
  if (!tied_output) add(&ModelWeights::output, "output.weight", {c.n_embd, c.n_vocab}, false, false);
  return t;
}

const std::vector<BlockCall>& mtp_blocks(const std::vector<std::vector<BlockCall>>& plan) {
  for (const auto& calls : plan)
    if (!calls.empty() && std::holds_alternative<AttentionBlock>(calls.front())) return calls;
  throw Error("MTP blocks need a full-attention layer in the main stack");
}

std::vector<LayerTensorSpec> model_tensor_table(const ModelConfig& c, ExpertLayout layout, bool tied_output) {
  std::vector<LayerTensorSpec> t = global_tensor_table(c, tied_output);
  const std::vector<std::vector<BlockCall>> plan = plan_layers(c);
  for (int il = 0; il < c.n_layer + c.n_layer_mtp; ++il)
    for (LayerTensorSpec& s :
         layer_file_tensors(c, il, il < c.n_layer ? plan[static_cast<size_t>(il)] : mtp_blocks(plan), layout))
      if (s.written) t.push_back(std::move(s));
  return t;
}

}  // namespace ms
