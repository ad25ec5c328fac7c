#include "model/hparams.h"

#include <algorithm>

#include "format/gguf.h"
#include "model/tensor_roles.h"
#include "util/error.h"

namespace ms {
namespace {

// What hparams needs to know per architecture beyond the common keys.
struct ArchHParamRules {
  const char* name;
  bool moe;                    // routed experts required (expert_count > 0)
  int default_full_attn_every; // >0: linear-attention hybrid; every Nth layer has softmax attention
  int default_swa_pattern = 0; // >0: sliding window on layers il % n < n - 1 (needs attention.sliding_window)
};

// Architectures whose required keys are known. Others still get everything
// the common keys say (inspect works on any GGUF).
constexpr ArchHParamRules kArchRules[] = {
    {"llama", false, 0},      // Mixtral is llama with expert_count > 0
    {"qwen2", false, 0},
    {"qwen3", false, 0},
    {"qwen2moe", true, 0},
    {"qwen3moe", true, 0},
    {"qwen3next", true, 4},
    {"qwen35moe", true, 4},
    {"deepseek2", true, 0},
    {"olmoe", true, 0},
    {"granitemoe", true, 0},
    {"phimoe", true, 0},
    {"gpt-oss", true, 0, 2},
};

const ArchHParamRules* find_rules(const std::string& arch) {
  for (const auto& r : kArchRules)
    if (arch == r.name) return &r;
  return nullptr;
}

// Layer counts beyond this are a corrupt file, not a model (and would make
// per-layer vectors huge).
constexpr int64_t kMaxLayers = 65536;

// A count that may be one integer or one integer per layer (some hybrids
// store head_count_kv per layer, 0 for layers without attention).
struct Count {
  int64_t value = 0;                // the scalar, or the largest per-layer value
  std::vector<int64_t> per_layer;   // empty for a scalar
  bool present = false;
};

Count read_count(const GgufFile& f, const std::string& key) {
  Count c;
  const GgufValue* v = f.find(key);
  if (!v) return c;
  c.present = true;
  if (v->type == GgufType::ARRAY) {
    for (const GgufValue& e : v->arr) {
      const int64_t x = e.as_int(key);
      c.per_layer.push_back(x);
      c.value = std::max(c.value, x);
    }
  } else {
    c.value = f.get_int(key);
  }
  return c;
}

// The width of one expert's FFN from the expert tensors of any layer.
int64_t infer_n_ff_exp(const GgufFile& f) {
  for (const GgufTensorInfo& t : f.tensors()) {
    const TensorClass c = classify_tensor(t.name);
    if (c.suffix != "weight" || t.shape.size() < 2) continue;
    switch (c.role) {
      case TensorRole::ExpertGate:
      case TensorRole::ExpertUp: return t.shape[1];         // {n_embd, n_ff_exp, (n_expert)}
      case TensorRole::ExpertDown: return t.shape[0];       // {n_ff_exp, n_embd, (n_expert)}
      case TensorRole::ExpertGateUp: return t.shape[1] / 2;  // gate rows then up rows
      default: break;
    }
  }
  return 0;
}

}  // namespace

int ModelHParams::n_attention_layers() const {
  return static_cast<int>(std::count(layer_has_attention.begin(), layer_has_attention.end(), true));
}

uint64_t ModelHParams::kv_cache_bytes(int64_t n_ctx, int kv_bytes_per_32) const {
  uint64_t per_token = 0;
  const size_t trunk = static_cast<size_t>(std::max<int64_t>(n_layer - n_layer_nextn, 0));
  for (size_t il = 0; il < n_head_kv_layer.size() && il < trunk; ++il)
    if (layer_has_attention[il])
      per_token += static_cast<uint64_t>(n_head_kv_layer[il]) * static_cast<uint64_t>(head_dim + head_dim_v) *
                   static_cast<uint64_t>(kv_bytes_per_32) / 32;
  return per_token * static_cast<uint64_t>(std::max<int64_t>(n_ctx, 0));
}

uint64_t ModelHParams::recurrent_state_bytes() const {
  if (ssm_dt_rank <= 0 || ssm_group_count <= 0) return 0;
  const uint64_t head_v = static_cast<uint64_t>(ssm_inner_size / ssm_dt_rank);
  const uint64_t conv_dim = static_cast<uint64_t>(2 * ssm_group_count * ssm_state_size + ssm_inner_size);
  const uint64_t per_layer = (static_cast<uint64_t>(std::max<int64_t>(ssm_conv_kernel - 1, 0)) * conv_dim +
                              static_cast<uint64_t>(ssm_dt_rank) * static_cast<uint64_t>(ssm_state_size) * head_v) *
                             4;
  const uint64_t n = static_cast<uint64_t>(std::count(layer_is_recurrent.begin(), layer_is_recurrent.end(), true));
  return n * per_layer;
}

void ModelHParams::require_complete(const std::string& path) const {
  if (problems.empty()) return;
  std::string msg = path + ": " + problems.front();
  if (problems.size() > 1) msg += " (and " + std::to_string(problems.size() - 1) + " more: " + problems[1] + (problems.size() > 2 ? ", ..." : "") + ")";
  throw Error(msg + "; the file lacks hyper-parameters moestream needs to run it");
}

namespace {

ModelHParams read_metadata(const GgufFile& f) {
  ModelHParams h;
  auto problem = [&](const std::string& key, const std::string& why) {
    h.problems.push_back("metadata key '" + key + "' " + why);
  };
  if (!f.has("general.architecture")) {
    problem("general.architecture", "is missing");
  } else {
    h.arch = f.get_string("general.architecture");
  }
  h.name = f.get_string("general.name", "");
  const ArchHParamRules* rules = find_rules(h.arch);
  h.known_arch = rules != nullptr;
  h.moe_arch = rules && rules->moe;
  const std::string p = h.arch + ".";

  // A positive count that the model cannot run without.
  auto required = [&](const std::string& key) -> int64_t {
    if (!f.has(key)) {
      problem(key, "is missing");
      return 0;
    }
    const int64_t v = f.get_int(key);
    if (v <= 0) problem(key, "is " + std::to_string(v) + ", must be > 0");
    return std::max<int64_t>(v, 0);
  };
  auto optional = [&](const std::string& key, int64_t def) -> int64_t {
    const int64_t v = f.get_int(key, def);
    if (v < 0) problem(key, "is " + std::to_string(v) + ", must be >= 0");
    return std::max<int64_t>(v, 0);
  };

  h.n_layer = required(p + "block_count");
  if (h.n_layer > kMaxLayers) {
    problem(p + "block_count", "is " + std::to_string(h.n_layer) + ", implausibly many layers");
    h.n_layer = 0;
  }
  h.n_embd = required(p + "embedding_length");

  const Count heads = read_count(f, p + "attention.head_count");
  if (!heads.present) problem(p + "attention.head_count", "is missing");
  else if (heads.value <= 0) problem(p + "attention.head_count", "must be > 0");
  h.n_head = std::max<int64_t>(heads.value, 0);
  const Count kv_heads = read_count(f, p + "attention.head_count_kv");
  h.n_head_kv = kv_heads.present ? std::max<int64_t>(kv_heads.value, 0) : h.n_head;
  h.head_dim = optional(p + "attention.key_length", h.n_head > 0 ? h.n_embd / h.n_head : 0);
  h.head_dim_v = optional(p + "attention.value_length", h.head_dim);
  h.n_ctx_train = optional(p + "context_length", 0);

  h.n_ff = optional(p + "feed_forward_length", 0);
  h.n_expert = optional(p + "expert_count", 0);
  h.n_expert_used = optional(p + "expert_used_count", 0);
  h.n_expert_shared = optional(p + "expert_shared_count", 0);
  if (h.moe_arch && h.n_expert == 0) problem(p + "expert_count", f.has(p + "expert_count") ? "must be > 0" : "is missing");
  if (h.n_expert > 0) {
    if (!f.has(p + "expert_used_count")) problem(p + "expert_used_count", "is missing");
    else if (h.n_expert_used == 0 || h.n_expert_used > h.n_expert)
      problem(p + "expert_used_count", "is " + std::to_string(h.n_expert_used) + ", must be in 1.." +
                                          std::to_string(h.n_expert));
    h.n_ff_exp = optional(p + "expert_feed_forward_length", 0);
    if (h.n_ff_exp == 0) h.n_ff_exp = infer_n_ff_exp(f);
  } else if (h.known_arch && !h.moe_arch && h.n_ff == 0) {
    problem(p + "feed_forward_length", "is missing");
  }
  if (const GgufValue* v = f.find(p + "expert_weights_norm")) h.expert_weights_norm = v->as_bool(p + "expert_weights_norm");

  h.rope_freq_base = f.get_float(p + "rope.freq_base", 0.0);
  h.rms_eps = f.get_float(p + "attention.layer_norm_rms_epsilon", 0.0);

  if (const GgufValue* toks = f.find("tokenizer.ggml.tokens"); toks && toks->type == GgufType::ARRAY)
    h.n_vocab = static_cast<int64_t>(toks->arr.size());
  else if (const GgufTensorInfo* e = f.find_tensor("token_embd.weight"); e && e->shape.size() >= 2)
    h.n_vocab = e->shape[1];

  // Which layers have softmax attention (and so a KV cache).
  const int64_t every = rules ? rules->default_full_attn_every : 0;
  h.full_attention_interval = optional(p + "full_attention_interval", every);
  h.n_layer_nextn = optional(p + "nextn_predict_layers", 0);
  if (h.n_layer_nextn >= h.n_layer && h.n_layer > 0) {
    problem(p + "nextn_predict_layers", "is " + std::to_string(h.n_layer_nextn) + ", must be below block_count (" +
                                           std::to_string(h.n_layer) + ")");
    h.n_layer_nextn = 0;
  }
  if (every > 0) {  // a linear-attention hybrid: its Gated DeltaNet shape
    h.ssm_conv_kernel = required(p + "ssm.conv_kernel");
    h.ssm_state_size = required(p + "ssm.state_size");
    h.ssm_group_count = required(p + "ssm.group_count");
    h.ssm_dt_rank = required(p + "ssm.time_step_rank");
    h.ssm_inner_size = required(p + "ssm.inner_size");
    if (h.ssm_group_count > 0 && h.ssm_dt_rank > 0 && h.ssm_dt_rank % h.ssm_group_count != 0)
      problem(p + "ssm.time_step_rank", "is " + std::to_string(h.ssm_dt_rank) + ", must be a multiple of ssm.group_count (" +
                                            std::to_string(h.ssm_group_count) + ")");
    if (h.ssm_dt_rank > 0 && h.ssm_inner_size % h.ssm_dt_rank != 0)
      problem(p + "ssm.inner_size", "is " + std::to_string(h.ssm_inner_size) +
                                        ", must be a multiple of ssm.time_step_rank (" + std::to_string(h.ssm_dt_rank) + ")");
  }
  h.n_head_kv_layer.assign(static_cast<size_t>(h.n_layer), h.n_head_kv);
  if (!kv_heads.per_layer.empty()) {
    if (static_cast<int64_t>(kv_heads.per_layer.size()) != h.n_layer)
      problem(p + "attention.head_count_kv", "has " + std::to_string(kv_heads.per_layer.size()) +
                                                 " per-layer values for " + std::to_string(h.n_layer) + " layers");
    for (size_t il = 0; il < h.n_head_kv_layer.size() && il < kv_heads.per_layer.size(); ++il)
      h.n_head_kv_layer[il] = std::max<int64_t>(kv_heads.per_layer[il], 0);
  }
  // Linear attention in the main stack only: MTP blocks (the last
  // n_layer_nextn) are full-attention blocks whatever their index.
  h.layer_is_recurrent.assign(h.n_head_kv_layer.size(), false);
  const GgufValue* rec = every > 0 ? f.find(p + "attention.recurrent_layers") : nullptr;
  if (h.full_attention_interval > 0 && !rec)
    for (int64_t il = 0; il < h.n_layer - h.n_layer_nextn; ++il)
      if ((il + 1) % h.full_attention_interval != 0) {
        h.n_head_kv_layer[static_cast<size_t>(il)] = 0;  // linear attention
        h.layer_is_recurrent[static_cast<size_t>(il)] = true;
      }
  // llama.cpp's converter also writes the layer kinds themselves (from
  // Hugging Face's layer_types, MTP blocks false); they win over the
  // interval, which it writes as 4 whatever the pattern.
  if (rec) {
    if (rec->type != GgufType::ARRAY || static_cast<int64_t>(rec->arr.size()) != h.n_layer) {
      problem(p + "attention.recurrent_layers", "has " + std::to_string(rec->type == GgufType::ARRAY ? rec->arr.size() : 1) +
                                                    " values for block_count " + std::to_string(h.n_layer));
    } else {
      for (int64_t il = 0; il < h.n_layer; ++il) {
        const bool recurrent = rec->arr[static_cast<size_t>(il)].as_bool(p + "attention.recurrent_layers");
        const bool mtp = il >= h.n_layer - h.n_layer_nextn;
        if (recurrent && mtp) {
          problem(p + "attention.recurrent_layers", "marks MTP block " + std::to_string(il) + " as recurrent");
          continue;
        }
        h.layer_is_recurrent[static_cast<size_t>(il)] = recurrent;
        if (recurrent) h.n_head_kv_layer[static_cast<size_t>(il)] = 0;
      }
    }
  }
  // Sliding-window layers: the pattern key (an array of bools or a period),
  // else the architecture's period; only where a window is given.
  h.layer_is_swa.assign(h.n_head_kv_layer.size(), false);
  const int64_t swa_default = rules ? rules->default_swa_pattern : 0;
  if (swa_default > 0 && !f.has(p + "attention.sliding_window")) problem(p + "attention.sliding_window", "is missing");
  h.sliding_window = optional(p + "attention.sliding_window", 0);
  if (h.sliding_window > 0) {
    const std::string pk = p + "attention.sliding_window_pattern";
    const GgufValue* pat = f.find(pk);
    if (pat && pat->type == GgufType::ARRAY) {
      if (static_cast<int64_t>(pat->arr.size()) != h.n_layer)
        problem(pk, "has " + std::to_string(pat->arr.size()) + " values for block_count " + std::to_string(h.n_layer));
      else
        for (size_t il = 0; il < h.layer_is_swa.size(); ++il) h.layer_is_swa[il] = pat->arr[il].as_bool(pk);
    } else {
      const int64_t period = pat ? f.get_int(pk) : swa_default;
      if (period < 0) problem(pk, "is " + std::to_string(period) + ", must be >= 0");
      for (int64_t il = 0; il < static_cast<int64_t>(h.layer_is_swa.size()); ++il)
        h.layer_is_swa[static_cast<size_t>(il)] = period == 0 || (period > 0 && il % period < period - 1);
    }
  }
  h.layer_has_attention.resize(h.n_head_kv_layer.size());
  for (size_t il = 0; il < h.n_head_kv_layer.size(); ++il) h.layer_has_attention[il] = h.n_head_kv_layer[il] > 0;
  return h;
}

}  // namespace

ModelHParams inspect_hparams(const GgufFile& f) {
  try {
    return read_metadata(f);
  } catch (const Error& e) {
    // Type errors from GgufValue name the key but not the file.
    const std::string msg = e.what();
    if (msg.rfind(f.path() + ": ", 0) == 0) throw;
    throw Error(f.path() + ": " + msg);
  }
}

ModelHParams read_hparams(const GgufFile& f) {
  ModelHParams h = inspect_hparams(f);
  h.require_complete(f.path());
  return h;
}

}  // namespace ms
