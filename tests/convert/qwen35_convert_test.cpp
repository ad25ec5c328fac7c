// `moestream convert` for Qwen3.5/3.6-MoE: a tiny synthetic qwen35moe GGUF is
// written back into the Hugging Face layout (norms minus one, ssm_a to A_log,
// value heads to grouped order, experts per expert, MTP under mtp.*), then
// converted: every tensor must come back as it was, and the config's
// hyper-parameters as metadata. The inverse here is written from the HF
// modeling code's conventions; the forward direction is src/convert.
// Numerical agreement with transformers itself is tools/hf_parity.py's job.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "convert/converter.h"
#include "convert/hf_config.h"
#include "convert/tensor_plan.h"
#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "model/hparams.h"
#include "model/weights.h"
#include "quant/quant.h"
#include "generated_model_test.h"
#include "tiny_checkpoint.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
using test::StEntry;

using test::tensor_values;

class Qwen35ConvertTest : public test::GeneratedModelTest {
 protected:
  void SetUp() override { generate("qwen35moe", 5, "q35conv"); }

  // The HF checkpoint the GGUF came from, by the inverse of every conversion
  // step. With `order`, HF layer L holds the GGUF's layer order[L] and
  // config.json lists each layer's kind in layer_types: a pattern that need
  // not be every 4th layer.
  void write_hf(const fs::path& hf, bool vl_layout, const std::vector<int64_t>& order = {}) {
    const GgufFile& f = *src_;
    const std::string A = "qwen35moe.";
    const int64_t H = f.get_int(A + "embedding_length"), nk = f.get_int(A + "ssm.group_count"),
                  nv = f.get_int(A + "ssm.time_step_rank"), dk = f.get_int(A + "ssm.state_size"),
                  dv = f.get_int(A + "ssm.inner_size") / nv, K = f.get_int(A + "ssm.conv_kernel");
    const int64_t n_layer = f.get_int(A + "block_count") - 1, E = f.get_int(A + "expert_count");
    const int64_t KD = nk * dk, CD = 2 * KD + nv * dv;
    const std::vector<int64_t> vmap = tiled_head_map(nk, nv, dv), hmap = tiled_head_map(nk, nv, 1);
    std::vector<StEntry> out;
    const std::string P = vl_layout ? "model.language_model." : "model.";
    auto put = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
      out.push_back({name, "F32", std::move(shape), test::encode("F32", v)});
    };
    auto get = [&](const std::string& name) { return tensor_values(*f.find_tensor(name)); };
    auto minus1 = [&](std::vector<float> v) {
      for (float& x : v) x -= 1.0f;
      return v;
    };
    // GGUF row i came from HF row map[i]: put it back there.
    auto unrows = [](const std::vector<float>& v, const std::vector<int64_t>& map, int64_t row_len) {
      std::vector<float> r(v.size());
      for (size_t i = 0; i < map.size(); ++i)
        std::copy_n(v.begin() + static_cast<int64_t>(i) * row_len, row_len, r.begin() + map[i] * row_len);
      return r;
    };
    std::vector<int64_t> qkv_map;
    for (int64_t r = 0; r < 2 * KD; ++r) qkv_map.push_back(r);
    for (int64_t r : vmap) qkv_map.push_back(2 * KD + r);

