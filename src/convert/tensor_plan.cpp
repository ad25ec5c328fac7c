#include "convert/tensor_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "engine/quant_presets.h"
#include "model/tensor_table.h"
#include "util/error.h"

namespace ms {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

bool is_float_dtype(StDType t) {
  return t == StDType::F32 || t == StDType::F16 || t == StDType::BF16 || t == StDType::F64;
}

// A dense layer tensor's GGUF name, from the tensor table (model/tensor_table.h;
// expert_tensor_name and mtp_tensor_name name the routed experts and the nextn
// tensors): only the HF side of the mapping is spelled in this file, and the
// plan is put in the table's order at the end (in_table_order).
std::string gguf_name(const HfModelConfig& c, int64_t layer, TensorView LayerWeights::*field) {
  return layer_tensor_name(static_cast<int>(layer), field, arch_info(c.gguf_arch));
}

// Looks tensors up, checks them, and remembers which ones were used.
class Builder {
 public:
  Builder(const HfModelConfig& c, const SafetensorsModel& m, ConvertType target)
      : c_(c), m_(m), target_(target) {}

  const StTensor* find(const std::string& name) const { return m_.find(name); }

  // The tensor, required, with exactly `shape` (PyTorch order); `why` explains
  // where the expected shape comes from.
  const StTensor& take(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) {
    const StTensor* t = m_.find(name);
    if (!t)
      throw Error("the checkpoint has no tensor '" + name + "' (expected " + shape_str(shape) + " from " + why +
                  "); is a shard missing, or is the checkpoint for another architecture?");
    check(*t, shape, why);
    used_.insert(name);
    return *t;
  }

  void check(const StTensor& t, const std::vector<int64_t>& shape, const std::string& why) const {
    if (!is_float_dtype(t.dtype))
      throw Error(t.file + ": tensor '" + t.name + "' has dtype " + st_dtype_name(t.dtype) +
                  ", which cannot be converted (weights must be F32, F16, BF16 or F64)");
    if (t.shape != shape)
      throw Error(t.file + ": tensor '" + t.name + "' has shape " + shape_str(t.shape) + " but config.json implies " +
                  shape_str(shape) + " (" + why + ")");
  }

  void mark_used(const std::string& name) { used_.insert(name); }

  // A uint8 tensor of exactly `shape` (MXFP4 blocks and scales).
  const StTensor& take_u8(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) {
    const StTensor* t = m_.find(name);
    if (!t)
      throw Error("the checkpoint has no tensor '" + name + "' (expected " + shape_str(shape) + " from " + why + ")");
    if (t->dtype != StDType::U8)
      throw Error(t->file + ": tensor '" + name + "' has dtype " + st_dtype_name(t->dtype) + ", expected U8 (MXFP4)");
    if (t->shape != shape)
      throw Error(t->file + ": tensor '" + name + "' has shape " + shape_str(t->shape) + " but config.json implies " +
                  shape_str(shape) + " (" + why + ")");
    used_.insert(name);
    return *t;
  }

  // A tensor whose GGUF rows are one whole source tensor.
  void add_whole(const std::string& gguf, ConvertRole role, int layer, const std::string& hf,
                 const std::vector<int64_t>& hf_shape, const std::string& why, int64_t permute_heads = 0,
                 ValueOp op = ValueOp::None) {
    Slab s = whole_slab(hf, hf_shape, why);
    s.permute_heads = permute_heads;
    s.op = op;
    if (hf_shape.size() == 1 && permute_heads > 0) {  // a permuted bias: one element per row
      s.row_len = 1;
      s.n_rows = hf_shape[0];
    }
    add_slab(gguf, role, layer, reversed(hf_shape), std::move(s));
  }
  // One source tensor as a slab (rows of its last dimension).
  Slab whole_slab(const std::string& hf, const std::vector<int64_t>& hf_shape, const std::string& why) {
    const StTensor& t = take(hf, hf_shape, why);
    Slab s;
    s.src = &t;
    s.row_len = hf_shape.back();
    s.n_rows = t.n_elements() / s.row_len;
    return s;
  }
  void add_slab(const std::string& gguf, ConvertRole role, int layer, std::vector<int64_t> gguf_shape, Slab s) {
    PlannedTensor p = make(gguf, role, layer, std::move(gguf_shape));
    p.slabs.push_back(std::move(s));
    out_.push_back(std::move(p));
  }

  PlannedTensor make(const std::string& gguf, ConvertRole role, int layer, std::vector<int64_t> shape) const {
    PlannedTensor p;
    p.name = gguf;
    p.role = role;
    p.layer = layer;
    p.shape = std::move(shape);
    if (convert_type_is_mix(target_)) return p;  // typed later, in file order (apply_quant_mix)
    const TypeChoice tc = choose_tensor_type(target_, role, layer, static_cast<int>(c_.n_layer), p.shape[0],
                                             static_cast<int>(p.shape.size()), c_.tie_embeddings);
    p.type = tc.type;
    p.type_note = tc.note;
    return p;
  }

