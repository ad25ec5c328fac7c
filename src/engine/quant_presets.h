// Quantization schemes: which GGUF type each tensor of a model gets, for
// `moestream gen --quant` and `moestream convert --type`.
//
// Three kinds of scheme:
//   - llama-quantize's presets ("ftypes"), by their names (q4_k_m, q2_k,
//     iq4_xs, iq2_m, ...): the same per-tensor choices as llama.cpp's
//     llama_tensor_get_type (its version de3ff81), with its shape fallbacks,
//     and as if no importance matrix were given. The rules are facts read
//     from llama-quant.cpp; the code and table here are our own.
//   - single types (q4_k, q5_k, q3_k, ...: a GGUF type name that is not a
//     preset name): that type for every quantizable tensor except the output
//     head, which follows llama.cpp's output rule (q6_K; q5_K for the 1- and
//     2-bit IQ types). With `pure`, the output head too (llama-quantize --pure).
//     A preset name with `pure` is its base type everywhere.
//   - UD-style mixes (ud_q2_k_xl, ud_iq2_m): Q8_0 for everything that is not
//     a routed expert (attention, DeltaNet, shared experts, dense FFN), low-bit
//     routed experts, as the "dynamic" files on the Hub do (not a copy of any
//     particular recipe).
// What is quantized at all (llama.cpp's rule): tensors of 2 or more
// dimensions whose name ends in "weight", except norms (*_norm.weight), the
// MoE router (ffn_gate_inp.weight) and the DeltaNet conv (ssm_conv1d). The
// rest stay as they are (f32 in our files).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "quant/types.h"

namespace ms {

struct QuantScheme {
  enum class Kind { Preset, Single, Ud };
  Kind kind = Kind::Preset;
  std::string name;       // canonical, lower case ("q4_k_m", "iq4_xs", "q5_k", "ud_q2_k_xl")
  int ftype = 0;          // llama.cpp's LLAMA_FTYPE_* (general.file_type); for Single/Ud the closest one
  DType base = DType::F16;  // the default type of the scheme
  bool pure = false;
};

// Parses a scheme name (any case; '-' and '_' alike). Throws ms::Error listing
// every accepted name for an unknown one, or for a type moestream does not
// quantize to (activation formats, integer types).
QuantScheme parse_quant_scheme(const std::string& name, bool pure = false);
// The accepted names, comma-separated: presets first, then UD mixes, then single types.
std::string quant_scheme_names();
std::vector<std::string> quant_preset_names();  // llama-quantize's presets we implement
std::vector<std::string> quant_single_names();  // single types
std::vector<std::string> quant_ud_names();      // UD-style mixes
std::vector<DType> quant_weight_types();        // every type a weight can be stored in (--pure)

// What the rules look at besides a tensor's name and shape.
struct MixModel {
  int n_layer = 0;   // blocks in the file (block_count, MTP blocks included), as llama.cpp counts them
  int n_expert = 0;  // routed experts per layer (0: dense)
  int n_head = 1, n_head_kv = 1;
};

struct MixChoice {
  DType type = DType::F32;
  bool quantized = false;  // false: a tensor the scheme leaves as it is
  std::string note;        // why a fallback type was taken, if one was
};

// Chooses types for the tensors of one file, called in file order (some rules
// count tensors as llama.cpp does: the i-th attn_v, the i-th ffn_down).
class MixPlanner {
 public:
  // `names`: every tensor name of the file (to count attn_v-like tensors and
  // to see whether an output head exists or the embedding is tied).
  MixPlanner(const QuantScheme& scheme, const MixModel& model, const std::vector<std::string>& names);
  // `shape`: GGUF order, innermost first. `source` is the type the tensor
  // would have unquantized (kept when the scheme does not quantize it).
  MixChoice choose(const std::string& name, const std::vector<int64_t>& shape, DType source = DType::F32);

 private:
  DType preset_type(int cat, const std::string& name, const std::vector<int64_t>& shape, bool head);

  QuantScheme s_;
  MixModel m_;
  bool tied_ = false;
  int n_attn_v_ = 0, i_attn_v_ = 0, i_ffn_down_ = 0;
};

// Whether llama.cpp's rule quantizes a tensor of this name and rank at all.
bool mix_quantizes(const std::string& name, size_t n_dims);

}  // namespace ms
