// rope.scaling.* keys read into RopeScaling (model/rope_scaling.h): none,
// linear, YaRN with llama.cpp's defaults and with every yarn_* key given, and
// the errors for a type the engine does not implement or a bad factor
// (a whole model's config and forward pass: tests/engine/rope_yarn_model_test.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "format/gguf.h"
#include "model/rope_scaling.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  return (fs::temp_directory_path() / ("rope_scaling_" + name + "_" + std::to_string(::getpid()) + ".gguf")).string();
}

using Keys = std::vector<std::pair<std::string, GgufValue>>;

// A metadata-only GGUF with the given keys; returns the scaling read from it.
RopeScaling read_with(const Keys& keys, int n_rot = 128, double base = 1e6, int64_t n_ctx_train = 131072) {
  const std::string path = tmp("keys");
  {
    GgufWriter w(path);
    w.set("general.architecture", GgufValue::of_string("qwen3moe"));
    for (const auto& [k, v] : keys) w.set(k, v);
    w.finish();
  }
  struct Remove {
    std::string p;
    ~Remove() { fs::remove(p); }
  } remove{path};
  const auto f = GgufFile::open(path);
  return read_rope_scaling(*f, "qwen3moe", n_rot, base, n_ctx_train);
}

std::string error_of(const Keys& keys) {
  try {
    read_with(keys);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RopeScalingKeys, AbsentOrNoneIsIdentity) {
  EXPECT_TRUE(read_with({}).is_identity());
  // llama.cpp ignores the factor when the type says none.
  EXPECT_TRUE(read_with({{"qwen3moe.rope.scaling.type", GgufValue::of_string("none")},
                         {"qwen3moe.rope.scaling.factor", GgufValue::of_f32(4)}})
                  .is_identity());
}

TEST(RopeScalingKeys, Linear) {
  const RopeScaling s = read_with(
      {{"qwen3moe.rope.scaling.type", GgufValue::of_string("linear")}, {"qwen3moe.rope.scaling.factor", GgufValue::of_f32(4)}});
  EXPECT_FLOAT_EQ(s.freq_scale, 0.25f);
  EXPECT_EQ(s.ext_factor, 0.0f);
  EXPECT_EQ(s.mscale, 1.0f);
}

TEST(RopeScalingKeys, YarnWithDefaults) {
  const RopeScaling s = read_with({{"qwen3moe.rope.scaling.type", GgufValue::of_string("yarn")},
                                   {"qwen3moe.rope.scaling.factor", GgufValue::of_f32(4)},
                                   {"qwen3moe.rope.scaling.original_context_length", GgufValue::of_u32(32768)}});
  EXPECT_FLOAT_EQ(s.freq_scale, 0.25f);
  EXPECT_EQ(s.ext_factor, 1.0f);
  EXPECT_EQ(s.corr_low, 23.0f);  // head 128, base 1e6, 32k: see tests/cpu/rope_yarn_test.cpp
  EXPECT_EQ(s.corr_high, 40.0f);
  EXPECT_NEAR(s.mscale, 1 + 0.1 * std::log(4.0), 1e-6);
  // Without original_context_length, the trained context stands in (llama.cpp's default).
  const RopeScaling t = read_with({{"qwen3moe.rope.scaling.type", GgufValue::of_string("yarn")},
                                   {"qwen3moe.rope.scaling.factor", GgufValue::of_f32(4)}},
                                  128, 1e6, 32768);
  EXPECT_EQ(t.corr_low, 23.0f);
  EXPECT_EQ(t.corr_high, 40.0f);
}

TEST(RopeScalingKeys, YarnKeysOverrideTheDefaults) {
  const Keys base = {{"qwen3moe.rope.scaling.type", GgufValue::of_string("yarn")},
                     {"qwen3moe.rope.scaling.factor", GgufValue::of_f32(4)},
                     {"qwen3moe.rope.scaling.original_context_length", GgufValue::of_u32(32768)}};
  Keys k = base;
  k.push_back({"qwen3moe.rope.scaling.yarn_beta_fast", GgufValue::of_f32(64)});
  k.push_back({"qwen3moe.rope.scaling.yarn_beta_slow", GgufValue::of_f32(2)});
  k.push_back({"qwen3moe.rope.scaling.yarn_ext_factor", GgufValue::of_f32(0.5f)});
  k.push_back({"qwen3moe.rope.scaling.attn_factor", GgufValue::of_f32(0.5f)});
  const RopeScaling s = read_with(k);
  float low = 0, high = 0;
  yarn_corr_dims(128, 32768, 1e6, 64, 2, &low, &high);
  EXPECT_EQ(s.corr_low, low);
  EXPECT_EQ(s.corr_high, high);
  EXPECT_LT(s.corr_low, 23.0f);  // more rotations: the ramp starts at faster pairs
  EXPECT_EQ(s.ext_factor, 0.5f);
  EXPECT_NEAR(s.mscale, 0.5 * (1 + 0.1 * std::log(4.0)), 1e-6);
  // The log multiplier (mscale_all_dim) divides the magnitude out again.
  k = base;
  k.push_back({"qwen3moe.rope.scaling.yarn_log_multiplier", GgufValue::of_f32(1)});
  EXPECT_NEAR(read_with(k).mscale, 1.0, 1e-6);
  // With the ramp off, yarn_attn_factor scales cos/sin (and nothing else does).
  k = base;
  k.push_back({"qwen3moe.rope.scaling.yarn_ext_factor", GgufValue::of_f32(0)});
  k.push_back({"qwen3moe.rope.scaling.yarn_attn_factor", GgufValue::of_f32(1.5f)});
  const RopeScaling off = read_with(k);
  EXPECT_EQ(off.ext_factor, 0.0f);
  EXPECT_FLOAT_EQ(off.mscale, 1.5f);
  EXPECT_FLOAT_EQ(rope_pair_scale(off, 0), 0.25f);
}

TEST(RopeScalingKeys, UnsupportedTypeAndBadValuesAreErrorsNamingThem) {
  EXPECT_NE(error_of({{"qwen3moe.rope.scaling.type", GgufValue::of_string("longrope")}}).find("longrope"),
            std::string::npos);
  EXPECT_NE(error_of({{"qwen3moe.rope.scaling.type", GgufValue::of_string("yarn")},
                      {"qwen3moe.rope.scaling.factor", GgufValue::of_f32(-2)}})
                .find("rope.scaling.factor"),
            std::string::npos);
  EXPECT_NE(error_of({{"qwen3moe.rope.scaling.type", GgufValue::of_string("yarn")},
                      {"qwen3moe.rope.scaling.factor", GgufValue::of_f32(4)},
                      {"qwen3moe.rope.scaling.yarn_beta_fast", GgufValue::of_f32(0)}})
                .find("yarn_beta_fast"),
            std::string::npos);
  EXPECT_NE(error_of({{"qwen3moe.rope.scaling.type", GgufValue::of_string("yarn")},
                      {"qwen3moe.rope.scaling.factor", GgufValue::of_f32(NAN)}})
                .find("rope.scaling.factor"),
            std::string::npos);
}

}  // namespace
}  // namespace ms