  static std::vector<int64_t> reversed(std::vector<int64_t> v) {
    std::reverse(v.begin(), v.end());
    return v;
  }

  std::vector<PlannedTensor>& out() { return out_; }
  const std::set<std::string>& used() const { return used_; }

 private:
  const HfModelConfig& c_;
  const SafetensorsModel& m_;
  ConvertType target_;
  std::vector<PlannedTensor> out_;
  std::set<std::string> used_;
};

// Rows [first, first + n) of a source tensor, as they are (no maps, no op).
Slab rows_of(const StTensor* src, int64_t first, int64_t n, int64_t row_len) {
  Slab s;
  s.src = src;
  s.first_row = first;
  s.n_rows = n;
  s.row_len = row_len;
  return s;
}

// Which spelling of the expert weights a layer uses.
struct ExpertNames {
  const char* gate;
  const char* up;
  const char* down;
};
constexpr ExpertNames kQwenNames{"gate_proj", "up_proj", "down_proj"};
constexpr ExpertNames kMixtralNames{"w1", "w3", "w2"};

// Finds a fused 3-D expert tensor, with or without a ".weight" suffix.
const StTensor* find_fused(const SafetensorsModel& m, const std::string& base) {
  if (const StTensor* t = m.find(base)) return t;
  return m.find(base + ".weight");
}

// Adds blk.L.ffn_{gate,up,down}_exps from either layout; returns the layout.
std::string add_experts(Builder& b, const HfModelConfig& c, const SafetensorsModel& m, int layer,
                        const std::string& moe) {
  const int64_t E = c.n_expert, H = c.n_embd, F = c.n_ff_exp;
  const std::string ex = moe + ".experts.";
  const std::string why_gu = "n_expert=" + std::to_string(E) + ", expert ff=" + std::to_string(F) +
                             ", hidden_size=" + std::to_string(H);

  PlannedTensor gate = b.make(expert_tensor_name(layer, ExpertPart::Gate), ConvertRole::FfnGate, layer, {H, F, E});
  PlannedTensor up = b.make(expert_tensor_name(layer, ExpertPart::Up), ConvertRole::FfnUp, layer, {H, F, E});
  PlannedTensor down = b.make(expert_tensor_name(layer, ExpertPart::Down), ConvertRole::FfnDown, layer, {F, H, E});
  std::string layout;

  const StTensor* gate_up = find_fused(m, ex + "gate_up_proj");
  const StTensor* gate_3d = find_fused(m, ex + "gate_proj");
  if (gate_up || gate_3d) {
    layout = "fused";
    const StTensor* down3 = find_fused(m, ex + "down_proj");
    if (!down3)
      throw Error("layer " + std::to_string(layer) + " stores its experts fused (" +
                  (gate_up ? gate_up->name : gate_3d->name) + ") but has no " + ex + "down_proj");
    b.check(*down3, {E, H, F}, "fused down_proj: " + why_gu);
    b.mark_used(down3->name);
    if (gate_up) {
      b.check(*gate_up, {E, 2 * F, H}, "fused gate_up_proj: " + why_gu);
      b.mark_used(gate_up->name);
      for (int64_t e = 0; e < E; ++e) {
        gate.slabs.push_back(rows_of(gate_up, e * 2 * F, F, H));      // gate rows come first
        up.slabs.push_back(rows_of(gate_up, e * 2 * F + F, F, H));    // then up rows
      }
    } else {
      const StTensor* up3 = find_fused(m, ex + "up_proj");
      if (!up3) throw Error("layer " + std::to_string(layer) + " has " + gate_3d->name + " but no " + ex + "up_proj");
      b.check(*gate_3d, {E, F, H}, "fused gate_proj: " + why_gu);
      b.check(*up3, {E, F, H}, "fused up_proj: " + why_gu);
      b.mark_used(gate_3d->name);
      b.mark_used(up3->name);
      for (int64_t e = 0; e < E; ++e) {
        gate.slabs.push_back(rows_of(gate_3d, e * F, F, H));
        up.slabs.push_back(rows_of(up3, e * F, F, H));
      }
    }
    for (int64_t e = 0; e < E; ++e) down.slabs.push_back(rows_of(down3, e * H, H, F));
  } else {
    layout = "per-expert";
    const ExpertNames& n = m.find(ex + "0." + kMixtralNames.gate + ".weight") ? kMixtralNames : kQwenNames;
    if (!m.find(ex + "0." + n.gate + ".weight"))
      throw Error("layer " + std::to_string(layer) + ": no expert weights found; looked for " + ex +
                  "0.gate_proj.weight / " + ex + "0.w1.weight (one tensor per expert) and " + ex +
                  "gate_up_proj (fused, transformers 5.x)");
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = ex + std::to_string(e) + ".";
      const std::string why = "expert " + std::to_string(e) + ": " + why_gu;
      const StTensor& g = b.take(p + n.gate + ".weight", {F, H}, why);
      const StTensor& u = b.take(p + n.up + ".weight", {F, H}, why);
      const StTensor& d = b.take(p + n.down + ".weight", {H, F}, why);
      gate.slabs.push_back(rows_of(&g, 0, F, H));
      up.slabs.push_back(rows_of(&u, 0, F, H));
      down.slabs.push_back(rows_of(&d, 0, H, F));
    }
  }
  b.out().push_back(std::move(gate));
  b.out().push_back(std::move(up));
  b.out().push_back(std::move(down));
  return layout;
}

