// Which GGUF type each tensor gets for a `--type` the user asks for.
//
// Plain targets (f32, f16, bf16, q8_0) store every matrix in that type, as
// llama.cpp's convert_hf_to_gguf.py --outtype does; 1-D tensors (norms,
// biases) and the MoE router stay F32 (choose_tensor_type).
// The other targets are llama-quantize's presets (q4_k_m, q3_k_s, q2_k, q4_0,
// ...) and the single K types (q3_k, q4_k, q5_k): the per-tensor choices of
// engine/quant_presets.h (the rules of llama.cpp's llama_tensor_get_type),
// applied to the whole plan in file order (apply_quant_mix in tensor_plan).
#pragma once
#include <cstdint>
#include <string>

#include "quant/types.h"

namespace ms {

enum class ConvertType {
  F32, F16, BF16, Q8_0,                         // plain
  Q4_0, Q4_1, Q5_0, Q5_1,                       // legacy presets
  Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K,  // K-quant presets
  Q3_K, Q4_K, Q5_K,                             // single K types (the head q6_K)
};

// The names above in lower case ("q4_k_m"), any case accepted. Throws
// ms::Error listing the accepted names.
ConvertType parse_convert_type(const std::string& name);
const char* convert_type_name(ConvertType t);
const char* convert_type_names();  // the accepted names, comma-separated
// The `general.file_type` value (llama.cpp's LLAMA_FTYPE numbering).
uint32_t gguf_file_type(ConvertType t);
// Whether the target is a llama-quantize mix (types from engine/quant_presets.h).
bool convert_type_is_mix(ConvertType t);

// What a tensor is, for the type choice (ConvertRole, not model/tensor_roles.h's
// TensorRole: two enums of one name in namespace ms broke the one-definition rule).
enum class ConvertRole {
  TokenEmbd, Output, Norm, Bias, Router,
  AttnQ, AttnK, AttnV, AttnOutput,
  FfnGate, FfnUp, FfnDown,  // dense FFN and merged experts alike
};
const char* tensor_role_name(ConvertRole r);

struct TypeChoice {
  DType type = DType::F32;
  std::string note;  // non-empty when a fallback was taken (why)
};

// The type for one tensor under a plain target (f32, f16, bf16, q8_0; throws
// for a mix). `layer` is -1 for tensors outside the blocks; `row_len` is the
// tensor's innermost dimension (ne[0]); `n_dims` its rank. If q8_0's block
// does not divide row_len, falls back to f16 and says so in `note`.
TypeChoice choose_tensor_type(ConvertType target, ConvertRole role, int layer, int n_layer, int64_t row_len,
                              int n_dims, bool tied_output);

}  // namespace ms
