#include "convert/quant_mix.h"

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace ms {
namespace {

struct TargetName {
  ConvertType type;
  const char* name;
  uint32_t file_type;  // llama.cpp's LLAMA_FTYPE_* value
};

constexpr TargetName kTargets[] = {
    {ConvertType::F32, "f32", 0},        // ALL_F32
    {ConvertType::F16, "f16", 1},        // MOSTLY_F16
    {ConvertType::BF16, "bf16", 32},     // MOSTLY_BF16
    {ConvertType::Q8_0, "q8_0", 7},      // MOSTLY_Q8_0
    {ConvertType::Q4_K, "q4_k", 14},     // MOSTLY_Q4_K_S (uniform q4_K, the "small" end)
    {ConvertType::Q4_K_M, "q4_k_m", 15}, // MOSTLY_Q4_K_M
    {ConvertType::Q5_K_M, "q5_k_m", 17}, // MOSTLY_Q5_K_M
    {ConvertType::Q6_K, "q6_k", 18},     // MOSTLY_Q6_K
};

// ---------------------------------------------------------------- the mix table
// For the K-quant targets: per tensor role, the type in ordinary layers and in
// the layers mix_layer_gets_more_bits() selects ("boosted"). Roles outside the
// blocks (token_embd, output) use the first column. Norms, biases and the
// router are not here: they are always F32.
struct MixCell {
  DType normal;
  DType boosted;
};
struct MixRow {
  TensorRole role;
  MixCell q4_k, q4_k_m, q5_k_m, q6_k;
};

constexpr DType K4 = DType::Q4_K, K5 = DType::Q5_K, K6 = DType::Q6_K;

constexpr MixRow kMixTable[] = {
    //  role                   q4_k       q4_k_m      q5_k_m      q6_k
    {TensorRole::TokenEmbd,  {K4, K4},  {K4, K4},  {K5, K5},  {K6, K6}},
    {TensorRole::Output,     {K6, K6},  {K6, K6},  {K6, K6},  {K6, K6}},
    {TensorRole::AttnQ,      {K4, K4},  {K4, K4},  {K5, K5},  {K6, K6}},
    {TensorRole::AttnK,      {K4, K4},  {K4, K4},  {K5, K5},  {K6, K6}},
    {TensorRole::AttnV,      {K4, K4},  {K4, K6},  {K5, K6},  {K6, K6}},
    {TensorRole::AttnOutput, {K4, K4},  {K4, K4},  {K5, K5},  {K6, K6}},
    {TensorRole::FfnGate,    {K4, K4},  {K4, K4},  {K5, K5},  {K6, K6}},
    {TensorRole::FfnUp,      {K4, K4},  {K4, K4},  {K5, K5},  {K6, K6}},
    {TensorRole::FfnDown,    {K4, K4},  {K4, K6},  {K5, K6},  {K6, K6}},
};

const MixRow& mix_row(TensorRole role) {
  for (const MixRow& r : kMixTable)
    if (r.role == role) return r;
  throw Error(std::string("internal: no quant mix entry for role ") + tensor_role_name(role));
}

const MixCell& mix_cell(const MixRow& row, ConvertType t) {
  switch (t) {
    case ConvertType::Q4_K: return row.q4_k;
    case ConvertType::Q4_K_M: return row.q4_k_m;
    case ConvertType::Q5_K_M: return row.q5_k_m;
    case ConvertType::Q6_K: return row.q6_k;
    default: throw Error("internal: not a K-quant mix");
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

ConvertType parse_convert_type(const std::string& name) {
  const std::string n = lower(name);
  for (const TargetName& t : kTargets)
    if (n == t.name) return t.type;
  throw Error("unknown --type '" + name + "'; choose one of: " + convert_type_names());
}

const char* convert_type_name(ConvertType t) {
  for (const TargetName& x : kTargets)
    if (x.type == t) return x.name;
  return "?";
}

const char* convert_type_names() { return "f32, f16, bf16, q8_0, q4_k, q4_k_m, q5_k_m, q6_k"; }

uint32_t gguf_file_type(ConvertType t) {
  for (const TargetName& x : kTargets)
    if (x.type == t) return x.file_type;
  throw Error("internal: unknown convert type");
}

const char* tensor_role_name(TensorRole r) {
  switch (r) {
    case TensorRole::TokenEmbd: return "token_embd";
    case TensorRole::Output: return "output";
    case TensorRole::Norm: return "norm";
    case TensorRole::Bias: return "bias";
    case TensorRole::Router: return "router";
    case TensorRole::AttnQ: return "attn_q";
    case TensorRole::AttnK: return "attn_k";
    case TensorRole::AttnV: return "attn_v";
    case TensorRole::AttnOutput: return "attn_output";
    case TensorRole::FfnGate: return "ffn_gate";
    case TensorRole::FfnUp: return "ffn_up";
    case TensorRole::FfnDown: return "ffn_down";
  }
  return "?";
}

bool mix_layer_gets_more_bits(int layer, int n_layer) {
  const int eighth = n_layer / 8;
  return layer < eighth || layer >= 7 * n_layer / 8 || (layer - eighth) % 3 == 2;
}

TypeChoice choose_tensor_type(ConvertType target, TensorRole role, int layer, int n_layer, int64_t row_len,
                              int n_dims, bool tied_output) {
  TypeChoice c;
  // Vectors and the router stay exact: they are tiny, and the router's
  // choices are what expert-routing parity is measured on.
  if (n_dims < 2 || role == TensorRole::Norm || role == TensorRole::Bias || role == TensorRole::Router) {
    c.type = DType::F32;
    return c;
  }
  switch (target) {
    case ConvertType::F32: c.type = DType::F32; break;
    case ConvertType::F16: c.type = DType::F16; break;
    case ConvertType::BF16: c.type = DType::BF16; break;
    case ConvertType::Q8_0: c.type = DType::Q8_0; break;
    default: {
      const TensorRole r = (role == TensorRole::TokenEmbd && tied_output) ? TensorRole::Output : role;
      const MixCell& cell = mix_cell(mix_row(r), target);
      const bool boosted = layer >= 0 && mix_layer_gets_more_bits(layer, n_layer);
      c.type = boosted ? cell.boosted : cell.normal;
      break;
    }
  }
  const int64_t block = type_info(c.type).block_size;
  if (row_len % block != 0) {
    const DType wanted = c.type;
    c.type = row_len % type_info(DType::Q8_0).block_size == 0 ? DType::Q8_0 : DType::F16;
    c.note = "row length " + std::to_string(row_len) + " is not a multiple of " + type_name(wanted) +
             "'s block of " + std::to_string(block) + "; using " + type_name(c.type);
  }
  return c;
}

}  // namespace ms
