#include "model/weights.h"

#include <cstdio>
#include <string>
#include <variant>

#include "format/gguf.h"
#include "model/hparams.h"
#include "model/recipe.h"
#include "model/rope_scaling.h"
#include "model/tensor_table.h"
#include "util/error.h"

namespace ms {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "{";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "}";
}

class Binder {
 public:
  Binder(const GgufFile& f, const uint8_t* data) : f_(f), data_(data) {}

  // A tensor of exactly `shape` (GGUF order), or an error naming it.
  TensorView get(const std::string& name, std::vector<int64_t> shape, bool required = true) const {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (!required) return {};
      throw Error(f_.path() + ": missing tensor '" + name + "' (needed by the '" + arch_ +
                  "' architecture); the file is incomplete or was converted for another architecture");
    }
    // A vector stored as a one-row matrix is the same bytes: llama.cpp's
    // converter keeps Hugging Face's [1, n] (e.g. Qwen's shared_expert_gate
    // -> ffn_gate_inp_shexp {n_embd, 1}), moestream's own writes {n}.
    if (shape.size() == 1 && t->shape.size() == 2 && t->shape[1] == 1 && t->shape[0] == shape[0])
      shape = t->shape;
    if (t->shape != shape)
      throw Error(f_.path() + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " +
                  shape_str(shape) + " from the model's hyper-parameters");
    const TypeInfo& info = type_info(t->type);
    if (!info.computable)
      throw Error(f_.path() + ": tensor '" + name + "' has type " + info.name +
                  ", which moestream cannot compute with; re-quantize it (e.g. q4_K, q8_0)");
    if (shape[0] % info.block_size != 0)
      throw Error(f_.path() + ": tensor '" + name + "' rows of " + std::to_string(shape[0]) +
                  " are not a multiple of " + info.name + "'s block size");
    TensorView v;
    v.name = name;
    v.type = t->type;
    v.data = data_ ? data_ + t->offset : t->data;
    v.cols = shape[0];
    v.rows = shape.size() > 1 ? shape[1] : 1;
    v.file_offset = f_.data_offset() + t->offset;
    v.nbytes = t->nbytes;
    return v;
  }
  // Norms and biases must be F32 (they are tiny and the engine
  // reads them as floats).
  TensorView get_f32(const std::string& name, std::vector<int64_t> shape, bool required = true) const {
    TensorView v = get(name, std::move(shape), required);
    if (v && v.type != DType::F32)
      throw Error(f_.path() + ": tensor '" + name + "' is " + type_name(v.type) +
                  "; norms and biases must be f32 (re-convert the model)");
    return v;
  }
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  void set_arch(const std::string& a) { arch_ = a; }

 private:
  const GgufFile& f_;
  const uint8_t* data_;
  std::string arch_;
};

// A layer's routed-expert tensors as the table names them, bound.
struct ExpertViews {
  TensorView gate, up, down, gate_up;           // stacked / merged
  std::vector<TensorView> gate_e, up_e, down_e; // per-expert
  TensorView gate_b, up_b, down_b;              // biases (arch->expert_bias)

  void set(const LayerTensorSpec& t, TensorView v) {
    const bool one = t.expert >= 0;
    auto put = [&](TensorView& all, std::vector<TensorView>& each) {
      if (!one) {
        all = std::move(v);
        return;
      }
      if (each.size() <= static_cast<size_t>(t.expert)) each.resize(static_cast<size_t>(t.expert) + 1);
      each[static_cast<size_t>(t.expert)] = std::move(v);
    };
    switch (t.part) {
      case ExpertPart::Gate: put(gate, gate_e); break;
      case ExpertPart::Up: put(up, up_e); break;
      case ExpertPart::Down: put(down, down_e); break;
      case ExpertPart::GateUp: gate_up = std::move(v); break;
      case ExpertPart::GateBias: gate_b = std::move(v); break;
      case ExpertPart::UpBias: up_b = std::move(v); break;
      case ExpertPart::DownBias: down_b = std::move(v); break;
    }
  }
};