// A llama-quantize preset over the whole plan: the rules count tensors (the
// i-th attn_v, the i-th ffn_down) and look at whether an output head exists,
// so they run once the plan is complete, in file order.
void apply_quant_mix(ConversionPlan& plan, const HfModelConfig& c, ConvertType target) {
  std::vector<std::string> names;
  for (const PlannedTensor& t : plan.tensors) names.push_back(t.name);
  MixModel mm;
  mm.n_layer = static_cast<int>(c.n_layer + plan.n_mtp);
  mm.n_expert = static_cast<int>(c.n_expert);
  mm.n_head = static_cast<int>(c.n_head);
  mm.n_head_kv = static_cast<int>(c.n_head_kv);
  MixPlanner planner(parse_quant_scheme(convert_type_name(target)), mm, names);
  for (PlannedTensor& t : plan.tensors) {
    const MixChoice m = planner.choose(t.name, t.shape, DType::F32);
    // A repacked MXFP4 tensor keeps its type (the planner still counts it).
    if (!t.slabs.empty() && t.slabs[0].is_mxfp4_repack()) continue;
    t.type = m.type;
    t.type_note = m.note;
  }
}

}  // namespace

std::vector<int64_t> tiled_head_map(int64_t n_k, int64_t n_v, int64_t head_dim) {
  std::vector<int64_t> m;
  for (int64_t j = 0; j < n_v; ++j)
    for (int64_t x = 0; x < head_dim; ++x) m.push_back(tiled_source_head(j, n_k, n_v) * head_dim + x);
  return m;
}

int64_t source_row_in_slab(const Slab& s, int64_t r) {
  if (!s.row_map.empty()) return s.row_map[static_cast<size_t>(r)];
  if (s.permute_heads <= 0) return r;
  const int64_t head_dim = s.n_rows / s.permute_heads;
  return (r / head_dim) * head_dim + permuted_head_row(r % head_dim, head_dim);
}

int64_t PlannedTensor::n_rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

uint64_t PlannedTensor::source_bytes() const {
  uint64_t n = 0;
  for (const Slab& s : slabs)
    n += s.is_mxfp4_repack() ? static_cast<uint64_t>(s.n_rows * s.row_len / 32 * 17)  // 16 code bytes + a scale
                             : static_cast<uint64_t>(s.n_rows * s.row_len * st_dtype_size(s.src->dtype));
  return n;
}

uint64_t PlannedTensor::output_bytes() const {
  return static_cast<uint64_t>(row_bytes(type, row_len()) * n_rows());
}