    put(P + "embed_tokens.weight", {f.find_tensor("token_embd.weight")->shape[1], H}, get("token_embd.weight"));
    put(P + "norm.weight", {H}, minus1(get("output_norm.weight")));
    put("lm_head.weight", {f.find_tensor("output.weight")->shape[1], H}, get("output.weight"));
    nlohmann::json layer_types = nlohmann::json::array();
    for (int64_t L = 0; L <= n_layer; ++L) {
      const bool mtp = L == n_layer;
      const std::string b = "blk." + std::to_string(mtp || order.empty() ? L : order[static_cast<size_t>(L)]) + ".";
      if (!mtp) layer_types.push_back(f.find_tensor(b + "attn_qkv.weight") ? "linear_attention" : "full_attention");
      const std::string hf_l = mtp ? "mtp.layers.0." : P + "layers." + std::to_string(L) + ".";
      put(hf_l + "input_layernorm.weight", {H}, minus1(get(b + "attn_norm.weight")));
      put(hf_l + "post_attention_layernorm.weight", {H}, minus1(get(b + "post_attention_norm.weight")));
      if (f.find_tensor(b + "attn_qkv.weight")) {
        const std::string la = hf_l + "linear_attn.";
        put(la + "in_proj_qkv.weight", {CD, H}, unrows(get(b + "attn_qkv.weight"), qkv_map, H));
        put(la + "in_proj_z.weight", {nv * dv, H}, unrows(get(b + "attn_gate.weight"), vmap, H));
        put(la + "in_proj_b.weight", {nv, H}, unrows(get(b + "ssm_beta.weight"), hmap, H));
        put(la + "in_proj_a.weight", {nv, H}, unrows(get(b + "ssm_alpha.weight"), hmap, H));
        auto a = get(b + "ssm_a");
        for (float& x : a) x = std::log(-x);
        put(la + "A_log", {nv}, unrows(a, hmap, 1));
        put(la + "dt_bias", {nv}, unrows(get(b + "ssm_dt.bias"), hmap, 1));
        put(la + "conv1d.weight", {CD, 1, K}, unrows(get(b + "ssm_conv1d.weight"), qkv_map, K));
        put(la + "norm.weight", {dv}, get(b + "ssm_norm.weight"));
        const auto o = get(b + "ssm_out.weight");  // [H][VD]: columns in tiled order
        std::vector<float> oh(o.size());
        for (int64_t r = 0; r < H; ++r)
          for (size_t i = 0; i < vmap.size(); ++i)
            oh[static_cast<size_t>(r * nv * dv + vmap[i])] = o[static_cast<size_t>(r * nv * dv) + i];
        put(la + "out_proj.weight", {H, nv * dv}, oh);
      } else {
        const std::string at = hf_l + "self_attn.";
        for (const char* w : {"q", "k", "v"}) {
          const GgufTensorInfo& t = *f.find_tensor(b + "attn_" + w + ".weight");
          put(at + w + "_proj.weight", {t.shape[1], t.shape[0]}, tensor_values(t));
        }
        const GgufTensorInfo& o = *f.find_tensor(b + "attn_output.weight");
        put(at + "o_proj.weight", {o.shape[1], o.shape[0]}, tensor_values(o));
        put(at + "q_norm.weight", {o.shape[0] / f.get_int(A + "attention.head_count")}, minus1(get(b + "attn_q_norm.weight")));
        put(at + "k_norm.weight", {o.shape[0] / f.get_int(A + "attention.head_count")}, minus1(get(b + "attn_k_norm.weight")));
      }
      put(hf_l + "mlp.gate.weight", {E, H}, get(b + "ffn_gate_inp.weight"));
      const GgufTensorInfo& g = *f.find_tensor(b + "ffn_gate_exps.weight");
      const int64_t F = g.shape[1];
      const auto ge = tensor_values(g), ue = get(b + "ffn_up_exps.weight"), de = get(b + "ffn_down_exps.weight");
      for (int64_t e = 0; e < E; ++e) {
        const std::string ex = hf_l + "mlp.experts." + std::to_string(e) + ".";
        put(ex + "gate_proj.weight", {F, H}, std::vector<float>(ge.begin() + e * F * H, ge.begin() + (e + 1) * F * H));
        put(ex + "up_proj.weight", {F, H}, std::vector<float>(ue.begin() + e * F * H, ue.begin() + (e + 1) * F * H));
        put(ex + "down_proj.weight", {H, F}, std::vector<float>(de.begin() + e * F * H, de.begin() + (e + 1) * F * H));
      }
      const int64_t S = f.get_int(A + "expert_shared_feed_forward_length");
      put(hf_l + "mlp.shared_expert.gate_proj.weight", {S, H}, get(b + "ffn_gate_shexp.weight"));
      put(hf_l + "mlp.shared_expert.up_proj.weight", {S, H}, get(b + "ffn_up_shexp.weight"));
      put(hf_l + "mlp.shared_expert.down_proj.weight", {H, S}, get(b + "ffn_down_shexp.weight"));
      put(hf_l + "mlp.shared_expert_gate.weight", {1, H}, get(b + "ffn_gate_inp_shexp.weight"));
      if (mtp) {
        put("mtp.fc.weight", {H, 2 * H}, get(b + "nextn.eh_proj.weight"));
        put("mtp.pre_fc_norm_embedding.weight", {H}, minus1(get(b + "nextn.enorm.weight")));
        put("mtp.pre_fc_norm_hidden.weight", {H}, minus1(get(b + "nextn.hnorm.weight")));
        put("mtp.norm.weight", {H}, minus1(get(b + "nextn.shared_head_norm.weight")));
      }
    }
    if (vl_layout) put("model.visual.patch_embed.proj.weight", {4, 4}, std::vector<float>(16, 0.5f));
    fs::create_directories(hf);
    test::write_safetensors(hf / "model.safetensors", out);
    nlohmann::json text = {
        {"vocab_size", f.find_tensor("token_embd.weight")->shape[1]},
        {"hidden_size", H},
        {"num_hidden_layers", n_layer},
        {"num_attention_heads", f.get_int(A + "attention.head_count")},
        {"num_key_value_heads", f.get_int(A + "attention.head_count_kv")},
        {"head_dim", f.get_int(A + "attention.key_length")},
        {"max_position_embeddings", f.get_int(A + "context_length")},
        {"rms_norm_eps", f.get_float(A + "attention.layer_norm_rms_epsilon")},
        {"rope_parameters",
         {{"rope_type", "default"}, {"rope_theta", f.get_float(A + "rope.freq_base")}, {"partial_rotary_factor", 0.25},
          {"mrope_section", {3, 3, 2}}, {"mrope_interleaved", true}}},
        {"hidden_act", "silu"},
        {"num_experts", E},
        {"num_experts_per_tok", f.get_int(A + "expert_used_count")},
        {"moe_intermediate_size", f.get_int(A + "expert_feed_forward_length")},
        {"shared_expert_intermediate_size", f.get_int(A + "expert_shared_feed_forward_length")},
        {"linear_conv_kernel_dim", K},
        {"linear_key_head_dim", dk},
        {"linear_value_head_dim", dv},
        {"linear_num_key_heads", nk},
        {"linear_num_value_heads", nv},
        {"full_attention_interval", 4},
        {"mtp_num_hidden_layers", 1},
        {"tie_word_embeddings", false},
    };
    if (!order.empty()) text["layer_types"] = layer_types;
    nlohmann::json cfg = text;
    cfg["model_type"] = "qwen3_5_moe_text";
    cfg["architectures"] = {"Qwen3_5MoeForCausalLM"};
    if (vl_layout)
      cfg = {{"model_type", "qwen3_5_moe"}, {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
             {"text_config", text}, {"tie_word_embeddings", false}};
    std::ofstream(hf / "config.json") << cfg.dump(2);
  }