// The layout a layer's experts are stored in, from which names the file has.
ExpertLayout detect_layout(const Binder& b, int il) {
  if (b.has(expert_tensor_name(il, ExpertPart::GateUp))) return ExpertLayout::Merged;
  if (b.has(expert_tensor_name(il, ExpertPart::Gate)) || !b.has(expert_tensor_name(il, ExpertPart::Gate, 0)))
    return ExpertLayout::Stacked;  // (a file with neither is reported missing the stacked names)
  return ExpertLayout::PerExpert;
}

// Expert e's matrices as pointers into the bound tensors.
void assemble_experts(const GgufFile& f, const uint8_t* data, const ModelConfig& c, int il, ExpertLayout layout,
                      ExpertViews& v, ExpertWeights& ex) {
  ex.n_expert = c.n_expert;
  ex.n_embd = c.n_embd;
  ex.n_ff = c.n_ff_exp;
  ex.data_base_ = data ? data : f.base() + f.data_offset();
  ex.data_offset_ = f.data_offset();
  ex.clamped_swiglu = c.arch->clamped_swiglu;
  ex.layout = expert_layout_name(layout);
  const int64_t E = c.n_expert, D = c.n_embd, F = c.n_ff_exp;
  ex.gate_.resize(E);
  ex.up_.resize(E);
  ex.down_.resize(E);
  if (layout == ExpertLayout::Merged) {
    ex.gate_type = ex.up_type = v.gate_up.type;
    ex.down_type = v.down.type;
    const uint64_t rb = row_bytes(v.gate_up.type, D);
    for (int64_t e = 0; e < E; ++e) {
      ex.gate_[e] = v.gate_up.data + e * 2 * F * rb;
      ex.up_[e] = ex.gate_[e] + F * rb;
      ex.down_[e] = v.down.data + e * D * row_bytes(v.down.type, F);
    }
  } else if (layout == ExpertLayout::Stacked) {
    ex.gate_type = v.gate.type;
    ex.up_type = v.up.type;
    ex.down_type = v.down.type;
    for (int64_t e = 0; e < E; ++e) {
      ex.gate_[e] = v.gate.data + e * F * row_bytes(v.gate.type, D);
      ex.up_[e] = v.up.data + e * F * row_bytes(v.up.type, D);
      ex.down_[e] = v.down.data + e * D * row_bytes(v.down.type, F);
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const TensorView &g = v.gate_e[e], &u = v.up_e[e], &dn = v.down_e[e];
      if (e == 0) {
        ex.gate_type = g.type;
        ex.up_type = u.type;
        ex.down_type = dn.type;
      } else if (g.type != ex.gate_type || u.type != ex.up_type || dn.type != ex.down_type) {
        throw Error(f.path() + ": layer " + std::to_string(il) + " expert " + std::to_string(e) +
                    " has a different quant type from expert 0; all experts of a layer must share types");
      }
      ex.gate_[e] = g.data;
      ex.up_[e] = u.data;
      ex.down_[e] = dn.data;
    }
  }
  if (v.gate_b) {  // the table lists the three biases together
    ex.gate_b_view_ = v.gate_b;
    ex.up_b_view_ = v.up_b;
    ex.down_b_view_ = v.down_b;
    ex.gate_b_ = ex.gate_b_view_.f32();
    ex.up_b_ = ex.up_b_view_.f32();
    ex.down_b_ = ex.down_b_view_.f32();
  }
}

}  // namespace

int ModelConfig::n_attention_layers() const {
  int n = 0;
  for (int il = 0; il < n_layer; ++il) n += is_linear(il) ? 0 : 1;
  return n;
}

