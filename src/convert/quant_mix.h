// Which GGUF type each tensor gets for a `--type` the user asks for.
//
// Plain targets (f32, f16, bf16, q8_0) store every matrix in that type. The
// K-quant targets are mixes: the tensors that hurt quality most when squeezed
// (attention V, FFN down in some layers, the output head) get more bits. The
// whole policy is one table in quant_mix.cpp (kMixTable) and is reproduced in
// docs/convert.md. In every target, 1-D tensors (norms, biases) and the MoE
// router stay F32.
#pragma once
#include <cstdint>
#include <string>

#include "quant/types.h"

namespace ms {

enum class ConvertType { F32, F16, BF16, Q8_0, Q4_K, Q4_K_M, Q5_K_M, Q6_K };

// "f32", "f16", "bf16", "q8_0", "q4_k", "q4_k_m", "q5_k_m", "q6_k" (any case).
// Throws ms::Error listing the accepted names.
ConvertType parse_convert_type(const std::string& name);
const char* convert_type_name(ConvertType t);
const char* convert_type_names();  // the accepted names, comma-separated
// The `general.file_type` value (llama.cpp's LLAMA_FTYPE numbering).
uint32_t gguf_file_type(ConvertType t);

// What a tensor is, for the mix table.
enum class TensorRole {
  TokenEmbd, Output, Norm, Bias, Router,
  AttnQ, AttnK, AttnV, AttnOutput,
  FfnGate, FfnUp, FfnDown,  // dense FFN and merged experts alike
};
const char* tensor_role_name(TensorRole r);

struct TypeChoice {
  DType type = DType::F32;
  std::string note;  // non-empty when a fallback was taken (why)
};

// The layers that get more bits in the _m mixes: the first and last eighth of
// the stack, and every third layer in between (so about 40% of the layers).
bool mix_layer_gets_more_bits(int layer, int n_layer);

// The type for one tensor. `layer` is -1 for tensors outside the blocks;
// `row_len` is the tensor's innermost dimension (ne[0]); `n_dims` its rank.
// `tied_output`: token_embd doubles as the output head (no `output` tensor), so
// it gets the output head's type. If the chosen type's block does not divide
// row_len, falls back to q8_0 (32-element blocks) or else f16, and says so in
// `note`.
TypeChoice choose_tensor_type(ConvertType target, TensorRole role, int layer, int n_layer, int64_t row_len,
                              int n_dims, bool tied_output);

}  // namespace ms