  // Converts and checks every tensor and the key metadata against the original
  // (blk.L against the original's blk.order[L] when the layers were reordered).
  // The converted file is at dir_/back.gguf.
  void round_trip(bool vl_layout, const std::vector<int64_t>& order = {}) {
    const fs::path hf = dir_ / (vl_layout ? "hf_vl" : order.empty() ? "hf" : "hf_reordered");
    write_hf(hf, vl_layout, order);
    ConvertOptions o;
    o.input_dir = hf.string();
    o.output_path = (dir_ / "back.gguf").string();
    o.type = ConvertType::F32;
    o.with_vocab = false;
    o.progress = false;
    o.threads = 2;
    convert_hf_to_gguf(o);
    auto back = GgufFile::open(o.output_path);
    for (const char* key : {"block_count", "nextn_predict_layers", "ssm.conv_kernel", "ssm.state_size",
                            "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size", "full_attention_interval",
                            "rope.dimension_count", "expert_shared_feed_forward_length", "expert_count"})
      EXPECT_EQ(back->get_int(std::string("qwen35moe.") + key), src_->get_int(std::string("qwen35moe.") + key)) << key;
    EXPECT_EQ(back->get_string("general.architecture"), "qwen35moe");
    size_t n = 0;
    for (const GgufTensorInfo& t : src_->tensors()) {
      std::string name = t.name;
      if (!order.empty() && name.rfind("blk.", 0) == 0) {  // blk.<src>.x is expected at blk.<L>.x
        const size_t dot = name.find('.', 4);
        const int64_t src_layer = std::stoll(name.substr(4, dot - 4));
        const auto at = std::find(order.begin(), order.end(), src_layer);
        if (at != order.end()) name = "blk." + std::to_string(at - order.begin()) + name.substr(dot);
      }
      const GgufTensorInfo* b = back->find_tensor(name);
      ASSERT_NE(b, nullptr) << name << " (from " << t.name << ")";
      ASSERT_EQ(b->shape, t.shape) << name;
      const auto want = tensor_values(t), got = tensor_values(*b);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-6f * (1 + std::fabs(want[i]))) << name << " [" << i << "]";
      ++n;
    }
    EXPECT_EQ(n, back->tensors().size()) << "nothing extra";
  }
};