// Qwen3.5/3.6-MoE (GGUF qwen35moe). Every transformation the GGUF layout
// expects, as llama.cpp's converter documents them:
//   RMSNorm weights + 1 (the reference scales by 1 + w), except the Gated
//   DeltaNet's own gated norm (linear_attn.norm, which scales by w);
//   A_log -> ssm_a = -exp(A_log); dt_bias -> ssm_dt.bias;
//   conv1d [conv_dim, 1, K] -> ssm_conv1d {K, conv_dim};
//   value heads from grouped to tiled order (tensor_plan.h) in the V rows of
//   in_proj_qkv and the conv, in_proj_z, in_proj_a/b, A_log, dt_bias and the
//   columns of out_proj;
//   shared_expert_gate [1, H] -> ffn_gate_inp_shexp {H};
//   MTP blocks (mtp.layers.i.*) -> blk.{n_layer + i}.*, with mtp.fc ->
//   nextn.eh_proj and mtp.pre_fc_norm_{embedding,hidden}, mtp.norm ->
//   nextn.{enorm,hnorm,shared_head_norm}.
void plan_qwen35_layer(Builder& b, const HfModelConfig& c, const SafetensorsModel& m, int64_t L, const std::string& hf,
                       bool mtp, std::set<std::string>& layouts) {
  const int64_t H = c.n_embd, D = c.head_dim, QH = c.n_head * D, KH = c.n_head_kv * D;
  const std::string hdims = "hidden_size=" + std::to_string(H);
  const int layer = static_cast<int>(L);
  b.add_whole(gguf_name(c, layer, &LayerWeights::attn_norm), ConvertRole::Norm, layer, hf + "input_layernorm.weight", {H}, hdims, 0,
              ValueOp::AddOne);
  if (!mtp && c.is_linear_layer(L)) {
    const std::string la = hf + "linear_attn.";
    const int64_t nk = c.lin_k_heads, nv = c.lin_v_heads, dk = c.lin_head_k, dv = c.lin_head_v;
    const int64_t KD = nk * dk, VD = nv * dv, CD = 2 * KD + VD;
    const std::string ldims = "linear heads " + std::to_string(nk) + "/" + std::to_string(nv) + " of " +
                              std::to_string(dk) + "/" + std::to_string(dv);
    // Rows [q | k] stay, the V rows follow the tiled head order.
    std::vector<int64_t> qkv_rows(static_cast<size_t>(2 * KD));
    for (int64_t r = 0; r < 2 * KD; ++r) qkv_rows[static_cast<size_t>(r)] = r;
    for (int64_t r : tiled_head_map(nk, nv, dv)) qkv_rows.push_back(2 * KD + r);
    Slab qkv = b.whole_slab(la + "in_proj_qkv.weight", {CD, H}, ldims + ", " + hdims);
    qkv.row_map = qkv_rows;
    b.add_slab(gguf_name(c, layer, &LayerWeights::ssm_qkv), ConvertRole::AttnQ, layer, {H, CD}, std::move(qkv));
    Slab z = b.whole_slab(la + "in_proj_z.weight", {VD, H}, ldims + ", " + hdims);
    z.row_map = tiled_head_map(nk, nv, dv);
    b.add_slab(gguf_name(c, layer, &LayerWeights::ssm_z), ConvertRole::AttnV, layer, {H, VD}, std::move(z));
    for (const auto& [hf_name, field] :
         {std::pair{"in_proj_b", &LayerWeights::ssm_beta}, std::pair{"in_proj_a", &LayerWeights::ssm_alpha}}) {
      Slab ba = b.whole_slab(la + hf_name + ".weight", {nv, H}, ldims + ", " + hdims);
      ba.row_map = tiled_head_map(nk, nv, 1);
      b.add_slab(gguf_name(c, layer, field), ConvertRole::Router, layer, {H, nv}, std::move(ba));
    }
    Slab a = b.whole_slab(la + "A_log", {nv}, ldims);
    a.col_map = tiled_head_map(nk, nv, 1);
    a.op = ValueOp::NegExp;
    b.add_slab(gguf_name(c, layer, &LayerWeights::ssm_a), ConvertRole::Norm, layer, {nv}, std::move(a));
    Slab dt = b.whole_slab(la + "dt_bias", {nv}, ldims);
    dt.col_map = tiled_head_map(nk, nv, 1);
    b.add_slab(gguf_name(c, layer, &LayerWeights::ssm_dt), ConvertRole::Norm, layer, {nv}, std::move(dt));
    Slab conv = b.whole_slab(la + "conv1d.weight", {CD, 1, c.lin_conv_kernel}, ldims + ", linear_conv_kernel_dim");
    conv.row_map = qkv_rows;
    b.add_slab(gguf_name(c, layer, &LayerWeights::ssm_conv), ConvertRole::Norm, layer, {c.lin_conv_kernel, CD}, std::move(conv));
    b.add_whole(gguf_name(c, layer, &LayerWeights::ssm_norm), ConvertRole::Norm, layer, la + "norm.weight", {dv}, ldims);
    Slab out = b.whole_slab(la + "out_proj.weight", {H, VD}, ldims + ", " + hdims);
    out.col_map = tiled_head_map(nk, nv, dv);
    b.add_slab(gguf_name(c, layer, &LayerWeights::ssm_out), ConvertRole::AttnOutput, layer, {VD, H}, std::move(out));
  } else {
    const std::string at = hf + "self_attn.";
    const std::string qdims = "num_attention_heads=" + std::to_string(c.n_head) + ", head_dim=" + std::to_string(D);
    b.add_whole(gguf_name(c, layer, &LayerWeights::wq), ConvertRole::AttnQ, layer, at + "q_proj.weight", {2 * QH, H},
                qdims + " (query and output gate), " + hdims);
    b.add_whole(gguf_name(c, layer, &LayerWeights::wk), ConvertRole::AttnK, layer, at + "k_proj.weight", {KH, H}, hdims);
    b.add_whole(gguf_name(c, layer, &LayerWeights::wv), ConvertRole::AttnV, layer, at + "v_proj.weight", {KH, H}, hdims);
    b.add_whole(gguf_name(c, layer, &LayerWeights::wo), ConvertRole::AttnOutput, layer, at + "o_proj.weight", {H, QH}, qdims);
    b.add_whole(gguf_name(c, layer, &LayerWeights::q_norm), ConvertRole::Norm, layer, at + "q_norm.weight", {D}, "head_dim", 0,
                ValueOp::AddOne);
    b.add_whole(gguf_name(c, layer, &LayerWeights::k_norm), ConvertRole::Norm, layer, at + "k_norm.weight", {D}, "head_dim", 0,
                ValueOp::AddOne);
  }
  b.add_whole(gguf_name(c, layer, &LayerWeights::ffn_norm), ConvertRole::Norm, layer, hf + "post_attention_layernorm.weight", {H},
              hdims, 0, ValueOp::AddOne);
  const std::string moe = hf + "mlp";
  b.add_whole(gguf_name(c, layer, &LayerWeights::router), ConvertRole::Router, layer, moe + ".gate.weight", {c.n_expert, H},
              "n_expert=" + std::to_string(c.n_expert) + ", " + hdims);
  layouts.insert(add_experts(b, c, m, layer, moe));
  const std::string sh = moe + ".shared_expert.";
  const std::string sdims = "shared_expert_intermediate_size=" + std::to_string(c.n_ff_shexp) + ", " + hdims;
  b.add_whole(gguf_name(c, layer, &LayerWeights::shexp_gate), ConvertRole::FfnGate, layer, sh + "gate_proj.weight", {c.n_ff_shexp, H}, sdims);
  b.add_whole(gguf_name(c, layer, &LayerWeights::shexp_up), ConvertRole::FfnUp, layer, sh + "up_proj.weight", {c.n_ff_shexp, H}, sdims);
  b.add_whole(gguf_name(c, layer, &LayerWeights::shexp_down), ConvertRole::FfnDown, layer, sh + "down_proj.weight", {H, c.n_ff_shexp}, sdims);
  Slab sg = b.whole_slab(moe + ".shared_expert_gate.weight", {1, H}, "one gate row, " + hdims);
  b.add_slab(gguf_name(c, layer, &LayerWeights::shexp_router), ConvertRole::Router, layer, {H}, std::move(sg));
}