std::string ModelConfig::describe() const {
  char buf[384];
  if (!linear_layer.empty()) {
    std::snprintf(buf, sizeof buf,
                  "%s: %d layers (%d Gated DeltaNet, %d attention; %d MTP), n_embd %lld, %d/%d heads of %d, "
                  "%d experts (top %d) of ff %lld + shared ff %lld, vocab %lld",
                  arch_name.c_str(), n_layer, n_layer - n_attention_layers(), n_attention_layers(), n_layer_mtp,
                  static_cast<long long>(n_embd), n_head, n_head_kv, head_dim, n_expert, n_expert_used,
                  static_cast<long long>(n_ff_exp), static_cast<long long>(n_ff_shexp), static_cast<long long>(n_vocab));
    return buf;
  }
  if (is_moe() && n_swa > 0) {
    int n_window = 0;
    for (int il = 0; il < n_layer; ++il) n_window += is_swa(il) ? 1 : 0;
    std::snprintf(buf, sizeof buf,
                  "%s: %d layers (%d with a %lld-token window), n_embd %lld, %d/%d heads of %d, %d experts (top %d) "
                  "of ff %lld, vocab %lld",
                  arch_name.c_str(), n_layer, n_window, static_cast<long long>(n_swa), static_cast<long long>(n_embd),
                  n_head, n_head_kv, head_dim, n_expert, n_expert_used, static_cast<long long>(n_ff_exp),
                  static_cast<long long>(n_vocab));
    return buf;
  }
  if (is_moe())
    std::snprintf(buf, sizeof buf, "%s: %d layers, n_embd %lld, %d/%d heads of %d, %d experts (top %d) of ff %lld, vocab %lld",
                  arch_name.c_str(), n_layer, static_cast<long long>(n_embd), n_head, n_head_kv, head_dim, n_expert,
                  n_expert_used, static_cast<long long>(n_ff_exp), static_cast<long long>(n_vocab));
  else
    std::snprintf(buf, sizeof buf, "%s: %d layers, n_embd %lld, %d/%d heads of %d, ff %lld, vocab %lld",
                  arch_name.c_str(), n_layer, static_cast<long long>(n_embd), n_head, n_head_kv, head_dim,
                  static_cast<long long>(n_ff), static_cast<long long>(n_vocab));
  return buf;
}

