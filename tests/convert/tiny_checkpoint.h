// Tiny Hugging Face checkpoints written by the tests themselves: config.json,
// model.safetensors (or shards + index), tokenizer.json and
// tokenizer_config.json, for the converter's round-trip tests.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "quant/half.h"

namespace ms::test {

namespace fs = std::filesystem;

struct TinySpec {
  std::string model_type = "qwen3_moe";  // or "mixtral"
  int64_t vocab = 8, hidden = 64, n_layer = 2, n_head = 4, n_head_kv = 2, head_dim = 16;
  int64_t n_expert = 4, top_k = 2, ff_exp = 32;
  bool fused = false;     // transformers 5.x layout: experts.gate_up_proj / experts.down_proj
  bool tie = false;       // tie_word_embeddings (no lm_head)
  std::string dtype = "F32";  // F32, F16 or BF16 for every tensor
  int shards = 1;         // >1: model-0000i-of-0000n.safetensors + index
  bool mixtral_v5_names = false;  // Mixtral under mlp.* (5.x) instead of block_sparse_moe.*
};

// The model's tensors in canonical (per-expert, PyTorch [out, in]) form.
struct TinyModel {
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::vector<float>> values;  // already rounded to the spec's dtype
};

inline bool is_mixtral(const TinySpec& s) { return s.model_type == "mixtral"; }

// Names of the MoE block and of expert e's gate/up/down in the per-expert layout.
inline std::string moe_prefix(const TinySpec& s, int64_t layer) {
  const std::string hf = "model.layers." + std::to_string(layer) + ".";
  return hf + (is_mixtral(s) && !s.mixtral_v5_names ? "block_sparse_moe" : "mlp");
}
inline std::string expert_name(const TinySpec& s, int64_t layer, int64_t e, int which /*0 gate 1 up 2 down*/) {
  static const char* qwen[] = {"gate_proj", "up_proj", "down_proj"};
  static const char* mix[] = {"w1", "w3", "w2"};
  return moe_prefix(s, layer) + ".experts." + std::to_string(e) + "." + (is_mixtral(s) ? mix : qwen)[which] +
         ".weight";
}

inline float round_to(const std::string& dtype, float x) {
  if (dtype == "F16") return f16_to_f32(f32_to_f16(x));
  if (dtype == "BF16") return bf16_to_f32(f32_to_bf16(x));
  return x;
}

inline TinyModel make_tiny_model(const TinySpec& s, uint32_t seed = 7) {
  TinyModel m;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = round_to(s.dtype, u(rng));
    m.shapes[name] = std::move(shape);
    m.values[name] = std::move(v);
  };
  const int64_t H = s.hidden, D = s.head_dim, F = s.ff_exp;
  add("model.embed_tokens.weight", {s.vocab, H});
  add("model.norm.weight", {H});
  if (!s.tie) add("lm_head.weight", {s.vocab, H});
  for (int64_t L = 0; L < s.n_layer; ++L) {
    const std::string hf = "model.layers." + std::to_string(L) + ".";
    add(hf + "input_layernorm.weight", {H});
    add(hf + "post_attention_layernorm.weight", {H});
    add(hf + "self_attn.q_proj.weight", {s.n_head * D, H});
    add(hf + "self_attn.k_proj.weight", {s.n_head_kv * D, H});
    add(hf + "self_attn.v_proj.weight", {s.n_head_kv * D, H});
    add(hf + "self_attn.o_proj.weight", {H, s.n_head * D});
    if (!is_mixtral(s)) {
      add(hf + "self_attn.q_norm.weight", {D});
      add(hf + "self_attn.k_norm.weight", {D});
    }
    add(moe_prefix(s, L) + ".gate.weight", {s.n_expert, H});
    for (int64_t e = 0; e < s.n_expert; ++e) {
      add(expert_name(s, L, e, 0), {F, H});
      add(expert_name(s, L, e, 1), {F, H});
      add(expert_name(s, L, e, 2), {H, F});
    }
  }
  return m;
}