namespace {

// A strided gather over a whole source tensor (tensor_plan.h: Slab).
Slab gather(const StTensor& src, int64_t base, int64_t n_rows, int64_t row_len, int64_t row_step, int64_t elem_step) {
  Slab s;
  s.src = &src;
  s.n_rows = n_rows;
  s.row_len = row_len;
  s.gather_base = base;
  s.gather_row = row_step;
  s.gather_elem = elem_step;
  return s;
}

// gpt-oss's MoE block: the router with its bias, and experts stored
// transposed ([E, in, out]) with gate and up interleaved (gate = even output
// columns of gate_up_proj, up = odd), each with a bias.
void add_gpt_oss_moe(Builder& b, const HfModelConfig& c, int layer, const std::string& hf) {
  const int64_t E = c.n_expert, H = c.n_embd, F = c.n_ff_exp;
  const std::string mlp = hf + "mlp.", ex = mlp + "experts.";
  const std::string why = "num_local_experts=" + std::to_string(E) + ", intermediate_size=" + std::to_string(F) +
                          ", hidden_size=" + std::to_string(H);
  b.add_whole(gguf_name(c, layer, &LayerWeights::router), ConvertRole::Router, layer, mlp + "router.weight", {E, H}, why);
  b.add_whole(gguf_name(c, layer, &LayerWeights::router_b), ConvertRole::Bias, layer, mlp + "router.bias", {E}, why);
  const StTensor& gub = b.take(ex + "gate_up_proj_bias", {E, 2 * F}, why);
  PlannedTensor gate = b.make(expert_tensor_name(layer, ExpertPart::Gate), ConvertRole::FfnGate, layer, {H, F, E});
  PlannedTensor up = b.make(expert_tensor_name(layer, ExpertPart::Up), ConvertRole::FfnUp, layer, {H, F, E});
  PlannedTensor down = b.make(expert_tensor_name(layer, ExpertPart::Down), ConvertRole::FfnDown, layer, {F, H, E});
  if (c.mxfp4_experts) {
    // [E, out, in/32, 16] blocks, [E, out, in/32] scales; gate/up rows interleaved.
    if (H % 32 != 0 || F % 32 != 0) throw Error("MXFP4 experts need hidden_size and intermediate_size multiples of 32");
    const StTensor& gub_q = b.take_u8(ex + "gate_up_proj_blocks", {E, 2 * F, H / 32, 16}, why);
    const StTensor& gus = b.take_u8(ex + "gate_up_proj_scales", {E, 2 * F, H / 32}, why);
    const StTensor& dnb = b.take_u8(ex + "down_proj_blocks", {E, H, F / 32, 16}, why);
    const StTensor& dns = b.take_u8(ex + "down_proj_scales", {E, H, F / 32}, why);
    auto repack = [](const StTensor& blocks, const StTensor& scales, int64_t row0, int64_t n_rows, int64_t row_len,
                     int64_t step) {
      Slab sl;
      sl.src = &blocks;
      sl.mxfp4_scales = &scales;
      sl.n_rows = n_rows;
      sl.row_len = row_len;
      sl.gather_base = row0;
      sl.gather_row = step;
      return sl;
    };
    for (int64_t e = 0; e < E; ++e) {
      gate.slabs.push_back(repack(gub_q, gus, e * 2 * F, F, H, 2));
      up.slabs.push_back(repack(gub_q, gus, e * 2 * F + 1, F, H, 2));
      down.slabs.push_back(repack(dnb, dns, e * H, H, F, 1));
    }
    for (PlannedTensor* t : {&gate, &up, &down}) {
      t->type = DType::MXFP4;
      t->type_note = "MXFP4 in the checkpoint: repacked as it is";
    }
  } else {
    const StTensor& gu = b.take(ex + "gate_up_proj", {E, H, 2 * F}, why);
    const StTensor& dn = b.take(ex + "down_proj", {E, F, H}, why);
    for (int64_t e = 0; e < E; ++e) {
      // Row f of expert e's gate: gate_up_proj[e, :, 2f] (up: 2f + 1).
      gate.slabs.push_back(gather(gu, e * H * 2 * F, F, H, 2, 2 * F));
      up.slabs.push_back(gather(gu, e * H * 2 * F + 1, F, H, 2, 2 * F));
      // Row h of expert e's down: down_proj[e, :, h].
      down.slabs.push_back(gather(dn, e * F * H, H, F, 1, H));
    }
  }
  PlannedTensor gate_b = b.make(expert_tensor_name(layer, ExpertPart::GateBias), ConvertRole::Bias, layer, {F, E});
  PlannedTensor up_b = b.make(expert_tensor_name(layer, ExpertPart::UpBias), ConvertRole::Bias, layer, {F, E});
  gate_b.slabs.push_back(gather(gub, 0, E, F, 2 * F, 2));
  up_b.slabs.push_back(gather(gub, 1, E, F, 2 * F, 2));
  b.out().push_back(std::move(gate));
  b.out().push_back(std::move(up));
  b.out().push_back(std::move(down));
  b.out().push_back(std::move(gate_b));
  b.out().push_back(std::move(up_b));
  b.add_whole(expert_tensor_name(layer, ExpertPart::DownBias), ConvertRole::Bias, layer, ex + "down_proj_bias", {E, H}, why);
}

// The GGUF model the plan writes, as the loader will read it back: what the
// tensor table (model/tensor_table.h) is derived from.
ModelConfig gguf_model_config(const HfModelConfig& c, int64_t n_mtp) {
  ModelConfig g;
  g.arch_name = c.gguf_arch;
  g.arch = &arch_info(c.gguf_arch);
  g.n_layer = static_cast<int>(c.n_layer);
  g.n_layer_mtp = static_cast<int>(n_mtp);
  g.n_embd = c.n_embd;
  g.n_head = static_cast<int>(c.n_head);
  g.n_head_kv = static_cast<int>(c.n_head_kv);
  g.head_dim = static_cast<int>(c.head_dim);
  g.n_vocab = c.n_vocab;
  g.n_ff = c.n_ff;
  g.n_expert = static_cast<int>(c.n_expert);
  g.n_ff_exp = c.n_ff_exp;
  g.n_ff_shexp = c.n_ff_shexp;
  if (g.arch->linear_attention) {
    for (int64_t il = 0; il < c.n_layer; ++il) g.linear_layer.push_back(c.is_linear_layer(il));
    g.lin.conv_kernel = static_cast<int>(c.lin_conv_kernel);
    g.lin.n_k_heads = static_cast<int>(c.lin_k_heads);
    g.lin.n_v_heads = static_cast<int>(c.lin_v_heads);
    g.lin.head_k = static_cast<int>(c.lin_head_k);
    g.lin.head_v = static_cast<int>(c.lin_head_v);
  }
  return g;
}

// The planned tensors in the tensor table's order (the order gen writes), each
// with the table's shape: the table is walked and each entry takes the tensor
// planned under its name. A table entry nothing planned, or a planned tensor
// the table does not list (a checkpoint part moestream's recipe for the
// architecture would not read), is an error naming it.
std::vector<PlannedTensor> in_table_order(const HfModelConfig& c, int64_t n_mtp, std::vector<PlannedTensor> planned) {
  std::map<std::string, PlannedTensor> by_name;
  for (PlannedTensor& t : planned) {
    const std::string name = t.name;
    if (!by_name.emplace(name, std::move(t)).second) throw Error("conversion plan: tensor '" + name + "' planned twice");
  }
  std::vector<PlannedTensor> out;
  for (const LayerTensorSpec& spec :
       model_tensor_table(gguf_model_config(c, n_mtp), ExpertLayout::Stacked, c.tie_embeddings)) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end())
      throw Error("conversion plan: the tensor table of '" + c.gguf_arch + "' lists '" + spec.name +
                  "', which nothing in the checkpoint maps to");
    if (it->second.shape != spec.shape)
      throw Error("conversion plan: '" + spec.name + "' is planned as " + shape_str(it->second.shape) +
                  " but the tensor table of '" + c.gguf_arch + "' expects " + shape_str(spec.shape));
    out.push_back(std::move(it->second));
    by_name.erase(it);
  }
  if (!by_name.empty())
    throw Error("the checkpoint has '" + by_name.begin()->first + "' (GGUF name), which moestream's '" + c.gguf_arch +
                "' model does not read (e.g. attention_bias on an architecture without attention biases); it cannot "
                "be converted");
  return out;
}

}  // namespace

