#include "convert/hf_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "util/error.h"

namespace ms {
namespace {

using json = nlohmann::json;

struct ArchName {
  const char* model_type;
  const char* class_name;
  HfArch arch;
  const char* gguf_arch;
};

constexpr ArchName kArchs[] = {
    {"qwen3_moe", "Qwen3MoeForCausalLM", HfArch::Qwen3Moe, "qwen3moe"},
    {"mixtral", "MixtralForCausalLM", HfArch::Mixtral, "llama"},
    {"llama", "LlamaForCausalLM", HfArch::Llama, "llama"},
    {"mistral", "MistralForCausalLM", HfArch::Llama, "llama"},
    {"qwen2", "Qwen2ForCausalLM", HfArch::Qwen2, "qwen2"},
    {"qwen3", "Qwen3ForCausalLM", HfArch::Qwen3, "qwen3"},
    {"qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", HfArch::Qwen35Moe, "qwen35moe"},
    {"qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", HfArch::Qwen35Moe, "qwen35moe"},
    {"gpt_oss", "GptOssForCausalLM", HfArch::GptOss, "gpt-oss"},
};

// A field that may be absent or null.
const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t get_int(const json& j, const char* key, const std::string& where, const int64_t* def = nullptr) {
  const json* v = field(j, key);
  if (!v) {
    if (def) return *def;
    throw Error(where + ": required field \"" + key + "\" is missing");
  }
  if (!v->is_number_integer() && !v->is_number_unsigned())
    throw Error(where + ": field \"" + key + "\" must be an integer, found " + v->dump());
  const int64_t x = v->get<int64_t>();
  if (x <= 0) throw Error(where + ": field \"" + key + "\" must be positive, found " + std::to_string(x));
  return x;
}

int64_t get_int_or(const json& j, const char* key, const std::string& where, int64_t def) {
  return get_int(j, key, where, &def);
}

double get_float_or(const json& j, const char* key, const std::string& where, double def) {
  const json* v = field(j, key);
  if (!v) return def;
  if (!v->is_number()) throw Error(where + ": field \"" + key + "\" must be a number, found " + v->dump());
  const double x = v->get<double>();
  if (!(x > 0)) throw Error(where + ": field \"" + key + "\" must be positive, found " + v->dump());
  return x;
}

bool get_bool_or(const json& j, const char* key, const std::string& where, bool def) {
  const json* v = field(j, key);
  if (!v) return def;
  if (!v->is_boolean()) throw Error(where + ": field \"" + key + "\" must be true or false, found " + v->dump());
  return v->get<bool>();
}

// rope_theta lives at the top level (transformers 4.x) or inside
// rope_parameters (5.x). Of the scaled RoPE variants, linear and plain YaRN
// (factor, original_max_position_embeddings, beta_fast/beta_slow,
// extrapolation_factor) are written as llama.cpp's converter writes them
// (rope.scaling.*, which the loader computes as llama.cpp does). Variants whose
// frequencies or magnitude the GGUF keys cannot express (longrope, dynamic,
// llama3, YaRN with attention_factor / mscale / mscale_all_dim / truncate) are
// refused rather than written as a file that silently computes something else.
void read_rope(const json& j, const std::string& where, double def_theta, HfModelConfig& c) {
  // gpt-oss's YaRN says "truncate": false (its ramp ends not rounded to whole
  // pairs). The GGUF keys cannot say so and llama.cpp, whose files these
  // must match, rounds them: gpt-oss checkpoints are converted as llama.cpp
  // converts them, the difference is below bf16's resolution for the real
  // model's head size (see tools/hf_parity.py's gpt-oss entry, which uses
  // truncate: true to compare exactly).
  const bool truncate_ok = c.arch == HfArch::GptOss;
  c.rope_theta = get_float_or(j, "rope_theta", where, def_theta);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const json* rp = field(j, key);
    if (!rp) continue;
    if (!rp->is_object()) throw Error(where + ": \"" + key + "\" must be an object, found " + rp->dump());
    if (const json* t = field(*rp, "rope_theta")) {
      if (!t->is_number() || !(t->get<double>() > 0))
        throw Error(where + ": " + key + ".rope_theta must be a positive number, found " + t->dump());
      c.rope_theta = t->get<double>();
    }
    std::string type = "default";
    if (const json* t = field(*rp, "rope_type")) type = t->is_string() ? t->get<std::string>() : t->dump();
    else if (const json* t2 = field(*rp, "type")) type = t2->is_string() ? t2->get<std::string>() : t2->dump();
    if (type == "default") continue;
    const std::string in = where + ": " + key;
    if (type != "linear" && type != "yarn")
      throw Error(in + " asks for RoPE scaling of type '" + type +
                  "', which moestream convert does not support (unscaled, linear or plain YaRN); use a checkpoint "
                  "without it");
    for (const char* unsupported : {"attention_factor", "attn_factor", "mscale", "mscale_all_dim", "truncate"})
      if (field(*rp, unsupported) && !(truncate_ok && std::string(unsupported) == "truncate"))
        throw Error(in + " has \"" + unsupported + "\", a RoPE " + type +
                    " variant whose magnitude or frequencies the GGUF rope.scaling keys cannot express; use a "
                    "checkpoint without it");
    c.rope_scaling_type = type;
    c.rope_factor = get_float_or(*rp, "factor", in, 0.0);
    if (!(c.rope_factor > 0)) throw Error(in + ": RoPE " + type + " scaling needs a positive \"factor\"");
    if (type == "yarn") {
      // transformers' default for the original length: max_position_embeddings.
      c.rope_orig_ctx = get_int_or(*rp, "original_max_position_embeddings", in,
                                   get_int_or(j, "max_position_embeddings", where, 0));
      if (c.rope_orig_ctx <= 0)
        throw Error(in + ": YaRN needs original_max_position_embeddings (or max_position_embeddings)");
      c.yarn_beta_fast = get_float_or(*rp, "beta_fast", in, 0.0);
      c.yarn_beta_slow = get_float_or(*rp, "beta_slow", in, 0.0);
      if (const json* e = field(*rp, "extrapolation_factor")) {
        if (!e->is_number() || e->get<double>() < 0)
          throw Error(in + ".extrapolation_factor must be a number >= 0, found " + e->dump());
        c.yarn_ext_factor = e->get<double>();
      }
    }
  }
}

// Qwen3.5/3.6-MoE's text config: experts, the shared expert, Gated DeltaNet,
// the layer pattern, partial RoPE and MTP.
void read_qwen35(const json& j, const std::string& where, HfModelConfig& c) {
  c.n_expert = get_int(j, "num_experts", where);
  c.n_expert_used = get_int(j, "num_experts_per_tok", where);
  c.n_ff_exp = get_int(j, "moe_intermediate_size", where);
  c.n_ff_shexp = get_int(j, "shared_expert_intermediate_size", where);
  c.n_ff = get_int_or(j, "intermediate_size", where, c.n_ff_exp);
  c.norm_topk_prob = true;  // its router always renormalises the top-k
  c.lin_conv_kernel = get_int(j, "linear_conv_kernel_dim", where);
  c.lin_k_heads = get_int(j, "linear_num_key_heads", where);
  c.lin_v_heads = get_int(j, "linear_num_value_heads", where);
  c.lin_head_k = get_int(j, "linear_key_head_dim", where);
  c.lin_head_v = get_int(j, "linear_value_head_dim", where);
  if (c.lin_v_heads % c.lin_k_heads != 0)
    throw Error(where + ": linear_num_value_heads " + std::to_string(c.lin_v_heads) +
                " is not a multiple of linear_num_key_heads " + std::to_string(c.lin_k_heads));
  if (c.lin_conv_kernel < 2 || c.lin_conv_kernel > 16)
    throw Error(where + ": linear_conv_kernel_dim " + std::to_string(c.lin_conv_kernel) + " is out of range (2..16)");
  c.full_attn_interval = get_int_or(j, "full_attention_interval", where, 4);
  // layer_types, when present, names each layer's kind (any pattern; the
  // GGUF carries it as attention.recurrent_layers). Without it the interval
  // decides, as in the reference modeling code.
  if (const json* lt = field(j, "layer_types"); lt && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.n_layer)
      throw Error(where + ": layer_types must list one kind per layer (" + std::to_string(c.n_layer) + "), found " +
                  (lt->is_array() ? std::to_string(lt->size()) + " entries" : lt->dump()));
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const json& k = (*lt)[static_cast<size_t>(il)];
      if (k != "linear_attention" && k != "full_attention")
        throw Error(where + ": layer_types[" + std::to_string(il) + "] is " + k.dump() +
                    "; a qwen3_5_moe layer is \"linear_attention\" or \"full_attention\"");
      c.linear_layers.push_back(k == "linear_attention");
    }
    // The interval no longer decides anything; the GGUF still gets one (4
    // where the config has none or a meaningless one, as llama.cpp writes).
    if (c.full_attn_interval <= 0) c.full_attn_interval = 4;
  } else if (c.full_attn_interval <= 0) {
    throw Error(where + ": full_attention_interval must be positive (found " + std::to_string(c.full_attn_interval) +
                ") when there is no layer_types list");
  }
  c.partial_rotary = 0.25;  // the reference's default for this architecture
  const json* rp = field(j, "rope_parameters");
  for (const json* src : {&j, rp})
    if (src && src->is_object())
      if (const json* f = field(*src, "partial_rotary_factor")) {
        if (!f->is_number() || !(f->get<double>() > 0) || f->get<double>() > 1)
          throw Error(where + ": partial_rotary_factor must be in (0, 1], found " + f->dump());
        c.partial_rotary = f->get<double>();
      }
  if (c.n_rot() % 2 != 0 || c.n_rot() <= 0)
    throw Error(where + ": head_dim x partial_rotary_factor = " + std::to_string(c.n_rot()) + " is not a positive even number");
  if (rp && rp->is_object())
    if (const json* ms = field(*rp, "mrope_section"); ms && ms->is_array())
      for (const json& v : *ms) c.mrope_sections.push_back(v.get<int32_t>());
  c.n_mtp = get_int_or(j, "mtp_num_hidden_layers", where, 0);
}

