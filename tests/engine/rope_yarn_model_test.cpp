// A model whose GGUF asks for YaRN (rope.scaling.type yarn): its config
// carries the scaling (model/rope_scaling.h), and the CPU forward pass uses
// it: the first token's logits equal the unscaled model's (one key: attention
// returns its value whatever the rotation), later ones differ, and a prompt
// batch equals the same tokens fed one by one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "model/rope_scaling.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  return (fs::temp_directory_path() / ("rope_yarn_" + name + "_" + std::to_string(::getpid()) + ".gguf")).string();
}

class RopeYarnModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plain_ = new std::string(tmp("plain"));
    yarn_ = new std::string(tmp("yarn"));
    ThreadPool pool(2);
    GenOptions g;
    g.arch = "qwen3moe";
    g.preset = "tiny";
    g.quant = "q8_0";
    generate_model(g, *plain_, pool);
    const auto in = GgufFile::open(*plain_);
    GgufWriter w(*yarn_);
    for (const auto& [key, value] : in->metadata()) w.set(key, value);
    w.set("qwen3moe.rope.scaling.type", GgufValue::of_string("yarn"));
    w.set("qwen3moe.rope.scaling.factor", GgufValue::of_f32(4));
    w.set("qwen3moe.rope.scaling.original_context_length", GgufValue::of_u32(64));
    for (const GgufTensorInfo& t : in->tensors()) w.add_tensor(t.name, t.type, t.shape);
    for (const GgufTensorInfo& t : in->tensors()) w.write_tensor_data(t.data, t.nbytes);
    w.finish();
  }
  static void TearDownTestSuite() {
    fs::remove(*plain_);
    fs::remove(*yarn_);
    delete plain_;
    delete yarn_;
  }
  static std::string* plain_;
  static std::string* yarn_;
};
std::string* RopeYarnModel::plain_ = nullptr;
std::string* RopeYarnModel::yarn_ = nullptr;

TEST_F(RopeYarnModel, ConfigCarriesTheScaling) {
  const auto a = LoadedModel::open(*plain_);
  const auto b = LoadedModel::open(*yarn_);
  EXPECT_TRUE(a->weights.cfg.rope_scaling.is_identity());
  const ModelConfig& c = b->weights.cfg;
  EXPECT_FLOAT_EQ(c.rope_scaling.freq_scale, 0.25f);
  EXPECT_EQ(c.rope_scaling.ext_factor, 1.0f);
  float low = 0, high = 0;
  yarn_corr_dims(c.n_rot, 64, c.rope_base, 32, 1, &low, &high);
  EXPECT_EQ(c.rope_scaling.corr_low, low);
  EXPECT_EQ(c.rope_scaling.corr_high, high);
  EXPECT_NEAR(c.rope_scaling.mscale, 1 + 0.1 * std::log(4.0), 1e-6);
}

TEST_F(RopeYarnModel, ForwardUsesIt) {
  const auto a = LoadedModel::open(*plain_);
  const auto b = LoadedModel::open(*yarn_);
  ThreadPool pool(2);
  CpuBackend pa(a->weights, pool), pb(b->weights, pool);
  const int64_t V = b->weights.cfg.n_vocab;
  const std::vector<int32_t> prompt = {5, 17, 3, 42, 8, 11, 29, 2, 31, 7, 13, 19};
  // Token by token on both models.
  KvCache ka = pa.make_cache(64), kb = pb.make_cache(64);
  std::vector<std::vector<float>> steps_b;
  double max_diff_later = 0;
  for (size_t t = 0; t < prompt.size(); ++t) {
    std::vector<float> la, lb;
    pa.forward(ka, std::span<const int32_t>(&prompt[t], 1), la);
    pb.forward(kb, std::span<const int32_t>(&prompt[t], 1), lb);
    ASSERT_EQ(static_cast<int64_t>(lb.size()), V);
    double d = 0;
    for (int64_t i = 0; i < V; ++i) d = std::max(d, static_cast<double>(std::fabs(la[i] - lb[i])));
    if (t == 0) EXPECT_LT(d, 1e-4) << "one key: the rotation cannot matter";
    else max_diff_later = std::max(max_diff_later, d);
    steps_b.push_back(lb);
  }
  EXPECT_GT(max_diff_later, 1e-3) << "YaRN did not change any later logits";
  // The whole prompt as one batch ends at the same logits as the last step.
  KvCache kb2 = pb.make_cache(64);
  std::vector<float> batch;
  pb.forward(kb2, prompt, batch);
  ASSERT_EQ(batch.size(), steps_b.back().size());
  for (int64_t i = 0; i < V; ++i)
    EXPECT_NEAR(batch[i], steps_b.back()[i], 2e-3f * (1 + std::fabs(steps_b.back()[i]))) << i;
}

}  // namespace
}  // namespace ms
