#include "model/tensor_roles.h"

#include <algorithm>
#include <map>

#include "format/gguf.h"
#include "model/hparams.h"
#include "util/error.h"

namespace ms {
namespace {

struct RoleName {
  TensorRole role;
  const char* name;  // as printed by role_name()
  const char* part;  // the GGUF name part (after blk.N.), or a global tensor's stem
};

// One row per role: the printed name and the GGUF name part it comes from.
constexpr RoleName kRoles[] = {
    {TensorRole::TokenEmbd, "token_embd", "token_embd"},
    {TensorRole::Output, "output", "output"},
    {TensorRole::OutputNorm, "output_norm", "output_norm"},
    {TensorRole::AttnNorm, "attn_norm", "attn_norm"},
    {TensorRole::AttnQ, "attn_q", "attn_q"},
    {TensorRole::AttnK, "attn_k", "attn_k"},
    {TensorRole::AttnV, "attn_v", "attn_v"},
    {TensorRole::AttnQKV, "attn_qkv", "attn_qkv"},
    {TensorRole::AttnOutput, "attn_output", "attn_output"},
    {TensorRole::AttnQNorm, "attn_q_norm", "attn_q_norm"},
    {TensorRole::AttnKNorm, "attn_k_norm", "attn_k_norm"},
    {TensorRole::AttnPostNorm, "attn_post_norm", "post_attention_norm"},
    {TensorRole::AttnSinks, "attn_sinks", "attn_sinks"},
    {TensorRole::FfnNorm, "ffn_norm", "ffn_norm"},
    {TensorRole::FfnPostNorm, "ffn_post_norm", "post_ffw_norm"},
    {TensorRole::Router, "router", "ffn_gate_inp"},
    {TensorRole::Router, "router", "exp_probs_b"},  // routing bias (DeepSeek-V3 style)
    {TensorRole::ExpertGate, "expert_gate", "ffn_gate_exps"},
    {TensorRole::ExpertUp, "expert_up", "ffn_up_exps"},
    {TensorRole::ExpertDown, "expert_down", "ffn_down_exps"},
    {TensorRole::ExpertGateUp, "expert_gate_up", "ffn_gate_up_exps"},
    {TensorRole::SharedGate, "shared_gate", "ffn_gate_shexp"},
    {TensorRole::SharedUp, "shared_up", "ffn_up_shexp"},
    {TensorRole::SharedDown, "shared_down", "ffn_down_shexp"},
    {TensorRole::SharedRouter, "shared_router", "ffn_gate_inp_shexp"},
    {TensorRole::DenseGate, "ffn_gate", "ffn_gate"},
    {TensorRole::DenseUp, "ffn_up", "ffn_up"},
    {TensorRole::DenseDown, "ffn_down", "ffn_down"},
    {TensorRole::Other, "other", ""},
};

// Layer and expert indices larger than this are not model tensors we know.
constexpr int kMaxIndex = 1 << 20;

// Parses a decimal index (no sign, no leading '+'); -1 if not one.
int parse_index(std::string_view s) {
  if (s.empty() || s.size() > 7) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v <= kMaxIndex ? v : -1;
}

TensorRole role_of_part(std::string_view part, bool global) {
  for (const RoleName& r : kRoles) {
    if (r.role == TensorRole::Other) break;
    const bool is_global = r.role == TensorRole::TokenEmbd || r.role == TensorRole::Output ||
                           r.role == TensorRole::OutputNorm;
    if (is_global == global && part == r.part) return r.role;
  }
  return TensorRole::Other;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "{";
  for (size_t k = 0; k < s.size(); ++k) {
    if (k) out += ", ";
    out += std::to_string(s[k]);
  }
  return out + "}";
}

}  // namespace

const char* role_name(TensorRole r) {
  for (const RoleName& x : kRoles)
    if (x.role == r) return x.name;
  return "other";
}

TensorClass classify_tensor(std::string_view name) {
  TensorClass c;
  // Split into dot-separated components.
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  auto join_from = [&](size_t k) {
    std::string s;
    for (size_t j = k; j < parts.size(); ++j) {
      if (j > k) s += '.';
      s.append(parts[j]);
    }
    return s;
  };
  if (parts.size() >= 3 && parts[0] == "blk" && parse_index(parts[1]) >= 0) {
    c.layer = parse_index(parts[1]);
    const std::string_view part = parts[2];
    c.role = role_of_part(part, false);
    size_t rest = 3;
    // Older per-expert layout: blk.N.ffn_gate.E.weight.
    const bool dense_ffn = c.role == TensorRole::DenseGate || c.role == TensorRole::DenseUp ||
                           c.role == TensorRole::DenseDown;
    if (dense_ffn && parts.size() >= 5 && parse_index(parts[3]) >= 0) {
      c.expert = parse_index(parts[3]);
      c.role = c.role == TensorRole::DenseGate ? TensorRole::ExpertGate
               : c.role == TensorRole::DenseUp ? TensorRole::ExpertUp
                                                : TensorRole::ExpertDown;
      rest = 4;
    }
    c.suffix = join_from(rest);
    return c;
  }
  if (parts.size() >= 2) {
    c.role = role_of_part(parts[0], true);
    c.suffix = join_from(1);
  }
  return c;
}

WeightSplit split_weights(const GgufFile& f) {
  WeightSplit s;
  // Per layer: the expert count of stacked tensors, each expert's share of
  // them, and the bytes of per-expert tensors by expert.
  struct Acc {
    int64_t stacked_n_expert = 0;
    std::string stacked_from;  // the tensor that set stacked_n_expert
    uint64_t stacked_share = 0;
    std::map<int, uint64_t> per_expert;
  };
  std::map<int, Acc> acc;
  int max_layer = -1;
  for (const GgufTensorInfo& t : f.tensors()) {
    const TensorClass c = classify_tensor(t.name);
    if (c.layer < 0) {
      s.global_bytes += t.nbytes;
      ++s.n_global_tensors;
      continue;
    }
    max_layer = std::max(max_layer, c.layer);
    if (static_cast<int>(s.layers.size()) <= c.layer) s.layers.resize(static_cast<size_t>(c.layer) + 1);
    LayerSplit& l = s.layers[static_cast<size_t>(c.layer)];
    // Routed experts' biases (gpt-oss: one f32 row per expert) are dense
    // bytes: every backend keeps them resident, indexed by expert id, and the
    // tiers move only the matrices (cuda/expert_slots.h).
    if (!c.is_routed_expert() || c.suffix == "bias") {
      l.dense_bytes += t.nbytes;
      ++l.n_dense_tensors;
      continue;
    }
    l.expert_bytes += t.nbytes;
    ++l.n_expert_tensors;
    Acc& a = acc[c.layer];
    if (c.expert >= 0) {
      a.per_expert[c.expert] += t.nbytes;
      continue;
    }
    // Stacked: the experts are the last dimension (3-D weights, 2-D biases).
    const int64_t n = t.shape.size() >= 2 ? t.shape.back() : 1;
    if (a.stacked_n_expert != 0 && a.stacked_n_expert != n)
      throw Error(f.path() + ": tensor '" + t.name + "' " + shape_str(t.shape) + " holds " + std::to_string(n) +
                  " experts but '" + a.stacked_from + "' in the same layer holds " +
                  std::to_string(a.stacked_n_expert));
    a.stacked_n_expert = n;
    a.stacked_from = t.name;
    a.stacked_share += t.nbytes / static_cast<uint64_t>(n);
  }
  for (size_t il = 0; il < s.layers.size(); ++il) {
    LayerSplit& l = s.layers[il];
    l.layer = static_cast<int>(il);
    if (auto it = acc.find(static_cast<int>(il)); it != acc.end()) {
      const Acc& a = it->second;
      uint64_t largest_per_expert = 0;
      int64_t n = a.stacked_n_expert;
      for (const auto& [e, bytes] : a.per_expert) {
        largest_per_expert = std::max(largest_per_expert, bytes);
        n = std::max<int64_t>(n, e + 1);
      }
      l.n_expert = n;
      l.one_expert_bytes = a.stacked_share + largest_per_expert;
    }
    s.dense_bytes += l.dense_bytes;
    s.expert_bytes += l.expert_bytes;
    s.total_experts += l.n_expert;
    s.one_expert_bytes = std::max(s.one_expert_bytes, l.one_expert_bytes);
  }
  s.dense_bytes += s.global_bytes;
  return s;
}

uint64_t vram_reserve_bytes(int64_t n_vocab) {
  return kVramFixedReserve + static_cast<uint64_t>(std::max<int64_t>(n_vocab, 0)) * 4 * kVramLogitRows;
}

VramPlan vram_needs(const WeightSplit& split, const ModelHParams& hp, int64_t n_ctx, int kv_bytes_per_32) {
  VramPlan v;
  v.n_ctx = n_ctx;
  v.dense_bytes = split.dense_bytes;
  // The sequence state: K/V of the attention layers plus the fixed-size
  // recurrent state of linear-attention layers (hybrids).
  v.kv_bytes = hp.kv_cache_bytes(n_ctx, kv_bytes_per_32) + hp.recurrent_state_bytes();
  v.reserve_bytes = vram_reserve_bytes(hp.n_vocab);
  v.minimum_bytes = v.dense_bytes + v.kv_bytes + v.reserve_bytes;
  v.everything_bytes = v.minimum_bytes + split.expert_bytes;
  v.total_experts = split.total_experts;
  return v;
}

VramPlan plan_vram(const WeightSplit& split, const ModelHParams& hp, uint64_t budget, int64_t n_ctx,
                   int kv_bytes_per_32) {
  VramPlan v = vram_needs(split, hp, n_ctx, kv_bytes_per_32);
  v.budget = budget;
  v.fits_minimum = budget >= v.minimum_bytes;
  v.fits_everything = budget >= v.everything_bytes;
  if (!v.fits_minimum) {
    v.shortfall = v.minimum_bytes - budget;
    return v;
  }
  v.room = budget - v.minimum_bytes;
  if (split.one_expert_bytes > 0)
    v.experts_fit = std::min<int64_t>(split.total_experts, static_cast<int64_t>(v.room / split.one_expert_bytes));
  if (v.fits_everything) v.experts_fit = split.total_experts;
  v.fraction = split.total_experts > 0 ? static_cast<double>(v.experts_fit) / static_cast<double>(split.total_experts) : 0;
  uint64_t used = 0;
  for (const LayerSplit& l : split.layers) {
    if (l.expert_bytes == 0) continue;
    if (used + l.expert_bytes > v.room) break;
    used += l.expert_bytes;
    ++v.layers_fit;
  }
  return v;
}

}  // namespace ms