// gpt-oss: experts with biases and a clamped SwiGLU (its constants are the
// engine's: alpha 1.702, limit = swiglu_limit must be 7), attention sinks,
// sliding-window attention on the layers layer_types marks.
void read_gpt_oss(const json& j, const std::string& where, HfModelConfig& c) {
  c.n_expert = field(j, "num_local_experts") ? get_int(j, "num_local_experts", where) : get_int(j, "num_experts", where);
  c.n_expert_used = field(j, "num_experts_per_tok") ? get_int(j, "num_experts_per_tok", where)
                                                    : get_int(j, "experts_per_token", where);
  c.n_ff_exp = get_int(j, "intermediate_size", where);
  c.n_ff = c.n_ff_exp;
  c.norm_topk_prob = false;  // softmax over the k chosen logits: already sums to 1
  c.attn_bias = true;
  c.attn_out_bias = true;
  // The published checkpoints store the expert matrices in MXFP4
  // (*_blocks / *_scales): repacked into GGUF MXFP4 blocks as they are.
  if (const json* q = field(j, "quantization_config"); q && q->is_object()) {
    const std::string method = q->value("quant_method", "");
    if (method != "mxfp4")
      throw Error(where + ": quantization_config.quant_method '" + method +
                  "' is not supported (gpt-oss: bf16/f32 experts or the published mxfp4)");
    c.mxfp4_experts = true;
  }
  const double limit = get_float_or(j, "swiglu_limit", where, 7.0);
  if (limit != 7.0)
    throw Error(where + ": swiglu_limit " + std::to_string(limit) + " is not gpt-oss's 7, which moestream computes with");
  c.sliding_window = get_int(j, "sliding_window", where);
  c.swa_layers.assign(static_cast<size_t>(c.n_layer), false);
  if (const json* lt = field(j, "layer_types")) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.n_layer)
      throw Error(where + ": layer_types must list one kind per layer (" + std::to_string(c.n_layer) + ")");
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const json& k = (*lt)[static_cast<size_t>(il)];
      if (k != "sliding_attention" && k != "full_attention")
        throw Error(where + ": layer_types[" + std::to_string(il) + "] is " + k.dump() +
                    "; a gpt_oss layer is \"sliding_attention\" or \"full_attention\"");
      c.swa_layers[static_cast<size_t>(il)] = k == "sliding_attention";
    }
  } else {
    for (int64_t il = 0; il < c.n_layer; il += 2) c.swa_layers[static_cast<size_t>(il)] = true;
  }
}

}  // namespace

