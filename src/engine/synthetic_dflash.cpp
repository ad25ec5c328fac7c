#include "engine/synthetic_dflash.h"

#include <cmath>
#include <filesystem>
#include <random>
#include <utility>
#include <vector>

#include "engine/synthetic_vocab.h"
#include "format/gguf.h"
#include "util/error.h"

namespace ms {

GenResult generate_dflash(const GenOptions& opt, const std::string& path) {
  if (opt.preset != "tiny") throw Error("gen: the dflash preset is tiny (a drafter for the tiny targets)");
  if (opt.n_layer < 0 || opt.n_layer > kDFlashGenMaxLayers)
    throw Error("gen: --layers for dflash must be in 0.." + std::to_string(kDFlashGenMaxLayers));
  const int n_layer = opt.n_layer > 0 ? opt.n_layer : 2;
  const int64_t D = 256, n_ff = 512, V = 512, hd = 64;
  const int n_head = 4, n_kv = 2, block = 16;
  const std::vector<int32_t> target_layers = {1, 3};

  GgufWriter w(path);
  const std::string A = "dflash.";
  w.set("general.architecture", GgufValue::of_string("dflash"));
  w.set("general.name", GgufValue::of_string("tiny-dflash"));
  w.set(A + "block_count", GgufValue::of_u32(static_cast<uint32_t>(n_layer)));
  w.set(A + "embedding_length", GgufValue::of_u32(static_cast<uint32_t>(D)));
  w.set(A + "feed_forward_length", GgufValue::of_u32(static_cast<uint32_t>(n_ff)));
  w.set(A + "context_length", GgufValue::of_u32(2048));
  w.set(A + "attention.head_count", GgufValue::of_u32(n_head));
  w.set(A + "attention.head_count_kv", GgufValue::of_u32(n_kv));
  w.set(A + "attention.key_length", GgufValue::of_u32(static_cast<uint32_t>(hd)));
  w.set(A + "attention.value_length", GgufValue::of_u32(static_cast<uint32_t>(hd)));
  w.set(A + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-6f));
  w.set(A + "rope.freq_base", GgufValue::of_f32(1e6f));
  w.set(A + "block_size", GgufValue::of_u32(block));
  w.set(A + "target_layers", GgufValue::of_i32s(target_layers));
  w.set("moestream.synthetic.seed", GgufValue::of_u64(opt.seed));
  write_vocab_metadata(w, make_synthetic_vocab(static_cast<int32_t>(V)));
  // An ordinary token below the three control tokens at the end.
  w.set("tokenizer.ggml.mask_token_id", GgufValue::of_u32(static_cast<uint32_t>(V - 4)));

  // (name, shape {cols, rows}, standard deviation; 0: a norm).
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  std::vector<float> stddev;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    stddev.push_back(shape.size() == 1 ? 0.0f : 1.0f / std::sqrt(static_cast<float>(shape[0])));
    tensors.emplace_back(name, std::move(shape));
  };
  add("fc.weight", {static_cast<int64_t>(target_layers.size()) * D, D});
  add("enc.output_norm.weight", {D});
  for (int il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", {D});
    add(p + "attn_q.weight", {D, n_head * hd});
    add(p + "attn_k.weight", {D, n_kv * hd});
    add(p + "attn_v.weight", {D, n_kv * hd});
    add(p + "attn_output.weight", {n_head * hd, D});
    add(p + "attn_q_norm.weight", {hd});
    add(p + "attn_k_norm.weight", {hd});
    add(p + "ffn_norm.weight", {D});
    add(p + "ffn_gate.weight", {D, n_ff});
    add(p + "ffn_up.weight", {D, n_ff});
    add(p + "ffn_down.weight", {n_ff, D});
  }
  add("output_norm.weight", {D});
  for (const auto& [name, shape] : tensors) w.add_tensor(name, DType::F32, shape);
  w.write_header();

  GenResult res;
  std::mt19937_64 rng(opt.seed * 0x9E3779B97F4A7C15ull + 0xDF1A5Bull);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float sqrt3 = std::sqrt(3.0f);  // U(-a, a) has standard deviation a / sqrt(3)
  std::vector<float> data;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<int64_t>& shape = tensors[i].second;
    data.resize(static_cast<size_t>(shape[0] * (shape.size() > 1 ? shape[1] : 1)));
    for (float& x : data) x = stddev[i] == 0 ? 1.0f + 0.2f * u(rng) : stddev[i] * sqrt3 * u(rng);
    w.write_tensor_data(data.data(), data.size() * sizeof(float));
  }
  w.finish();
  res.shape.gguf_arch = "dflash";
  res.shape.name = "tiny-dflash";
  res.shape.n_layer = n_layer;
  res.shape.n_embd = D;
  res.shape.n_vocab = V;
  res.n_tensors = tensors.size();
  res.mix = "f32 " + std::to_string(tensors.size());
  res.file_bytes = std::filesystem::file_size(path);
  return res;
}

}  // namespace ms