ModelConfig read_model_config(const GgufFile& f) {
  ModelConfig c;
  c.arch_name = f.get_string("general.architecture");
  c.arch = &arch_info(c.arch_name);  // unknown architectures stop here, by name
  const ModelHParams hp = read_hparams(f);  // throws naming a missing or invalid key
  const std::string p = c.arch_name + ".";
  auto narrow = [&](const std::string& key, int64_t v) {
    if (v <= 0 || v > (int64_t{1} << 30))
      throw Error(f.path() + ": metadata '" + key + "' = " + std::to_string(v) + " is out of range");
    return static_cast<int>(v);
  };
  // block_count includes the MTP blocks stored after the main stack.
  c.n_layer = narrow(p + "block_count", hp.n_layer - hp.n_layer_nextn);
  c.n_layer_mtp = static_cast<int>(hp.n_layer_nextn);
  c.n_embd = hp.n_embd;
  c.n_head = narrow(p + "attention.head_count", hp.n_head);
  c.n_head_kv = narrow(p + "attention.head_count_kv", hp.n_head_kv);
  if (c.n_head % c.n_head_kv != 0)
    throw Error(f.path() + ": " + std::to_string(c.n_head) + " attention heads is not a multiple of " +
                std::to_string(c.n_head_kv) + " KV heads");
  for (size_t il = 0; il < hp.n_head_kv_layer.size(); ++il) {
    const bool linear = c.arch->linear_attention && hp.layer_is_recurrent[il];  // no KV heads, by design
    if (!linear && hp.n_head_kv_layer[il] != hp.n_head_kv)
      throw Error(f.path() + ": layers with different KV head counts (or without attention) are not supported by "
                  "the engine");
  }
  if (c.arch->linear_attention) {
    c.linear_layer.assign(hp.layer_is_recurrent.begin(), hp.layer_is_recurrent.begin() + c.n_layer);
    auto& L = c.lin;
    L.conv_kernel = narrow(p + "ssm.conv_kernel", hp.ssm_conv_kernel);
    L.n_k_heads = narrow(p + "ssm.group_count", hp.ssm_group_count);
    L.n_v_heads = narrow(p + "ssm.time_step_rank", hp.ssm_dt_rank);
    L.head_k = narrow(p + "ssm.state_size", hp.ssm_state_size);
    L.head_v = narrow(p + "ssm.inner_size", hp.ssm_inner_size / hp.ssm_dt_rank);
    if (L.conv_kernel < 2 || L.conv_kernel > 16)
      throw Error(f.path() + ": " + p + "ssm.conv_kernel = " + std::to_string(L.conv_kernel) +
                  " is out of range (2..16 taps)");
  } else if (hp.n_layer_nextn > 0) {
    throw Error(f.path() + ": '" + c.arch_name + "' with MTP blocks (nextn_predict_layers) is not supported");
  }
  c.head_dim = narrow(p + "attention.key_length", hp.head_dim);
  if (hp.head_dim_v != hp.head_dim)
    throw Error(f.path() + ": attention.value_length differs from key_length; not supported");
  c.n_rot = static_cast<int>(f.get_int(p + "rope.dimension_count", c.head_dim));
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2)
    throw Error(f.path() + ": rope.dimension_count " + std::to_string(c.n_rot) + " must be even and <= head size " +
                std::to_string(c.head_dim));
  if (c.arch->swa_pattern > 0) {
    c.n_swa = hp.sliding_window;  // read_hparams required it
    c.swa_layer.assign(hp.layer_is_swa.begin(), hp.layer_is_swa.begin() + c.n_layer);
  }
  c.n_ctx_train = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
  c.rms_eps = hp.rms_eps > 0 ? static_cast<float>(hp.rms_eps) : 1e-6f;
  c.rope_base = hp.rope_freq_base > 0 ? static_cast<float>(hp.rope_freq_base) : 10000.0f;
  c.rope_scaling = read_rope_scaling(f, c.arch_name, c.n_rot, c.rope_base, c.n_ctx_train);
  if (hp.n_expert_shared > 1 || (hp.n_expert_shared > 0 && !c.arch->shared_expert))
    throw Error(f.path() + ": shared experts are not supported for '" + c.arch_name + "' (expert_shared_count " +
                std::to_string(hp.n_expert_shared) + ")");
  if (c.arch->shared_expert) {
    c.n_ff_shexp = f.get_int(p + "expert_shared_feed_forward_length", 0);
    if (c.n_ff_shexp <= 0)
      if (const GgufTensorInfo* t = f.find_tensor("blk.0.ffn_gate_shexp.weight"); t && t->shape.size() == 2)
        c.n_ff_shexp = t->shape[1];
    if (c.n_ff_shexp <= 0)
      throw Error(f.path() + ": cannot tell the shared expert's FFN width (no '" + p +
                  "expert_shared_feed_forward_length', no blk.0.ffn_gate_shexp.weight)");
  }
  c.n_expert = static_cast<int>(hp.n_expert);
  if (c.arch->moe && c.n_expert <= 0)
    throw Error(f.path() + ": '" + c.arch_name + "' needs metadata '" + p + "expert_count' > 0");
  if (!c.arch->moe && !c.arch->moe_optional && c.n_expert > 0)
    throw Error(f.path() + ": '" + c.arch_name + "' is a dense architecture but expert_count is " +
                std::to_string(c.n_expert));
  if (c.n_expert > 0) {
    c.n_expert_used = static_cast<int>(hp.n_expert_used);
    c.n_ff_exp = hp.n_ff_exp > 0 ? hp.n_ff_exp : hp.n_ff;
    if (c.n_ff_exp <= 0) throw Error(f.path() + ": cannot tell the experts' FFN width (no expert tensors)");
    c.router_renorm = hp.expert_weights_norm.value_or(c.arch->default_renorm);
  } else {
    c.n_ff = hp.n_ff;
  }
  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) throw Error(f.path() + ": missing tensor 'token_embd.weight'");
  if (embd->shape.size() != 2)
    throw Error(f.path() + ": tensor 'token_embd.weight' must be 2-D, has shape " + shape_str(embd->shape));
  c.n_vocab = embd->shape[1];
  return c;
}

uint64_t TensorView::row_bytes() const { return static_cast<uint64_t>(ms::row_bytes(type, cols)); }

uint64_t ExpertWeights::gate_bytes() const { return static_cast<uint64_t>(n_ff * row_bytes(gate_type, n_embd)); }
uint64_t ExpertWeights::up_bytes() const { return static_cast<uint64_t>(n_ff * row_bytes(up_type, n_embd)); }
uint64_t ExpertWeights::down_bytes() const { return static_cast<uint64_t>(n_embd * row_bytes(down_type, n_ff)); }