ConversionPlan plan_conversion(const HfModelConfig& c, const SafetensorsModel& m, ConvertType target) {
  Builder b(c, m, target);
  const int64_t H = c.n_embd, V = c.n_vocab, D = c.head_dim;
  const int64_t QH = c.n_head * D, KH = c.n_head_kv * D;
  const std::string hdims = "hidden_size=" + std::to_string(H);
  const std::string qdims = "num_attention_heads=" + std::to_string(c.n_head) + ", head_dim=" + std::to_string(D);
  const std::string kdims = "num_key_value_heads=" + std::to_string(c.n_head_kv) + ", head_dim=" + std::to_string(D);

  const bool q35 = c.arch == HfArch::Qwen35Moe;
  b.add_whole("token_embd.weight", ConvertRole::TokenEmbd, -1, c.prefix + "embed_tokens.weight", {V, H},
              "vocab_size=" + std::to_string(V) + ", " + hdims);
  b.add_whole("output_norm.weight", ConvertRole::Norm, -1, c.prefix + "norm.weight", {H}, hdims, 0,
              q35 ? ValueOp::AddOne : ValueOp::None);
  ConversionPlan plan;
  if (!c.tie_embeddings) {
    b.add_whole("output.weight", ConvertRole::Output, -1, "lm_head.weight", {V, H},
                "vocab_size=" + std::to_string(V) + ", " + hdims + ", tie_word_embeddings=false");
  } else if (m.find("lm_head.weight")) {
    // Tied: the head is the embedding; a stored copy is redundant.
    b.mark_used("lm_head.weight");
    plan.ignored.push_back("lm_head.weight (tie_word_embeddings=true: the output head is token_embd)");
  }

  std::set<std::string> layouts;
  if (q35) {
    for (int64_t L = 0; L < c.n_layer; ++L)
      plan_qwen35_layer(b, c, m, L, c.prefix + "layers." + std::to_string(L) + ".", false, layouts);
    // MTP blocks, when the checkpoint has them (Qwen3_5MoeForCausalLM checkpoints saved by transformers do not).
    const int64_t n_mtp = m.find("mtp.fc.weight") ? c.n_mtp : 0;
    for (int64_t i = 0; i < n_mtp; ++i) {
      const int64_t L = c.n_layer + i;
      const int l = static_cast<int>(L);
      plan_qwen35_layer(b, c, m, L, "mtp.layers." + std::to_string(i) + ".", true, layouts);
      b.add_whole(mtp_tensor_name(l, &MtpWeights::eh_proj), ConvertRole::AttnOutput, l, "mtp.fc.weight", {H, 2 * H},
                  "[embedding | hidden] -> " + hdims);
      b.add_whole(mtp_tensor_name(l, &MtpWeights::enorm), ConvertRole::Norm, l, "mtp.pre_fc_norm_embedding.weight", {H},
                  hdims, 0, ValueOp::AddOne);
      b.add_whole(mtp_tensor_name(l, &MtpWeights::hnorm), ConvertRole::Norm, l, "mtp.pre_fc_norm_hidden.weight", {H},
                  hdims, 0, ValueOp::AddOne);
      b.add_whole(mtp_tensor_name(l, &MtpWeights::shared_head_norm), ConvertRole::Norm, l, "mtp.norm.weight", {H}, hdims,
                  0, ValueOp::AddOne);
    }
    plan.n_mtp = n_mtp;
    if (n_mtp == 0 && c.n_mtp > 0) plan.ignored.push_back("MTP blocks (config has mtp_num_hidden_layers, no mtp.* tensors)");
  }
  for (int L = 0; L < (q35 ? 0 : c.n_layer); ++L) {
    const std::string hf = "model.layers." + std::to_string(L) + ".";
    const std::string at = hf + "self_attn.";
    const int64_t qperm = c.permute_qk ? c.n_head : 0;
    const int64_t kperm = c.permute_qk ? c.n_head_kv : 0;

    b.add_whole(gguf_name(c, L, &LayerWeights::attn_norm), ConvertRole::Norm, L, hf + "input_layernorm.weight", {H}, hdims);
    b.add_whole(gguf_name(c, L, &LayerWeights::wq), ConvertRole::AttnQ, L, at + "q_proj.weight", {QH, H}, qdims + ", " + hdims, qperm);
    b.add_whole(gguf_name(c, L, &LayerWeights::wk), ConvertRole::AttnK, L, at + "k_proj.weight", {KH, H}, kdims + ", " + hdims, kperm);
    b.add_whole(gguf_name(c, L, &LayerWeights::wv), ConvertRole::AttnV, L, at + "v_proj.weight", {KH, H}, kdims + ", " + hdims);
    b.add_whole(gguf_name(c, L, &LayerWeights::wo), ConvertRole::AttnOutput, L, at + "o_proj.weight", {H, QH},
                qdims + ", " + hdims);
    if (c.attn_bias) {
      b.add_whole(gguf_name(c, L, &LayerWeights::bq), ConvertRole::Bias, L, at + "q_proj.bias", {QH}, qdims, qperm);
      b.add_whole(gguf_name(c, L, &LayerWeights::bk), ConvertRole::Bias, L, at + "k_proj.bias", {KH}, kdims, kperm);
      b.add_whole(gguf_name(c, L, &LayerWeights::bv), ConvertRole::Bias, L, at + "v_proj.bias", {KH}, kdims);
    }
    if (c.attn_out_bias) b.add_whole(gguf_name(c, L, &LayerWeights::bo), ConvertRole::Bias, L, at + "o_proj.bias", {H}, hdims);
    if (c.qk_norm) {
      b.add_whole(gguf_name(c, L, &LayerWeights::q_norm), ConvertRole::Norm, L, at + "q_norm.weight", {D}, "head_dim");
      b.add_whole(gguf_name(c, L, &LayerWeights::k_norm), ConvertRole::Norm, L, at + "k_norm.weight", {D}, "head_dim");
    }
    const bool gpt_oss = c.arch == HfArch::GptOss;
    b.add_whole(gguf_name(c, L, &LayerWeights::ffn_norm), ConvertRole::Norm, L,
                hf + "post_attention_layernorm.weight", {H}, hdims);
    if (gpt_oss) {
      b.add_whole(gguf_name(c, L, &LayerWeights::attn_sinks), ConvertRole::Norm, L, at + "sinks", {c.n_head}, qdims);
      add_gpt_oss_moe(b, c, L, hf);
      layouts.insert("fused");
    } else if (c.is_moe()) {
      // Mixtral's 4.x checkpoints call the block block_sparse_moe; 5.x and Qwen call it mlp.
      std::string moe = hf + "mlp";
      if (c.arch == HfArch::Mixtral && m.find(hf + "block_sparse_moe.gate.weight")) moe = hf + "block_sparse_moe";
      b.add_whole(gguf_name(c, L, &LayerWeights::router), ConvertRole::Router, L, moe + ".gate.weight", {c.n_expert, H},
                  "n_expert=" + std::to_string(c.n_expert) + ", " + hdims);
      layouts.insert(add_experts(b, c, m, L, moe));
    } else {
      const std::string mlp = hf + "mlp.";
      const std::string fdims = "intermediate_size=" + std::to_string(c.n_ff) + ", " + hdims;
      b.add_whole(gguf_name(c, L, &LayerWeights::ffn_gate), ConvertRole::FfnGate, L, mlp + "gate_proj.weight", {c.n_ff, H}, fdims);
      b.add_whole(gguf_name(c, L, &LayerWeights::ffn_up), ConvertRole::FfnUp, L, mlp + "up_proj.weight", {c.n_ff, H}, fdims);
      b.add_whole(gguf_name(c, L, &LayerWeights::ffn_down), ConvertRole::FfnDown, L, mlp + "down_proj.weight", {H, c.n_ff}, fdims);
    }
  }

  plan.tensors = in_table_order(c, plan.n_mtp, std::move(b.out()));
  if (convert_type_is_mix(target)) apply_quant_mix(plan, c, target);
  if (layouts.size() == 1) plan.expert_layout = *layouts.begin();
  else if (layouts.size() > 1) plan.expert_layout = "mixed";
  for (const std::string& name : m.names()) {
    if (b.used().count(name)) continue;
    // Precomputed RoPE tables some older checkpoints carry; derived from the config.
    if (name.ends_with("rotary_emb.inv_freq")) {
      plan.ignored.push_back(name + " (RoPE table, recomputed from rope_theta)");
      continue;
    }
    // Qwen3.5's image-text checkpoints: the vision tower is not part of the text model.
    if (q35 && (name.starts_with("model.visual.") || name.starts_with("visual."))) {
      plan.ignored.push_back(name + " (vision tower)");
      continue;
    }
    plan.unused.push_back(name);
  }
  for (const PlannedTensor& t : plan.tensors) {
    plan.source_bytes += t.source_bytes();
    plan.output_bytes += t.output_bytes();
  }
  return plan;
}

}  // namespace ms