const char* hf_supported_model_types() {
  return "qwen3_moe, qwen3_5_moe (and qwen3_5_moe_text), gpt_oss, mixtral, llama, mistral, qwen2, qwen3";
}

HfModelConfig parse_hf_config(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(where + ": expected a JSON object");

  // Which architecture: model_type first, the class name as a fallback.
  std::string model_type = j.value("model_type", std::string());
  std::string class_name;
  if (const json* a = field(j, "architectures"); a && a->is_array() && !a->empty() && (*a)[0].is_string())
    class_name = (*a)[0].get<std::string>();
  const ArchName* found = nullptr;
  for (const ArchName& a : kArchs)
    if (!model_type.empty() ? model_type == a.model_type : class_name == a.class_name) found = &a;
  if (!found)
    throw Error(where + ": model_type '" + model_type + "' (architectures: '" + class_name +
                "') is not supported by moestream convert; supported model types: " +
                hf_supported_model_types());

  HfModelConfig c;
  c.arch = found->arch;
  c.model_type = found->model_type;
  c.gguf_arch = found->gguf_arch;
  if (const json* n = field(j, "_name_or_path"); n && n->is_string()) c.name = n->get<std::string>();
  // Qwen3.5's image-text checkpoints: the text model's fields are under
  // text_config, its tensors under model.language_model.
  std::optional<bool> top_tie;
  if (c.model_type == "qwen3_5_moe") {
    const json* t = field(j, "text_config");
    if (!t || !t->is_object()) throw Error(where + ": model_type qwen3_5_moe without a text_config object");
    if (const json* tie = field(j, "tie_word_embeddings"); tie && tie->is_boolean()) top_tie = tie->get<bool>();
    const json text = *t;
    j = text;
    c.prefix = "model.language_model.";
  }

  c.n_vocab = get_int(j, "vocab_size", where);
  c.n_embd = get_int(j, "hidden_size", where);
  c.n_layer = get_int(j, "num_hidden_layers", where);
  c.n_head = get_int(j, "num_attention_heads", where);
  c.n_head_kv = get_int_or(j, "num_key_value_heads", where, c.n_head);
  if (c.n_embd % c.n_head != 0 && !field(j, "head_dim"))
    throw Error(where + ": hidden_size " + std::to_string(c.n_embd) + " is not a multiple of num_attention_heads " +
                std::to_string(c.n_head) + " and no head_dim is given");
  c.head_dim = get_int_or(j, "head_dim", where, c.n_embd / c.n_head);
  if (c.n_head % c.n_head_kv != 0)
    throw Error(where + ": num_attention_heads " + std::to_string(c.n_head) +
                " is not a multiple of num_key_value_heads " + std::to_string(c.n_head_kv));
  if (c.head_dim % 2 != 0)
    throw Error(where + ": head_dim " + std::to_string(c.head_dim) + " is odd; RoPE needs an even head size");
  c.n_ctx = get_int_or(j, "max_position_embeddings", where, 4096);

  const bool llama_family = c.arch == HfArch::Mixtral || c.arch == HfArch::Llama;
  c.rms_eps = get_float_or(j, "rms_norm_eps", where, llama_family ? 1e-5 : 1e-6);
  read_rope(j, where, c.arch == HfArch::Mixtral ? 1e6 : 10000.0, c);
  c.tie_embeddings = top_tie ? *top_tie : get_bool_or(j, "tie_word_embeddings", where, false);
  c.permute_qk = llama_family;
  c.qk_norm = c.arch == HfArch::Qwen3Moe || c.arch == HfArch::Qwen3 || c.arch == HfArch::Qwen35Moe;
  const bool attention_bias = get_bool_or(j, "attention_bias", where, false);
  c.attn_bias = c.arch == HfArch::Qwen2 || attention_bias;
  c.attn_out_bias = c.arch != HfArch::Qwen2 && attention_bias;

  const std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu" && act != "swish")
    throw Error(where + ": hidden_act '" + act + "' is not supported (moestream computes SwiGLU with SiLU)");

  switch (c.arch) {
    case HfArch::Qwen3Moe: {
      c.n_expert = field(j, "num_experts") ? get_int(j, "num_experts", where) : get_int(j, "num_local_experts", where);
      c.n_expert_used = get_int(j, "num_experts_per_tok", where);
      c.n_ff_exp = get_int(j, "moe_intermediate_size", where);
      c.n_ff = get_int_or(j, "intermediate_size", where, c.n_ff_exp);
      c.norm_topk_prob = get_bool_or(j, "norm_topk_prob", where, false);
      const int64_t step = get_int_or(j, "decoder_sparse_step", where, 1);
      const json* only = field(j, "mlp_only_layers");
      const bool has_dense = step != 1 || (only && only->is_array() && !only->empty());
      if (has_dense)
        throw Error(where + ": this Qwen3-MoE has dense MLP layers (decoder_sparse_step=" + std::to_string(step) +
                    ", mlp_only_layers=" + (only ? only->dump() : "[]") +
                    "); the qwen3moe GGUF layout has experts in every layer, so it cannot be converted");
      break;
    }
    case HfArch::Qwen35Moe:
      read_qwen35(j, where, c);
      break;
    case HfArch::GptOss:
      read_gpt_oss(j, where, c);
      break;
    case HfArch::Mixtral:
      c.n_ff = get_int(j, "intermediate_size", where);
      c.n_expert = get_int(j, "num_local_experts", where);
      c.n_expert_used = get_int(j, "num_experts_per_tok", where);
      c.n_ff_exp = c.n_ff;
      c.norm_topk_prob = true;  // Mixtral renormalises its top-k softmax weights
      break;
    default:
      c.n_ff = get_int(j, "intermediate_size", where);
      break;
  }
  if (c.is_moe() && c.n_expert_used > c.n_expert)
    throw Error(where + ": num_experts_per_tok " + std::to_string(c.n_expert_used) + " exceeds the " +
                std::to_string(c.n_expert) + " experts");
  if (const json* sw = field(j, "sliding_window");
      sw && c.arch != HfArch::Qwen3Moe && c.arch != HfArch::Qwen3 && c.arch != HfArch::Qwen2 && c.arch != HfArch::GptOss &&
      sw->is_number_integer() && sw->get<int64_t>() < c.n_ctx)
    throw Error(where + ": sliding_window " + sw->dump() + " is smaller than the context (" +
                std::to_string(c.n_ctx) + "); sliding-window attention is not supported");
  if (get_bool_or(j, "use_sliding_window", where, false))
    throw Error(where + ": use_sliding_window is true; sliding-window attention is not supported");
  return c;
}

HfModelConfig read_hf_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open (is " + dir + " a Hugging Face model directory?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hf_config(ss.str(), path);
}

}  // namespace ms
