// convert and RoPE scaling: an HF config with rope_scaling / rope_parameters
// of type linear or plain YaRN is written as llama.cpp's converter writes it
// (rope.scaling.*), and the loader reads back the scaling the config asked
// for; variants the keys cannot express stay refused, naming what is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "convert/converter.h"
#include "convert/hf_config.h"
#include "format/gguf.h"
#include "model/rope_scaling.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

const std::string kBase = R"("model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "moe_intermediate_size": 16,
    "num_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1000000.0, "max_position_embeddings": 131072)";

HfModelConfig parse(const std::string& rope) { return parse_hf_config("{" + kBase + ", " + rope + "}", "config.json"); }

std::string error_of(const std::string& rope) {
  try {
    parse(rope);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The config's metadata written as convert writes it, read back by the loader.
RopeScaling round_trip(const HfModelConfig& c) {
  const std::string path =
      (fs::temp_directory_path() / ("rope_convert_" + std::to_string(::getpid()) + ".gguf")).string();
  {
    GgufWriter w(path);
    write_model_metadata(w, c, ConvertType::F32, "t");
    w.finish();
  }
  const auto f = GgufFile::open(path);
  const RopeScaling s = read_rope_scaling(*f, c.gguf_arch, static_cast<int>(c.n_rot()), c.rope_theta, c.n_ctx);
  fs::remove(path);
  return s;
}

TEST(RopeScalingConvert, YarnIsWrittenAndReadBack) {
  // Qwen3's recipe for 131k: rope_scaling {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}.
  const HfModelConfig c =
      parse(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
  EXPECT_EQ(c.rope_scaling_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_factor, 4.0);
  EXPECT_EQ(c.rope_orig_ctx, 32768);
  const RopeScaling s = round_trip(c);
  YarnParams p;
  p.factor = 4;
  p.n_rot = 32;
  p.n_ctx_orig = 32768;
  p.theta_base = 1e6;
  const RopeScaling want = yarn_scaling(p);
  EXPECT_EQ(s.freq_scale, want.freq_scale);
  EXPECT_EQ(s.ext_factor, 1.0f);
  EXPECT_EQ(s.corr_low, want.corr_low);
  EXPECT_EQ(s.corr_high, want.corr_high);
  EXPECT_FLOAT_EQ(s.mscale, want.mscale);
}

TEST(RopeScalingConvert, YarnOptionalFieldsAndTransformers5Spelling) {
  const HfModelConfig c = parse(R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8,
      "original_max_position_embeddings": 4096, "beta_fast": 16, "beta_slow": 2, "extrapolation_factor": 0.5})");
  const RopeScaling s = round_trip(c);
  YarnParams p;
  p.factor = 8;
  p.n_rot = 32;
  p.n_ctx_orig = 4096;
  p.theta_base = 10000;
  p.beta_fast = 16;
  p.beta_slow = 2;
  p.ext_factor = 0.5;
  const RopeScaling want = yarn_scaling(p);
  EXPECT_EQ(s.ext_factor, 0.5f);
  EXPECT_EQ(s.corr_low, want.corr_low);
  EXPECT_EQ(s.corr_high, want.corr_high);
  EXPECT_FLOAT_EQ(s.mscale, want.mscale);
  // No original length: transformers takes max_position_embeddings.
  EXPECT_EQ(parse(R"("rope_scaling": {"type": "yarn", "factor": 2})").rope_orig_ctx, 131072);
}

TEST(RopeScalingConvert, LinearIsWrittenAndUnscaledWritesNothing) {
  const RopeScaling lin = round_trip(parse(R"("rope_scaling": {"type": "linear", "factor": 2})"));
  EXPECT_FLOAT_EQ(lin.freq_scale, 0.5f);
  EXPECT_EQ(lin.ext_factor, 0.0f);
  const HfModelConfig plain = parse(R"("rope_scaling": {"rope_type": "default"})");
  EXPECT_TRUE(plain.rope_scaling_type.empty());
  EXPECT_TRUE(round_trip(plain).is_identity());
}

TEST(RopeScalingConvert, WhatTheKeysCannotExpressIsRefused) {
  EXPECT_NE(error_of(R"("rope_scaling": {"rope_type": "longrope", "factor": 4})").find("longrope"), std::string::npos);
  EXPECT_NE(error_of(R"("rope_scaling": {"rope_type": "llama3", "factor": 8})").find("llama3"), std::string::npos);
  EXPECT_NE(error_of(R"("rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4096,
      "attention_factor": 0.8})")
                .find("attention_factor"),
            std::string::npos);
  EXPECT_NE(error_of(R"("rope_scaling": {"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
      "mscale_all_dim": 1.0})")
                .find("mscale_all_dim"),
            std::string::npos);
  EXPECT_NE(error_of(R"("rope_scaling": {"rope_type": "yarn"})").find("factor"), std::string::npos);
  EXPECT_NE(error_of(R"("rope_scaling": {"rope_type": "yarn", "factor": -1})").find("factor"), std::string::npos);
}

}  // namespace
}  // namespace ms