std::vector<ByteRange> ExpertWeights::ranges(int e) const {
  auto off = [&](const uint8_t* p) { return static_cast<uint64_t>(p - data_base_) + data_offset_; };
  if (layout == "merged") return {{off(gate(e)), gate_bytes() + up_bytes()}, {off(down(e)), down_bytes()}};
  return {{off(gate(e)), gate_bytes()}, {off(up(e)), up_bytes()}, {off(down(e)), down_bytes()}};
}

std::vector<const TensorView*> LayerWeights::dense_tensors() const {
  std::vector<const TensorView*> out;
  for (const TensorView* t : {&attn_norm, &wq, &wk, &wv, &wo, &bq, &bk, &bv, &bo, &attn_sinks, &q_norm, &k_norm,
                              &ffn_norm, &ffn_gate, &ffn_up, &ffn_down, &router, &router_b, &ssm_qkv, &ssm_z, &ssm_beta, &ssm_alpha, &ssm_a, &ssm_dt,
                              &ssm_conv, &ssm_norm, &ssm_out, &shexp_gate, &shexp_up, &shexp_down, &shexp_router})
    if (*t) out.push_back(t);
  return out;
}

uint64_t ModelWeights::active_bytes_per_token() const {
  uint64_t total = output.nbytes + output_norm.nbytes + token_embd.row_bytes();
  for (const LayerWeights& l : layers) {
    for (const TensorView* t : l.dense_tensors()) total += t->nbytes;
    total += static_cast<uint64_t>(cfg.n_expert_used) * l.experts.expert_bytes();
  }
  return total;
}

uint64_t ModelWeights::total_expert_bytes() const {
  uint64_t total = 0;
  for (const LayerWeights& l : layers) total += static_cast<uint64_t>(l.experts.n_expert) * l.experts.expert_bytes();
  return total;
}

ModelWeights bind_weights(const GgufFile& f, const uint8_t* data) {
  ModelWeights w;
  w.file = &f;
  w.cfg = read_model_config(f);
  const ModelConfig& c = w.cfg;
  Binder b(f, data);
  b.set_arch(c.arch_name);

  // Every tensor from the tensor table (model/tensor_table.h): the globals,
  // then each layer's (what the blocks of its recipe read, its routed experts
  // in the layout the file stores them in, and an MTP block's nextn tensors).
  auto bind = [&](const LayerTensorSpec& t) {
    return t.f32 ? b.get_f32(t.name, t.shape, t.required) : b.get(t.name, t.shape, t.required);
  };
  for (const LayerTensorSpec& t : global_tensor_table(c, false)) w.*t.global = bind(t);
  if (!w.output) {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  w.layers.resize(static_cast<size_t>(c.n_layer));
  auto bind_layer = [&](int il, const std::vector<BlockCall>& blocks, LayerWeights& l, MtpWeights* m) {
    const ExpertLayout layout = detect_layout(b, il);
    ExpertViews experts;
    bool moe = false;
    for (const LayerTensorSpec& t : layer_file_tensors(c, il, blocks, layout)) {
      switch (t.kind) {
        case LayerTensorSpec::Kind::Dense: l.*t.field = bind(t); break;
        case LayerTensorSpec::Kind::Expert: experts.set(t, bind(t)); moe = true; break;
        case LayerTensorSpec::Kind::Mtp:
          if (m) m->*t.mtp = bind(t);
          break;
        case LayerTensorSpec::Kind::Global: break;
      }
    }
    if (moe) assemble_experts(f, data, c, il, layout, experts, l.experts);
  };
  const std::vector<std::vector<BlockCall>> plan = plan_layers(c);
  for (int il = 0; il < c.n_layer; ++il)
    bind_layer(il, plan[static_cast<size_t>(il)], w.layers[static_cast<size_t>(il)], nullptr);
  if (c.n_layer_mtp == 0) return w;
  // MTP blocks (hybrids): the blocks of the main stack's full-attention
  // layers, plus the nextn tensors.
  const std::vector<BlockCall>* attention_layer = nullptr;
  try {
    attention_layer = &mtp_blocks(plan);
  } catch (const Error& e) {
    throw Error(f.path() + ": " + e.what());
  }
  for (int j = 0; j < c.n_layer_mtp; ++j) {
    MtpWeights& m = w.mtp.emplace_back();
    bind_layer(c.n_layer + j, *attention_layer, m.layer, &m);
  }
  return w;
}

}  // namespace ms
