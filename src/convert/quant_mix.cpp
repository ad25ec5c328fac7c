#include "convert/quant_mix.h"

#include <algorithm>
#include <cctype>

#include "engine/quant_presets.h"
#include "util/error.h"

namespace ms {
namespace {

struct TargetName {
  ConvertType type;
  const char* name;  // for the mixes, also the engine/quant_presets.h scheme name
};

constexpr TargetName kTargets[] = {
    {ConvertType::F32, "f32"},       {ConvertType::F16, "f16"},       {ConvertType::BF16, "bf16"},
    {ConvertType::Q8_0, "q8_0"},     {ConvertType::Q4_0, "q4_0"},     {ConvertType::Q4_1, "q4_1"},
    {ConvertType::Q5_0, "q5_0"},     {ConvertType::Q5_1, "q5_1"},     {ConvertType::Q2_K, "q2_k"},
    {ConvertType::Q3_K_S, "q3_k_s"}, {ConvertType::Q3_K_M, "q3_k_m"}, {ConvertType::Q3_K_L, "q3_k_l"},
    {ConvertType::Q4_K_S, "q4_k_s"}, {ConvertType::Q4_K_M, "q4_k_m"}, {ConvertType::Q5_K_S, "q5_k_s"},
    {ConvertType::Q5_K_M, "q5_k_m"}, {ConvertType::Q6_K, "q6_k"},     {ConvertType::Q3_K, "q3_k"},
    {ConvertType::Q4_K, "q4_k"},     {ConvertType::Q5_K, "q5_k"},
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

ConvertType parse_convert_type(const std::string& name) {
  const std::string n = lower(name);
  for (const TargetName& t : kTargets)
    if (n == t.name) return t.type;
  throw Error("unknown --type '" + name + "'; choose one of: " + convert_type_names() +
              " (IQ types: use `moestream gen --quant`; convert has no importance matrix)");
}

const char* convert_type_name(ConvertType t) {
  for (const TargetName& x : kTargets)
    if (x.type == t) return x.name;
  return "?";
}

const char* convert_type_names() {
  return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, "
         "q5_k_m, q6_k, q3_k, q4_k, q5_k";
}

bool convert_type_is_mix(ConvertType t) {
  return t != ConvertType::F32 && t != ConvertType::F16 && t != ConvertType::BF16 && t != ConvertType::Q8_0;
}

uint32_t gguf_file_type(ConvertType t) {
  switch (t) {
    case ConvertType::F32: return 0;   // ALL_F32
    case ConvertType::F16: return 1;   // MOSTLY_F16
    case ConvertType::BF16: return 32; // MOSTLY_BF16
    case ConvertType::Q8_0: return 7;  // MOSTLY_Q8_0
    default: return static_cast<uint32_t>(parse_quant_scheme(convert_type_name(t)).ftype);
  }
}

const char* tensor_role_name(ConvertRole r) {
  switch (r) {
    case ConvertRole::TokenEmbd: return "token_embd";
    case ConvertRole::Output: return "output";
    case ConvertRole::Norm: return "norm";
    case ConvertRole::Bias: return "bias";
    case ConvertRole::Router: return "router";
    case ConvertRole::AttnQ: return "attn_q";
    case ConvertRole::AttnK: return "attn_k";
    case ConvertRole::AttnV: return "attn_v";
    case ConvertRole::AttnOutput: return "attn_output";
    case ConvertRole::FfnGate: return "ffn_gate";
    case ConvertRole::FfnUp: return "ffn_up";
    case ConvertRole::FfnDown: return "ffn_down";
  }
  return "?";
}

TypeChoice choose_tensor_type(ConvertType target, ConvertRole role, int /*layer*/, int /*n_layer*/, int64_t row_len,
                              int n_dims, bool /*tied_output*/) {
  TypeChoice c;
  // Vectors and the router stay exact: they are tiny, and the router's
  // choices are what expert-routing parity is measured on.
  if (n_dims < 2 || role == ConvertRole::Norm || role == ConvertRole::Bias || role == ConvertRole::Router) {
    c.type = DType::F32;
    return c;
  }
  switch (target) {
    case ConvertType::F32: c.type = DType::F32; break;
    case ConvertType::F16: c.type = DType::F16; break;
    case ConvertType::BF16: c.type = DType::BF16; break;
    case ConvertType::Q8_0: c.type = DType::Q8_0; break;
    default: throw Error(std::string("internal: ") + convert_type_name(target) + " is a mix (apply_quant_mix)");
  }
  const int64_t block = type_info(c.type).block_size;
  if (row_len % block != 0) {
    const DType wanted = c.type;
    c.type = DType::F16;
    c.note = "row length " + std::to_string(row_len) + " is not a multiple of " + type_name(wanted) +
             "'s block of " + std::to_string(block) + "; using " + type_name(c.type);
  }
  return c;
}

}  // namespace ms
