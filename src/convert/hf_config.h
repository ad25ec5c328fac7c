// A Hugging Face checkpoint's config.json, read into the hyper-parameters the
// converter needs, for the architectures it knows.
//
// Supported `model_type`s (or `architectures[0]` when model_type is absent):
//   qwen3_moe (Qwen3MoeForCausalLM)  -> GGUF arch "qwen3moe"
//   mixtral   (MixtralForCausalLM)   -> GGUF arch "llama" with experts
//   llama, mistral (dense)           -> GGUF arch "llama"
//   qwen2 (dense)                    -> GGUF arch "qwen2"
//   qwen3 (dense)                    -> GGUF arch "qwen3"
//   qwen3_5_moe_text (Qwen3_5MoeForCausalLM), and the text model of
//   qwen3_5_moe (Qwen3_5MoeForConditionalGeneration: text_config, tensors
//   under model.language_model.; the vision tower is not converted)
//                                    -> GGUF arch "qwen35moe"
//   gpt_oss (GptOssForCausalLM)      -> GGUF arch "gpt-oss" (bf16/f32 experts, or the
//                                       published MXFP4 _blocks/_scales, repacked as they are)
// Both transformers 4.x and 5.x spellings are read (e.g. rope_theta or
// rope_parameters.rope_theta; num_experts or num_local_experts).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms {

enum class HfArch { Qwen3Moe, Mixtral, Llama, Qwen2, Qwen3, Qwen35Moe, GptOss };

struct HfModelConfig {
  HfArch arch = HfArch::Llama;
  std::string model_type;  // as written in config.json (or derived from architectures)
  std::string gguf_arch;   // "qwen3moe", "llama", "qwen2", "qwen3"
  std::string name;        // _name_or_path when present, else empty

  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ff = 0;         // dense feed-forward width (intermediate_size)
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ctx = 0;        // max_position_embeddings
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  // rope_scaling / rope_parameters of type linear or yarn ("" : unscaled),
  // written as rope.scaling.* (model/rope_scaling.h reads them back).
  std::string rope_scaling_type;
  double rope_factor = 0;          // factor
  int64_t rope_orig_ctx = 0;       // yarn: original_max_position_embeddings
  double yarn_beta_fast = 0, yarn_beta_slow = 0;  // yarn: 0 when not given (the loader's defaults apply)
  double yarn_ext_factor = -1;     // yarn: extrapolation_factor, < 0 when not given

  // Mixture of experts (n_expert == 0: dense).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;     // one expert's feed-forward width
  bool norm_topk_prob = true;  // renormalise the top-k routing weights to sum to 1

  bool tie_embeddings = false;  // output head shares token_embd (no lm_head)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3 family)
  bool attn_bias = false;       // q/k/v projections carry biases (Qwen2, attention_bias)
  bool attn_out_bias = false;   // o_proj carries a bias (attention_bias on Qwen3/Llama)
  // GGUF's llama arch uses adjacent-pair ("normal") RoPE while HF rotates
  // halves: q/k rows are permuted at conversion (see tensor_plan.h).
  bool permute_qk = false;

  // The text model's tensor prefix: "model." ("model.language_model." in
  // Qwen3.5's image-text checkpoints).
  std::string prefix = "model.";

  // qwen35moe: Gated DeltaNet layers, partial RoPE, a shared expert, MTP
  // blocks (mtp.* tensors). Which layers are Gated DeltaNet: config.json's
  // layer_types when it has one (any pattern), else all but every
  // full_attn_interval-th. The GGUF gets both the per-layer flags
  // (attention.recurrent_layers) and the interval, as llama.cpp writes them.
  int64_t full_attn_interval = 0;
  std::vector<bool> linear_layers;  // per main-stack layer; empty: the interval decides
  int64_t lin_conv_kernel = 0, lin_k_heads = 0, lin_v_heads = 0, lin_head_k = 0, lin_head_v = 0;
  int64_t n_ff_shexp = 0;
  double partial_rotary = 1.0;  // fraction of head_dim that RoPE turns
  int64_t n_mtp = 0;            // mtp_num_hidden_layers
  std::vector<int32_t> mrope_sections;  // rope_parameters.mrope_section (written as rope.dimension_sections)
  int64_t n_rot() const { return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary); }
  bool is_linear_layer(int64_t il) const {
    if (!linear_layers.empty()) return il >= 0 && il < static_cast<int64_t>(linear_layers.size()) && linear_layers[static_cast<size_t>(il)];
    return full_attn_interval > 0 && (il + 1) % full_attn_interval != 0;
  }

  // gpt-oss: the sliding window and which layers use it (layer_types'
  // "sliding_attention"; without layer_types: the even layers).
  int64_t sliding_window = 0;
  std::vector<bool> swa_layers;
  // quantization_config.quant_method "mxfp4": the expert matrices are
  // experts.{gate_up,down}_proj_{blocks,scales} (uint8), repacked to GGUF MXFP4.
  bool mxfp4_experts = false;

  bool is_moe() const { return n_expert > 0; }
};

// Parses config.json text; `where` names the file in error messages. Throws
// ms::Error for an unsupported architecture (listing the supported ones), a
// missing or invalid required field, or features the converter cannot carry
// (rope scaling, dense layers inside a Qwen3-MoE, an activation other than SiLU).
HfModelConfig parse_hf_config(const std::string& json_text, const std::string& where);

// Reads DIR/config.json.
HfModelConfig read_hf_config(const std::string& dir);

const char* hf_supported_model_types();  // "qwen3_moe, qwen3_5_moe, gpt_oss, mixtral, llama, mistral, qwen2, qwen3"

}  // namespace ms
