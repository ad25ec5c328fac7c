// `moestream convert` for gpt-oss (GptOssForCausalLM): a tiny synthetic
// gpt-oss GGUF (f32) is written back into the Hugging Face layout (experts
// transposed to [E, in, out], gate and up interleaved column by column in
// gate_up_proj and its bias, router under mlp.router, sinks under
// self_attn.sinks), then converted: every tensor must come back as it was,
// and the window, its layers and YaRN as metadata. Also: a q8_0 conversion
// (experts and attention q8_0, biases f32) loads and binds; the published
// MXFP4 layout (*_blocks / *_scales) repacks bit for bit; config errors name
// the field.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "convert/converter.h"
#include "convert/hf_config.h"
#include "cpu/thread_pool.h"
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

class GptOssConvertTest : public test::GeneratedModelTest {
 protected:
  void SetUp() override { generate("gpt-oss", 9, "gptoss_conv"); }

  // The HF checkpoint the GGUF came from, by the inverse of each conversion
  // step (transformers' GptOss layout). `layer_types`: written when given.
  void write_hf(const fs::path& hf, const nlohmann::json& layer_types = nullptr) { write_hf_from(*src_, hf, layer_types); }

  // With `mxfp4` the experts go in as the published checkpoints store them:
  // *_blocks [E, out, in/32, 16] (element 2j low, 2j+1 high in byte j) and
  // *_scales [E, out, in/32], from the file's own MXFP4 blocks.
  void write_hf_from(const GgufFile& f, const fs::path& hf, const nlohmann::json& layer_types, bool mxfp4 = false) {
    const std::string A = "gpt-oss.";
    const int64_t H = f.get_int(A + "embedding_length"), n_layer = f.get_int(A + "block_count");
    const int64_t E = f.get_int(A + "expert_count"), F = f.get_int(A + "expert_feed_forward_length");
    const int64_t nh = f.get_int(A + "attention.head_count"), nkv = f.get_int(A + "attention.head_count_kv");
    const int64_t hd = f.get_int(A + "attention.key_length"), V = f.find_tensor("token_embd.weight")->shape[1];
    std::vector<StEntry> out;
    auto put = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
      out.push_back({name, "F32", std::move(shape), test::encode("F32", v)});
    };
    auto get = [&](const std::string& name) { return tensor_values(*f.find_tensor(name)); };
    put("model.embed_tokens.weight", {V, H}, get("token_embd.weight"));
    put("model.norm.weight", {H}, get("output_norm.weight"));
    put("lm_head.weight", {V, H}, get("output.weight"));
    for (int64_t L = 0; L < n_layer; ++L) {
      const std::string b = "blk." + std::to_string(L) + ".", hf_l = "model.layers." + std::to_string(L) + ".";
      const std::string at = hf_l + "self_attn.";
      put(hf_l + "input_layernorm.weight", {H}, get(b + "attn_norm.weight"));
      put(hf_l + "post_attention_layernorm.weight", {H}, get(b + "post_attention_norm.weight"));
      put(at + "q_proj.weight", {nh * hd, H}, get(b + "attn_q.weight"));
      put(at + "k_proj.weight", {nkv * hd, H}, get(b + "attn_k.weight"));
      put(at + "v_proj.weight", {nkv * hd, H}, get(b + "attn_v.weight"));
      put(at + "o_proj.weight", {H, nh * hd}, get(b + "attn_output.weight"));
      put(at + "q_proj.bias", {nh * hd}, get(b + "attn_q.bias"));
      put(at + "k_proj.bias", {nkv * hd}, get(b + "attn_k.bias"));
      put(at + "v_proj.bias", {nkv * hd}, get(b + "attn_v.bias"));
      put(at + "o_proj.bias", {H}, get(b + "attn_output.bias"));
      put(at + "sinks", {nh}, get(b + "attn_sinks.weight"));
      put(hf_l + "mlp.router.weight", {E, H}, get(b + "ffn_gate_inp.weight"));
      put(hf_l + "mlp.router.bias", {E}, get(b + "ffn_gate_inp.bias"));
      if (mxfp4) {
        // GGUF block: scale, then byte i = element i (low) | element i + 16 (high).
        auto codes = [](const uint8_t* blk, int n) { return n < 16 ? blk[1 + n] & 0x0F : blk[1 + n - 16] >> 4; };
        auto hf_rows = [&](const std::string& gname, int64_t rows_per_e, int64_t in, int64_t interleave, int64_t which,
                           std::vector<uint8_t>& blocks, std::vector<uint8_t>& scales) {
          const GgufTensorInfo* t = f.find_tensor(gname);
          const int64_t nb = in / 32, out_rows = rows_per_e * interleave;
          blocks.resize(static_cast<size_t>(E * out_rows * nb * 16));
          scales.resize(static_cast<size_t>(E * out_rows * nb));
          for (int64_t e = 0; e < E; ++e)
            for (int64_t r = 0; r < rows_per_e; ++r)
              for (int64_t bi = 0; bi < nb; ++bi) {
                const uint8_t* blk = t->data + ((e * rows_per_e + r) * nb + bi) * 17;
                const int64_t hr = e * out_rows + r * interleave + which;
                scales[static_cast<size_t>(hr * nb + bi)] = blk[0];
                for (int j = 0; j < 16; ++j)
                  blocks[static_cast<size_t>((hr * nb + bi) * 16 + j)] =
                      static_cast<uint8_t>(codes(blk, 2 * j) | (codes(blk, 2 * j + 1) << 4));
              }
        };
        // The checkpoint's meaning of its blocks (transformers' MXFP4
        // dequantization: FP4 E2M1 code, low nibble = even element, times
        // 2^(scale - 127)) must be the GGUF file's values: so the layout
        // written here is the published one, not just the inverse of ours.
        auto hf_value = [](const std::vector<uint8_t>& blocks, const std::vector<uint8_t>& scales, int64_t row,
                           int64_t nb, int64_t n) {
          static const float lut[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
          const int64_t bi = n / 32, j = n % 32;
          const uint8_t byte = blocks[static_cast<size_t>((row * nb + bi) * 16 + j / 2)];
          const int code = j % 2 == 0 ? byte & 0x0F : byte >> 4;
          return std::ldexp(lut[code], static_cast<int>(scales[static_cast<size_t>(row * nb + bi)]) - 127);
        };
        std::vector<uint8_t> gub, gus, ub, us, db, dsc;
        hf_rows(b + "ffn_gate_exps.weight", F, H, 2, 0, gub, gus);
        hf_rows(b + "ffn_up_exps.weight", F, H, 2, 1, ub, us);
        for (size_t i = 0; i < gub.size(); ++i) gub[i] |= ub[i];  // disjoint rows (zeros elsewhere)
        for (size_t i = 0; i < gus.size(); ++i) gus[i] |= us[i];
        hf_rows(b + "ffn_down_exps.weight", H, F, 1, 0, db, dsc);
        {  // expert 1's first up row and its first down row, element by element
          const auto up_vals = get(b + "ffn_up_exps.weight"), down_vals = get(b + "ffn_down_exps.weight");
          for (int64_t n = 0; n < H; ++n)
            EXPECT_EQ(hf_value(gub, gus, 1 * 2 * F + 1, H / 32, n), up_vals[static_cast<size_t>(1 * F * H + n)]) << n;
          for (int64_t n = 0; n < F; ++n)
            EXPECT_EQ(hf_value(db, dsc, 1 * H, F / 32, n), down_vals[static_cast<size_t>(1 * H * F + n)]) << n;
        }
        out.push_back({hf_l + "mlp.experts.gate_up_proj_blocks", "U8", {E, 2 * F, H / 32, 16}, gub});
        out.push_back({hf_l + "mlp.experts.gate_up_proj_scales", "U8", {E, 2 * F, H / 32}, gus});
        out.push_back({hf_l + "mlp.experts.down_proj_blocks", "U8", {E, H, F / 32, 16}, db});
        out.push_back({hf_l + "mlp.experts.down_proj_scales", "U8", {E, H, F / 32}, dsc});
      }
      // GGUF gate/up {H, F, E}: [e][f][h]; HF gate_up_proj [E, H, 2F]: [e][h][2f (+1 for up)].
      const auto g = get(b + "ffn_gate_exps.weight"), u = get(b + "ffn_up_exps.weight");
      const auto d = get(b + "ffn_down_exps.weight");
      std::vector<float> gu(static_cast<size_t>(E * H * 2 * F)), dn(static_cast<size_t>(E * F * H));
      for (int64_t e = 0; e < E; ++e)
        for (int64_t fi = 0; fi < F; ++fi)
          for (int64_t h = 0; h < H; ++h) {
            gu[static_cast<size_t>((e * H + h) * 2 * F + 2 * fi)] = g[static_cast<size_t>((e * F + fi) * H + h)];
            gu[static_cast<size_t>((e * H + h) * 2 * F + 2 * fi + 1)] = u[static_cast<size_t>((e * F + fi) * H + h)];
            // GGUF down {F, H, E}: [e][h][f]; HF down_proj [E, F, H]: [e][f][h].
            dn[static_cast<size_t>((e * F + fi) * H + h)] = d[static_cast<size_t>((e * H + h) * F + fi)];
          }
      if (!mxfp4) {
        put(hf_l + "mlp.experts.gate_up_proj", {E, H, 2 * F}, gu);
        put(hf_l + "mlp.experts.down_proj", {E, F, H}, dn);
      }
      const auto gb = get(b + "ffn_gate_exps.bias"), ub = get(b + "ffn_up_exps.bias");
      std::vector<float> gub(static_cast<size_t>(E * 2 * F));
      for (int64_t e = 0; e < E; ++e)
        for (int64_t fi = 0; fi < F; ++fi) {
          gub[static_cast<size_t>(e * 2 * F + 2 * fi)] = gb[static_cast<size_t>(e * F + fi)];
          gub[static_cast<size_t>(e * 2 * F + 2 * fi + 1)] = ub[static_cast<size_t>(e * F + fi)];
        }
      put(hf_l + "mlp.experts.gate_up_proj_bias", {E, 2 * F}, gub);
      put(hf_l + "mlp.experts.down_proj_bias", {E, H}, get(b + "ffn_down_exps.bias"));
    }
    fs::create_directories(hf);
    test::write_safetensors(hf / "model.safetensors", out);
    nlohmann::json cfg = {
        {"model_type", "gpt_oss"},
        {"architectures", {"GptOssForCausalLM"}},
        {"vocab_size", V},
        {"hidden_size", H},
        {"num_hidden_layers", n_layer},
        {"num_attention_heads", nh},
        {"num_key_value_heads", nkv},
        {"head_dim", hd},
        {"max_position_embeddings", f.get_int(A + "context_length")},
        {"rms_norm_eps", f.get_float(A + "attention.layer_norm_rms_epsilon")},
        {"rope_theta", f.get_float(A + "rope.freq_base")},
        {"rope_scaling",
         {{"rope_type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 4096}, {"beta_fast", 32.0},
          {"beta_slow", 1.0}, {"truncate", false}}},
        {"hidden_act", "silu"},
        {"num_local_experts", E},
        {"num_experts_per_tok", f.get_int(A + "expert_used_count")},
        {"experts_per_token", f.get_int(A + "expert_used_count")},
        {"intermediate_size", F},
        {"sliding_window", f.get_int(A + "attention.sliding_window")},
        {"swiglu_limit", 7.0},
        {"attention_bias", true},
        {"tie_word_embeddings", false},
    };
    if (!layer_types.is_null()) cfg["layer_types"] = layer_types;
    if (mxfp4) cfg["quantization_config"] = {{"quant_method", "mxfp4"}};
    std::ofstream(hf / "config.json") << cfg.dump(2);
  }

  std::string convert(const fs::path& hf, ConvertType type, const std::string& out_name) {
    ConvertOptions o;
    o.input_dir = hf.string();
    o.output_path = (dir_ / out_name).string();
    o.type = type;
    o.with_vocab = false;
    o.progress = false;
    o.threads = 2;
    convert_hf_to_gguf(o);
    return o.output_path;
  }
};

TEST_F(GptOssConvertTest, CheckpointRoundTrips) {
  write_hf(dir_ / "hf", nlohmann::json::array({"sliding_attention", "full_attention", "sliding_attention",
                                               "full_attention"}));
  auto back = GgufFile::open(convert(dir_ / "hf", ConvertType::F32, "back.gguf"));
  EXPECT_EQ(back->get_string("general.architecture"), "gpt-oss");
  for (const char* key : {"block_count", "attention.sliding_window", "expert_count", "expert_used_count",
                          "expert_feed_forward_length", "attention.head_count", "attention.head_count_kv",
                          "rope.scaling.original_context_length"})
    EXPECT_EQ(back->get_int(std::string("gpt-oss.") + key), src_->get_int(std::string("gpt-oss.") + key)) << key;
  EXPECT_EQ(back->get_string("gpt-oss.rope.scaling.type"), "yarn");
  EXPECT_FALSE(back->has("gpt-oss.attention.sliding_window_pattern"));  // the default pattern: no array
  size_t n = 0;
  for (const GgufTensorInfo& t : src_->tensors()) {
    const GgufTensorInfo* b = back->find_tensor(t.name);
    ASSERT_NE(b, nullptr) << t.name;
    ASSERT_EQ(b->shape, t.shape) << t.name;
    const auto want = tensor_values(t), got = tensor_values(*b);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << t.name << " [" << i << "]";
    ++n;
  }
  EXPECT_EQ(n, back->tensors().size()) << "nothing extra";
  // And it runs as the original: same hyper-parameters, window layers, biases.
  const ModelWeights w = bind_weights(*back);
  EXPECT_EQ(w.cfg.n_swa, 8);
  EXPECT_TRUE(w.cfg.is_swa(0) && !w.cfg.is_swa(1));
}

TEST_F(GptOssConvertTest, OtherLayerPatternIsWrittenPerLayer) {
  write_hf(dir_ / "hf2", nlohmann::json::array({"full_attention", "sliding_attention", "sliding_attention",
                                                "full_attention"}));
  auto back = GgufFile::open(convert(dir_ / "hf2", ConvertType::F32, "pattern.gguf"));
  const ModelHParams h = read_hparams(*back);
  EXPECT_EQ(h.layer_is_swa, (std::vector<bool>{false, true, true, false}));
}

TEST_F(GptOssConvertTest, QuantizedConversionBinds) {
  write_hf(dir_ / "hf3");
  auto back = GgufFile::open(convert(dir_ / "hf3", ConvertType::Q8_0, "q8.gguf"));
  EXPECT_EQ(back->find_tensor("blk.1.ffn_gate_exps.weight")->type, DType::Q8_0);
  EXPECT_EQ(back->find_tensor("blk.1.attn_q.weight")->type, DType::Q8_0);
  EXPECT_EQ(back->find_tensor("blk.1.ffn_gate_exps.bias")->type, DType::F32);
  EXPECT_EQ(back->find_tensor("blk.1.attn_sinks.weight")->type, DType::F32);
  EXPECT_EQ(back->find_tensor("blk.1.ffn_gate_inp.weight")->type, DType::F32);
  const ModelWeights w = bind_weights(*back);
  EXPECT_TRUE(w.layers[1].experts.has_bias());
  // q8_0 of the interleaved gate rows is the q8_0 of the original's rows.
  const auto want = tensor_values(*src_->find_tensor("blk.1.ffn_gate_exps.weight"));
  const auto got = tensor_values(*back->find_tensor("blk.1.ffn_gate_exps.weight"));
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-2);
}

