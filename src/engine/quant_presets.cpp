#include "engine/quant_presets.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iterator>

#include "util/error.h"

namespace ms {
namespace {

// llama.cpp's LLAMA_FTYPE_* numbers (include/llama.h), which GGUF files carry
// as general.file_type.
enum Ftype : int {
  F_F32 = 0, F_F16 = 1, F_Q4_0 = 2, F_Q4_1 = 3, F_Q8_0 = 7, F_Q5_0 = 8, F_Q5_1 = 9, F_Q2_K = 10,
  F_Q3_K_S = 11, F_Q3_K_M = 12, F_Q3_K_L = 13, F_Q4_K_S = 14, F_Q4_K_M = 15, F_Q5_K_S = 16, F_Q5_K_M = 17,
  F_Q6_K = 18, F_IQ2_XXS = 19, F_IQ2_XS = 20, F_Q2_K_S = 21, F_IQ3_XS = 22, F_IQ3_XXS = 23, F_IQ1_S = 24,
  F_IQ4_NL = 25, F_IQ3_S = 26, F_IQ3_M = 27, F_IQ2_S = 28, F_IQ2_M = 29, F_IQ4_XS = 30, F_IQ1_M = 31,
  F_BF16 = 32, F_TQ1_0 = 36, F_TQ2_0 = 37, F_MXFP4_MOE = 38,
};

struct PresetRow {
  const char* name;
  Ftype ftype;
  DType base;  // the type every tensor gets unless a rule says otherwise
};

// llama-quantize's presets and their default types (llama_ftype_get_default_type).
constexpr PresetRow kPresets[] = {
    {"f32", F_F32, DType::F32},           {"f16", F_F16, DType::F16},
    {"bf16", F_BF16, DType::BF16},        {"q8_0", F_Q8_0, DType::Q8_0},
    {"q4_0", F_Q4_0, DType::Q4_0},        {"q4_1", F_Q4_1, DType::Q4_1},
    {"q5_0", F_Q5_0, DType::Q5_0},        {"q5_1", F_Q5_1, DType::Q5_1},
    {"q2_k", F_Q2_K, DType::Q2_K},        {"q2_k_s", F_Q2_K_S, DType::Q2_K},
    {"q3_k_s", F_Q3_K_S, DType::Q3_K},    {"q3_k_m", F_Q3_K_M, DType::Q3_K},
    {"q3_k_l", F_Q3_K_L, DType::Q3_K},    {"q4_k_s", F_Q4_K_S, DType::Q4_K},
    {"q4_k_m", F_Q4_K_M, DType::Q4_K},    {"q5_k_s", F_Q5_K_S, DType::Q5_K},
    {"q5_k_m", F_Q5_K_M, DType::Q5_K},    {"q6_k", F_Q6_K, DType::Q6_K},
    {"iq4_nl", F_IQ4_NL, DType::IQ4_NL},  {"iq4_xs", F_IQ4_XS, DType::IQ4_XS},
    {"iq3_m", F_IQ3_M, DType::IQ3_S},     {"iq3_s", F_IQ3_S, DType::IQ3_S},
    {"iq3_xs", F_IQ3_XS, DType::IQ3_S},   {"iq3_xxs", F_IQ3_XXS, DType::IQ3_XXS},
    {"iq2_m", F_IQ2_M, DType::IQ2_S},     {"iq2_s", F_IQ2_S, DType::IQ2_XS},
    {"iq2_xs", F_IQ2_XS, DType::IQ2_XS},  {"iq2_xxs", F_IQ2_XXS, DType::IQ2_XXS},
    {"iq1_m", F_IQ1_M, DType::IQ1_M},     {"iq1_s", F_IQ1_S, DType::IQ1_S},
    {"tq2_0", F_TQ2_0, DType::TQ2_0},     {"tq1_0", F_TQ1_0, DType::TQ1_0},
    {"mxfp4_moe", F_MXFP4_MOE, DType::MXFP4},
};

// UD-style mixes: routed experts low-bit, everything else Q8_0, the head Q6_K.
struct UdRow {
  const char* name;
  Ftype ftype;  // general.file_type: the preset of the experts' bits
  DType gate_up, down, token_embd;
};
constexpr UdRow kUd[] = {
    {"ud_q2_k_xl", F_Q2_K, DType::Q2_K, DType::Q3_K, DType::Q4_K},
    {"ud_iq2_m", F_IQ2_M, DType::IQ2_S, DType::IQ3_S, DType::Q4_K},
};

// Types a weight can be stored in (single types and --pure); not the
// activation formats (q8_1, q8_K) or integer types.
constexpr DType kAllTypes[] = {
    DType::F32,    DType::F16,   DType::BF16,    DType::Q4_0,   DType::Q4_1,   DType::Q5_0,   DType::Q5_1,
    DType::Q8_0,   DType::Q2_K,  DType::Q3_K,    DType::Q4_K,   DType::Q5_K,   DType::Q6_K,   DType::IQ2_XXS,
    DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,  DType::IQ1_S,  DType::IQ1_M,  DType::IQ4_NL,
    DType::IQ4_XS, DType::TQ1_0, DType::TQ2_0,   DType::MXFP4,
};

std::string canonical(std::string s) {
  for (char& c : s) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string lower_type_name(DType t) { return canonical(type_name(t)); }

const PresetRow* find_preset(const std::string& n) {
  for (const PresetRow& p : kPresets)
    if (n == p.name) return &p;
  return nullptr;
}

// The closest llama ftype of a single type (for general.file_type): the
// preset of the same name, else the first whose default it is (q4_K: Q4_K_S,
// which is also what uniform q4_K with a q6_K head is closest to).
int ftype_of_type(DType t) {
  if (const PresetRow* p = find_preset(lower_type_name(t))) return p->ftype;
  for (const PresetRow& p : kPresets)
    if (p.base == t) return p.ftype;
  return F_F16;
}

// ---------------------------------------------------------------- categories
// llama.cpp's broad tensor categories, by name (llama-quant.cpp's
// tensor_get_category; the first match wins).
enum class Cat { Output, TokenEmbd, AttnQKV, AttnKVB, AttnV, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

Cat category(const std::string& n) {
  if (n == "output.weight") return Cat::Output;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Cat::TokenEmbd;
  if (has(n, "attn_qkv.weight")) return Cat::AttnQKV;
  if (has(n, "attn_kv_b.weight")) return Cat::AttnKVB;
  if (has(n, "attn_v.weight")) return Cat::AttnV;
  if (has(n, "attn_k.weight")) return Cat::AttnK;
  if (has(n, "attn_q.weight")) return Cat::AttnQ;
  if (has(n, "attn_output.weight")) return Cat::AttnOutput;
  if (has(n, "ffn_up")) return Cat::FfnUp;
  if (has(n, "ffn_gate")) return Cat::FfnGate;
  if (has(n, "ffn_down")) return Cat::FfnDown;
  return Cat::Other;
}

// V-like tensors: the most sensitive to quantization.
bool attn_v_like(Cat c) { return c == Cat::AttnV || c == Cat::AttnQKV || c == Cat::AttnKVB; }

// blk.N. -> N; -1 for tensors outside the blocks.
int layer_of(const std::string& n) {
  int layer = -1;
  if (std::sscanf(n.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// Routed experts in any layout: *_exps (stacked, merged) or blk.N.ffn_X.E.weight.
bool routed_expert(const std::string& n) {
  if (has(n, "_exps.")) return true;
  for (const char* p : {".ffn_gate.", ".ffn_up.", ".ffn_down."}) {
    const size_t at = n.find(p);
    if (at != std::string::npos && std::isdigit(static_cast<unsigned char>(n[at + std::char_traits<char>::length(p)])))
      return true;
  }
  return false;
}

// The first and last eighth of the stack and every third layer between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool is_one_of(int f, std::initializer_list<int> set) { return std::find(set.begin(), set.end(), f) != set.end(); }

bool low_iq(int f) { return is_one_of(f, {F_IQ2_XXS, F_IQ2_XS, F_IQ1_S, F_IQ2_S, F_IQ2_M, F_IQ1_M}); }

// The output head (and a tied embedding): Q6_K, Q5_K for the 1-2 bit IQ
// presets, Q8_0 when the base already is or the row does not fit its blocks.
DType output_type(int ftype, DType base, int64_t row_len) {
  if (ftype == F_MXFP4_MOE) return DType::Q8_0;
  if (row_len % type_info(base).block_size != 0) return DType::Q8_0;
  if (is_one_of(ftype, {F_IQ2_XXS, F_IQ2_XS, F_IQ3_XXS, F_IQ1_S, F_IQ2_S, F_IQ2_M, F_IQ1_M})) return DType::Q5_K;
  if (base != DType::Q8_0) return DType::Q6_K;
  return base;
}

// A row length the type's block does not divide: the next type with 32-element
// blocks (llama.cpp's tensor_type_fallback), else F16.
DType fallback(DType t, int64_t row_len, std::string& note) {
  const int64_t block = type_info(t).block_size;
  if (row_len % block == 0) return t;
  DType r = t;
  switch (t) {
    case DType::IQ1_S: case DType::IQ1_M: case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S:
    case DType::IQ3_XXS: case DType::IQ3_S: case DType::IQ4_XS: r = DType::IQ4_NL; break;
    case DType::Q2_K: case DType::Q3_K: case DType::TQ1_0: case DType::TQ2_0: r = DType::Q4_0; break;
    case DType::Q4_K: r = DType::Q5_0; break;
    case DType::Q5_K: r = DType::Q5_1; break;
    case DType::Q6_K: r = DType::Q8_0; break;
    default: break;
  }
  if (row_len % type_info(r).block_size != 0) r = DType::F16;
  note = "row length " + std::to_string(row_len) + " is not a multiple of " + type_name(t) + "'s block of " +
         std::to_string(block) + "; using " + type_name(r);
  return r;
}

}  // namespace

// ---------------------------------------------------------------- names

std::vector<std::string> quant_preset_names() {
  std::vector<std::string> v;
  for (const PresetRow& p : kPresets) v.emplace_back(p.name);
  return v;
}

std::vector<std::string> quant_ud_names() {
  std::vector<std::string> v;
  for (const UdRow& u : kUd) v.emplace_back(u.name);
  return v;
}

std::vector<DType> quant_weight_types() { return {std::begin(kAllTypes), std::end(kAllTypes)}; }

std::vector<std::string> quant_single_names() {
  std::vector<std::string> v;
  for (DType t : kAllTypes)
    if (!find_preset(lower_type_name(t))) v.push_back(lower_type_name(t));
  return v;
}

std::string quant_scheme_names() {
  std::string s;
  for (const auto& list : {quant_preset_names(), quant_ud_names(), quant_single_names()})
    for (const std::string& n : list) s += (s.empty() ? "" : ", ") + n;
  return s;
}

QuantScheme parse_quant_scheme(const std::string& name_in, bool pure) {
  const std::string n = canonical(name_in);
  QuantScheme s;
  s.name = n;
  s.pure = pure;
  if (pure) {  // a type name: that type everywhere
    for (DType t : kAllTypes)
      if (lower_type_name(t) == n) {
        s.kind = QuantScheme::Kind::Single;
        s.base = t;
        s.ftype = ftype_of_type(t);
        return s;
      }
    std::string types;
    for (DType t : kAllTypes) types += (types.empty() ? "" : ", ") + lower_type_name(t);
    throw Error("unknown type '" + name_in + "' for --pure; choose one of: " + types);
  }
  if (const PresetRow* p = find_preset(n)) {
    s.kind = QuantScheme::Kind::Preset;
    s.ftype = p->ftype;
    s.base = p->base;
    return s;
  }
  for (const UdRow& u : kUd)
    if (n == u.name) {
      s.kind = QuantScheme::Kind::Ud;
      s.ftype = u.ftype;
      s.base = u.gate_up;
      return s;
    }
  for (DType t : kAllTypes)
    if (lower_type_name(t) == n) {
      s.kind = QuantScheme::Kind::Single;
      s.base = t;
      s.ftype = ftype_of_type(t);
      return s;
    }
  throw Error("unknown quantization '" + name_in + "'; choose one of: " + quant_scheme_names());
}

bool mix_quantizes(const std::string& n, size_t n_dims) {
  if (n_dims < 2) return false;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  return !has(n, "_norm.weight") && !has(n, "ffn_gate_inp.weight") && !has(n, "ssm_conv1d");
}

// ---------------------------------------------------------------- the rules

MixPlanner::MixPlanner(const QuantScheme& scheme, const MixModel& model, const std::vector<std::string>& names)
    : s_(scheme), m_(model) {
  bool has_output = false;
  for (const std::string& n : names) {
    if (n == "output.weight") has_output = true;
    if (attn_v_like(category(n))) ++n_attn_v_;
  }
  tied_ = !has_output;
}

MixChoice MixPlanner::choose(const std::string& name, const std::vector<int64_t>& shape, DType source) {
  MixChoice c;
  c.type = source;
  if (!mix_quantizes(name, shape.size())) return c;
  c.quantized = true;
  const int64_t nx = shape[0];
  const Cat cat = category(name);
  const int f = s_.ftype;
  const DType base = s_.base;
  DType t = base;
  const bool head = cat == Cat::Output || (tied_ && cat == Cat::TokenEmbd);

  if (s_.pure || base == DType::F32 || base == DType::F16 || base == DType::BF16) {
    t = base;  // no mix: llama.cpp applies the rules to quantized defaults only
  } else if (s_.kind == QuantScheme::Kind::Single) {
    t = head ? output_type(f, base, nx) : base;
  } else if (s_.kind == QuantScheme::Kind::Ud) {
    const UdRow* u = nullptr;
    for (const UdRow& r : kUd)
      if (s_.name == r.name) u = &r;
    if (head) t = DType::Q6_K;
    else if (cat == Cat::TokenEmbd) t = u->token_embd;
    else if (routed_expert(name)) t = cat == Cat::FfnDown ? u->down : u->gate_up;
    else t = DType::Q8_0;
  } else {
    t = preset_type(static_cast<int>(cat), name, shape, head);
  }
  c.type = fallback(t, nx, c.note);
  return c;
}

// llama_tensor_get_type_impl's choices for one preset, as if no importance
// matrix were given. The LLM_TYPE_70B and Falcon special cases are left out
// (no model we write is either).
DType MixPlanner::preset_type(int cat_in, const std::string& name, const std::vector<int64_t>& shape, bool head) {
  const Cat cat = static_cast<Cat>(cat_in);
  const int f = s_.ftype;
  const int64_t nx = shape[0];
  const int n_gqa = m_.n_head_kv > 0 ? m_.n_head / m_.n_head_kv : 0;
  const bool eight = m_.n_expert == 8;
  // FFN rules look at the layer: from the name in MoE models (experts need
  // not be in order), the running count in dense ones, as llama.cpp does.
  const int L = m_.n_layer;
  const int name_layer = layer_of(name);
  DType t = s_.base;

  if (head) return output_type(f, s_.base, nx);
  if (f == F_MXFP4_MOE) return shape.size() > 2 && shape[2] > 1 ? DType::MXFP4 : DType::Q8_0;
  if (cat == Cat::TokenEmbd) {
    if (is_one_of(f, {F_IQ2_XXS, F_IQ2_XS, F_IQ1_S, F_IQ1_M})) return DType::Q2_K;
    if (is_one_of(f, {F_IQ2_S, F_IQ2_M, F_IQ3_XXS})) return DType::IQ3_S;
    if (is_one_of(f, {F_TQ1_0, F_TQ2_0})) return DType::Q4_K;
    return t;
  }
  if (low_iq(f)) {
    const bool s_or_m = f == F_IQ2_S || f == F_IQ2_M;
    if (attn_v_like(cat)) {
      ++i_attn_v_;
      return n_gqa >= 4 || m_.n_expert >= 4 ? DType::Q4_K : s_or_m ? DType::IQ3_S : DType::Q2_K;
    }
    if (eight && cat == Cat::AttnK) return DType::Q4_K;
    if (cat == Cat::FfnDown) {
      // llama.cpp counts ffn_down tensors here (not layers), even in MoE models.
      const bool first = i_ffn_down_ < L / 8;
      ++i_ffn_down_;
      return first ? (s_or_m ? DType::IQ3_S : DType::Q2_K) : t;
    }
    if (cat == Cat::AttnOutput) {
      if (eight) return DType::Q5_K;
      if (f == F_IQ1_S || f == F_IQ1_M) return DType::IQ2_XXS;
      if (s_or_m) return DType::IQ3_S;
    }
    return t;
  }
  if (attn_v_like(cat)) {
    const int i = i_attn_v_++;
    if (f == F_Q2_K) t = n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (f == F_Q2_K_S && n_gqa >= 4) t = DType::Q4_K;
    else if (f == F_IQ3_XXS) t = n_gqa >= 4 ? DType::Q4_K : DType::IQ3_S;
    else if ((f == F_IQ3_XS || f == F_IQ3_S) && n_gqa >= 4) t = DType::Q4_K;
    else if (f == F_IQ3_M) t = DType::Q4_K;
    else if (f == F_Q3_K_M) t = i < 2 ? DType::Q5_K : DType::Q4_K;
    else if (f == F_Q3_K_L) t = DType::Q5_K;
    else if ((f == F_IQ4_NL || f == F_IQ4_XS) && n_gqa >= 4) t = DType::Q5_K;
    else if ((f == F_Q4_K_M || f == F_Q5_K_M) && use_more_bits(i, n_attn_v_)) t = DType::Q6_K;
    else if (f == F_Q4_K_S && i < 4) t = DType::Q5_K;
    if (eight) t = DType::Q8_0;  // 8-expert models: a few MB buys a lot
    return t;
  }
  if (cat == Cat::AttnK) {
    if (eight) return DType::Q8_0;
    if (f == F_IQ3_XS) return DType::IQ3_XXS;
    if (f == F_IQ3_XXS) return DType::IQ2_S;
    return t;
  }
  if (cat == Cat::AttnQ) {
    if (f == F_IQ3_XS) return DType::IQ3_XXS;
    if (f == F_IQ3_XXS) return DType::IQ2_S;
    return t;
  }
  if (cat == Cat::FfnDown) {
    const int i = m_.n_expert > 1 ? name_layer : i_ffn_down_;
    ++i_ffn_down_;
    if (f == F_Q2_K) return DType::Q3_K;
    if (f == F_Q2_K_S) return i < L / 8 ? DType::Q4_K : t;
    if (f == F_IQ3_XXS) return i < L / 8 ? DType::Q4_K : DType::Q3_K;
    if (f == F_Q3_K_M) return i < L / 16 ? DType::Q5_K : DType::Q4_K;
    if (f == F_IQ3_M) return i < L / 8 || (eight && use_more_bits(i, L)) ? DType::Q4_K : t;
    if (f == F_Q3_K_L) return DType::Q5_K;
    if (f == F_Q4_K_M) return use_more_bits(i, L) ? DType::Q6_K : t;
    if (f == F_IQ4_NL || f == F_IQ4_XS) return i < L / 8 ? DType::Q5_K : t;
    if (f == F_Q5_K_M) return use_more_bits(i, L) ? DType::Q6_K : t;
    if (f == F_Q4_K_S) return i < L / 8 ? DType::Q5_K : t;
    return t;
  }
  if (cat == Cat::AttnOutput) {
    if (eight) {
      if (is_one_of(f, {F_Q2_K, F_IQ3_XS, F_IQ3_XXS, F_Q3_K_S, F_Q3_K_M, F_IQ4_NL, F_Q4_K_S, F_Q4_K_M, F_IQ3_S,
                        F_IQ3_M, F_IQ4_XS}))
        return DType::Q5_K;
      return t;
    }
    if (f == F_Q2_K) return DType::Q3_K;
    if (f == F_IQ3_XXS) return DType::IQ3_S;
    if (f == F_Q3_K_M) return DType::Q4_K;
    if (f == F_Q3_K_L) return DType::Q5_K;
    if (f == F_IQ3_M) return DType::Q4_K;
    return t;
  }
  if (cat == Cat::FfnGate || cat == Cat::FfnUp) {
    const int i = name_layer;
    if (f == F_IQ3_XS && i >= L / 8 && i < 7 * L / 8) return DType::IQ3_XXS;
    return t;
  }
  return t;
}

}  // namespace ms