inline nlohmann::json tiny_config(const TinySpec& s) {
  nlohmann::json c = {
      {"model_type", s.model_type},
      {"vocab_size", s.vocab},
      {"hidden_size", s.hidden},
      {"num_hidden_layers", s.n_layer},
      {"num_attention_heads", s.n_head},
      {"num_key_value_heads", s.n_head_kv},
      {"max_position_embeddings", 512},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 1000000.0},
      {"tie_word_embeddings", s.tie},
      {"hidden_act", "silu"},
      {"num_experts_per_tok", s.top_k},
  };
  if (is_mixtral(s)) {
    c["architectures"] = {"MixtralForCausalLM"};
    c["num_local_experts"] = s.n_expert;
    c["intermediate_size"] = s.ff_exp;
    c["sliding_window"] = nullptr;
    if (s.head_dim != s.hidden / s.n_head) c["head_dim"] = s.head_dim;
  } else {
    c["architectures"] = {"Qwen3MoeForCausalLM"};
    c["head_dim"] = s.head_dim;
    c["num_experts"] = s.n_expert;
    c["moe_intermediate_size"] = s.ff_exp;
    c["intermediate_size"] = 3 * s.ff_exp;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array();
  }
  return c;
}

// One tensor of a safetensors file.
struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline std::vector<uint8_t> encode(const std::string& dtype, const std::vector<float>& v) {
  std::vector<uint8_t> b;
  if (dtype == "F32") {
    b.resize(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
  } else {
    b.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = dtype == "F16" ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

inline void write_safetensors(const fs::path& path, const std::vector<StEntry>& entries) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto& e : entries) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  const std::string hs = h.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = hs.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  for (const auto& e : entries)
    out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
}

// The checkpoint's tensors as they go on disk (fused if the spec says so).
inline std::vector<StEntry> checkpoint_entries(const TinySpec& s, const TinyModel& m) {
  std::vector<StEntry> out;
  std::map<std::string, bool> expert_keys;
  if (s.fused)
    for (int64_t L = 0; L < s.n_layer; ++L)
      for (int64_t e = 0; e < s.n_expert; ++e)
        for (int w = 0; w < 3; ++w) expert_keys[expert_name(s, L, e, w)] = true;
  for (const auto& [name, shape] : m.shapes) {
    if (expert_keys.count(name)) continue;
    out.push_back({name, s.dtype, shape, encode(s.dtype, m.values.at(name))});
  }
  if (s.fused) {
    for (int64_t L = 0; L < s.n_layer; ++L) {
      std::vector<float> gate_up, down;
      for (int64_t e = 0; e < s.n_expert; ++e) {
        const auto& g = m.values.at(expert_name(s, L, e, 0));
        const auto& u = m.values.at(expert_name(s, L, e, 1));
        const auto& d = m.values.at(expert_name(s, L, e, 2));
        gate_up.insert(gate_up.end(), g.begin(), g.end());  // gate rows first ...
        gate_up.insert(gate_up.end(), u.begin(), u.end());  // ... then up rows
        down.insert(down.end(), d.begin(), d.end());
      }
      const std::string ex = moe_prefix(s, L) + ".experts.";
      out.push_back({ex + "gate_up_proj", s.dtype, {s.n_expert, 2 * s.ff_exp, s.hidden}, encode(s.dtype, gate_up)});
      out.push_back({ex + "down_proj", s.dtype, {s.n_expert, s.hidden, s.ff_exp}, encode(s.dtype, down)});
    }
  }
  return out;
}

// A byte-level BPE tokenizer with a handful of tokens (ids 0..4).
inline void write_tiny_tokenizer(const fs::path& dir) {
  nlohmann::json tok = {
      {"version", "1.0"},
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}}},
        {"merges", {"a b"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", {{{"id", 4}, {"content", "<|endoftext|>"}, {"special", true}}}},
  };
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  nlohmann::json cfg = {{"eos_token", "<|endoftext|>"}, {"chat_template", "{{ messages }}"}};
  std::ofstream(dir / "tokenizer_config.json") << cfg.dump();
}

inline void write_tiny_checkpoint(const fs::path& dir, const TinySpec& s, const TinyModel& m) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << tiny_config(s).dump(2);
  write_tiny_tokenizer(dir);
  std::vector<StEntry> entries = checkpoint_entries(s, m);
  if (s.shards <= 1) {
    write_safetensors(dir / "model.safetensors", entries);
    return;
  }
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (int k = 0; k < s.shards; ++k) {
    const std::string file = "model-0000" + std::to_string(k + 1) + "-of-0000" + std::to_string(s.shards) +
                             ".safetensors";
    std::vector<StEntry> part;
    for (size_t i = static_cast<size_t>(k); i < entries.size(); i += static_cast<size_t>(s.shards)) {
      part.push_back(entries[i]);
      index["weight_map"][entries[i].name] = file;
    }
    write_safetensors(dir / file, part);
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
}

}  // namespace ms::test