TEST_F(Qwen35ConvertTest, CausalLmCheckpointRoundTrips) { round_trip(false); }

TEST_F(Qwen35ConvertTest, ImageTextCheckpointConvertsItsTextModel) { round_trip(true); }

// A checkpoint whose full-attention layer is not every 4th (layer_types
// [full, linear, linear, linear]): the converter writes each block's kind as
// attention.recurrent_layers, and the loader builds the model from it.
TEST_F(Qwen35ConvertTest, AnyLayerPatternConvertsWithPerLayerFlags) {
  const int64_t n_main = src_->get_int("qwen35moe.block_count") - 1;
  ASSERT_EQ(n_main, 4) << "the tiny preset changed: pick another order";
  ASSERT_EQ(src_->find_tensor("blk.3.attn_qkv.weight"), nullptr) << "blk.3 is the original's full-attention layer";
  round_trip(false, {3, 0, 1, 2});
  if (HasFatalFailure()) return;
  const std::string path = (dir_ / "back.gguf").string();
  auto back = GgufFile::open(path);
  const GgufValue* rec = back->find("qwen35moe.attention.recurrent_layers");
  ASSERT_NE(rec, nullptr);
  ASSERT_EQ(rec->arr.size(), 5u) << "4 layers and the MTP block";
  const std::vector<bool> want = {false, true, true, true, false};
  for (size_t il = 0; il < want.size(); ++il)
    EXPECT_EQ(rec->arr[il].as_bool("recurrent_layers"), want[il]) << "block " << il;
  const ModelHParams h = inspect_hparams(*back);
  EXPECT_EQ(h.layer_is_recurrent, want);
  // It binds (every tensor's shape agrees with its layer's kind) and runs.
  // (No tokenizer in this file, so the weights are bound without LoadedModel.)
  const ModelWeights w = bind_weights(*back);
  ThreadPool pool(2);
  CpuBackend be(w, pool);
  KvCache kv = be.make_cache(16);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  std::vector<float> logits;
  be.forward(kv, prompt, logits);
  ASSERT_FALSE(logits.empty());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(Qwen35HfConfig, LayerPatternAndHeadsAreChecked) {
  nlohmann::json j = {{"model_type", "qwen3_5_moe_text"}, {"vocab_size", 8}, {"hidden_size", 64},
                      {"num_hidden_layers", 4}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                      {"head_dim", 32}, {"num_experts", 4}, {"num_experts_per_tok", 2},
                      {"moe_intermediate_size", 16}, {"shared_expert_intermediate_size", 16},
                      {"linear_conv_kernel_dim", 4}, {"linear_key_head_dim", 8}, {"linear_value_head_dim", 8},
                      {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}};
  const HfModelConfig c = parse_hf_config(j.dump(), "config.json");
  EXPECT_EQ(c.gguf_arch, "qwen35moe");
  EXPECT_EQ(c.n_rot(), 8) << "partial_rotary_factor defaults to 0.25";
  EXPECT_TRUE(c.is_linear_layer(0));
  EXPECT_FALSE(c.is_linear_layer(3));
  // Any pattern that layer_types lists is taken as it is.
  auto other = j;
  other["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
  const HfModelConfig o = parse_hf_config(other.dump(), "config.json");
  EXPECT_EQ(o.linear_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_FALSE(o.is_linear_layer(1));
  EXPECT_TRUE(o.is_linear_layer(2));
  auto bad = j;
  bad["layer_types"] = {"linear_attention", "sliding_attention", "linear_attention", "full_attention"};
  try {
    parse_hf_config(bad.dump(), "config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer_types[1]"), std::string::npos) << e.what();
  }
  bad["layer_types"] = {"linear_attention", "full_attention"};
  try {
    parse_hf_config(bad.dump(), "config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one kind per layer"), std::string::npos) << e.what();
  }
  bad = j;
  bad["full_attention_interval"] = 0;
  EXPECT_THROW(parse_hf_config(bad.dump(), "config.json"), Error);
  bad = j;
  bad["linear_num_value_heads"] = 3;
  EXPECT_THROW(parse_hf_config(bad.dump(), "config.json"), Error);
  bad = j;
  bad["model_type"] = "qwen3_5_moe";  // image-text config without its text_config
  EXPECT_THROW(parse_hf_config(bad.dump(), "config.json"), Error);
}

}  // namespace
}  // namespace ms