TEST_F(GptOssConvertTest, PublishedMxfp4ExpertsRepackBitForBit) {
  // A file with MXFP4 experts (the published mix), its experts written in the
  // checkpoint's MXFP4 layout, converted back: the expert tensors must be the
  // same bytes, whatever --type (here q8_0 for the rest).
  ThreadPool pool(2);
  GenOptions o;
  o.arch = "gpt-oss";
  o.quant = "mxfp4_moe";
  o.seed = 4;
  const std::string orig = (dir_ / "mx.gguf").string();
  generate_model(o, orig, pool);
  auto mx = GgufFile::open(orig);
  write_hf_from(*mx, dir_ / "hf_mx", nullptr, true);
  auto back = GgufFile::open(convert(dir_ / "hf_mx", ConvertType::Q8_0, "mx_back.gguf"));
  for (const char* part : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"})
    for (int L = 0; L < 4; ++L) {
      const std::string name = "blk." + std::to_string(L) + "." + part;
      const GgufTensorInfo* a = mx->find_tensor(name);
      const GgufTensorInfo* b = back->find_tensor(name);
      ASSERT_NE(b, nullptr) << name;
      ASSERT_EQ(b->type, DType::MXFP4) << name;
      ASSERT_EQ(b->shape, a->shape) << name;
      ASSERT_EQ(b->nbytes, a->nbytes) << name;
      EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << name;
    }
  EXPECT_EQ(back->find_tensor("blk.0.ffn_gate_exps.bias")->type, DType::F32);
  const ModelWeights w = bind_weights(*back);  // and it loads
  EXPECT_EQ(w.layers[0].experts.gate_type, DType::MXFP4);
}

TEST(GptOssHfConfig, FieldsAreChecked) {
  const nlohmann::json base = {{"model_type", "gpt_oss"},   {"vocab_size", 64},          {"hidden_size", 64},
                               {"num_hidden_layers", 2},    {"num_attention_heads", 4},  {"num_key_value_heads", 2},
                               {"head_dim", 16},            {"num_local_experts", 4},    {"num_experts_per_tok", 2},
                               {"intermediate_size", 32},   {"sliding_window", 8}};
  const HfModelConfig c = parse_hf_config(base.dump(), "config.json");
  EXPECT_EQ(c.gguf_arch, "gpt-oss");
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.swa_layers, (std::vector<bool>{true, false}));  // no layer_types: the even layers
  EXPECT_TRUE(c.attn_bias && c.attn_out_bias);
  auto fails_naming = [&](nlohmann::json j, const std::string& what) {
    try {
      parse_hf_config(j.dump(), "config.json");
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = base;
  j.erase("sliding_window");
  fails_naming(j, "sliding_window");
  j = base;
  j["swiglu_limit"] = 10.0;
  fails_naming(j, "swiglu_limit");
  j = base;
  j["layer_types"] = {"sliding_attention"};
  fails_naming(j, "layer_types");
  j = base;
  j["layer_types"] = {"sliding_attention", "linear_attention"};
  fails_naming(j, "layer_types[1]");
  j = base;
  j["quantization_config"] = {{"quant_method", "fp8"}};
  fails_naming(j, "quant_method");
  j["quantization_config"] = {{"quant_method", "mxfp4"}};
  EXPECT_TRUE(parse_hf_config(j.dump(), "config.json").mxfp4_experts);
}

}  // namespace
}  // namespace ms
