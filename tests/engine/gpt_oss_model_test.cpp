// gpt-oss (GGUF arch "gpt-oss") as data: the gen presets' shapes, the tiny
// file's metadata and tensors (MXFP4 experts, Q8_0 elsewhere, f32 biases and
// sinks), and what the loader reads from it: the sliding window on the even
// layers, YaRN, every bias and the clamped SwiGLU flag bound.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "model/hparams.h"
#include "model/weights.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / (name + std::to_string(::getpid()) + ".gguf")).string();
}

TEST(GptOssModel, PresetsHaveThePublishedShapes) {
  const GenShape s = gen_preset("gpt-oss", "gpt-oss-20b");
  EXPECT_EQ(s.gguf_arch, "gpt-oss");
  EXPECT_EQ(s.n_layer, 24);
  EXPECT_EQ(s.n_embd, 2880);
  EXPECT_EQ(s.n_head, 64);
  EXPECT_EQ(s.n_head_kv, 8);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.n_expert, 32);
  EXPECT_EQ(s.n_expert_used, 4);
  EXPECT_EQ(s.n_ff_exp, 2880);
  EXPECT_EQ(s.n_vocab, 201088);
  EXPECT_EQ(s.sliding_window, 128);
  EXPECT_EQ(s.yarn_factor, 32.0f);
  EXPECT_EQ(s.yarn_orig_ctx, 4096);
  const GenShape b = gen_preset("gpt-oss", "gpt-oss-120b");
  EXPECT_EQ(b.n_layer, 36);
  EXPECT_EQ(b.n_expert, 128);
  EXPECT_EQ(b.n_expert_used, 4);
  EXPECT_THROW(gen_preset("gpt-oss", "qwen3-30b-a3b"), Error);
  EXPECT_THROW(gen_preset("qwen3moe", "gpt-oss-20b"), Error);
}

TEST(GptOssModel, TinyFileBindsEveryPart) {
  ThreadPool pool(2);
  GenOptions o;
  o.arch = "gpt-oss";
  o.quant = "mxfp4_moe";
  const std::string p = tmp_path("gptoss_tiny");
  generate_model(o, p, pool);
  auto f = GgufFile::open(p);
  EXPECT_EQ(f->get_string("general.architecture"), "gpt-oss");
  EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_exps.weight")->type, DType::MXFP4);
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down_exps.weight")->type, DType::MXFP4);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, DType::Q8_0);
  EXPECT_EQ(f->find_tensor("blk.0.attn_sinks.weight")->type, DType::F32);
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down_exps.bias")->type, DType::F32);

  const ModelHParams h = read_hparams(*f);
  EXPECT_EQ(h.sliding_window, 8);
  ASSERT_EQ(h.layer_is_swa.size(), 4u);
  // llama.cpp's pattern 2 (and HF's layer_types): sliding, full, sliding, full.
  EXPECT_TRUE(h.layer_is_swa[0]);
  EXPECT_FALSE(h.layer_is_swa[1]);
  EXPECT_TRUE(h.layer_is_swa[2]);
  EXPECT_FALSE(h.layer_is_swa[3]);

  const ModelWeights w = bind_weights(*f);
  const ModelConfig& c = w.cfg;
  EXPECT_EQ(c.arch_name, "gpt-oss");
  EXPECT_EQ(c.n_swa, 8);
  EXPECT_TRUE(c.is_swa(0));
  EXPECT_FALSE(c.is_swa(1));
  EXPECT_NE(c.rope_scaling.ext_factor, 0.0f);  // YaRN
  EXPECT_NEAR(1.0f / c.rope_scaling.freq_scale, 32.0f, 1e-3f);
  EXPECT_EQ(c.arch->router_mode, RouterMode::TopKSoftmax);
  EXPECT_FALSE(w.tied_output);
  for (const LayerWeights& l : w.layers) {
    EXPECT_TRUE(l.bq && l.bk && l.bv && l.bo);
    EXPECT_EQ(l.attn_sinks.cols, c.n_head);
    EXPECT_EQ(l.router_b.cols, c.n_expert);
    EXPECT_EQ(l.ffn_norm.name.find("post_attention_norm"), 6u);  // "blk.N.post_attention_norm.weight"
    EXPECT_TRUE(l.experts.clamped_swiglu);
    ASSERT_TRUE(l.experts.has_bias());
    // Expert e's biases are row e of the {n, n_expert} tensors.
    const float* bias = reinterpret_cast<const float*>(f->find_tensor("blk.0.ffn_up_exps.bias")->data);
    if (&l == &w.layers[0]) EXPECT_EQ(l.experts.up_bias(3), bias + 3 * c.n_ff_exp);
    // The residual-stream biases keep the constant channel (element 0) at zero.
    EXPECT_EQ(l.bo.f32()[0], 0.0f);
    EXPECT_EQ(l.experts.down_bias(5)[0], 0.0f);
  }
  EXPECT_NE(c.describe().find("with a 8-token window"), std::string::npos) << c.describe();
  f.reset();
  fs::remove(p);
}

// A copy of `src` without one tensor and/or one metadata key.
void copy_without(const GgufFile& src, const std::string& out, const std::string& tensor, const std::string& key) {
  GgufWriter w(out);
  for (const auto& [k, v] : src.metadata())
    if (k != key) w.set(k, v);
  for (const GgufTensorInfo& t : src.tensors())
    if (t.name != tensor) w.add_tensor(t.name, t.type, t.shape);
  w.write_header();
  for (const GgufTensorInfo& t : src.tensors())
    if (t.name != tensor) w.write_tensor_data(t.data, t.nbytes);
  w.finish();
}

TEST(GptOssModel, MissingPartsAreErrorsNamingThem) {
  ThreadPool pool(2);
  GenOptions o;
  o.arch = "gpt-oss";
  const std::string p = tmp_path("gptoss_full"), q = tmp_path("gptoss_cut");
  generate_model(o, p, pool);
  auto f = GgufFile::open(p);
  auto expect_error = [&](const std::string& tensor, const std::string& key, const std::string& named) {
    copy_without(*f, q, tensor, key);
    auto g = GgufFile::open(q);
    try {
      bind_weights(*g);
      ADD_FAILURE() << "bound a file without " << tensor << key;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  expect_error("blk.2.attn_sinks.weight", "", "blk.2.attn_sinks.weight");
  expect_error("blk.1.ffn_down_exps.bias", "", "blk.1.ffn_down_exps.bias");
  expect_error("blk.3.ffn_gate_inp.bias", "", "blk.3.ffn_gate_inp.bias");
  expect_error("blk.0.attn_output.bias", "", "blk.0.attn_output.bias");
  expect_error("", "gpt-oss.attention.sliding_window", "gpt-oss.attention.sliding_window");
  f.reset();
  fs::remove(p);
  fs::remove(q);
}

TEST(GptOssModel, OnlyStackedExperts) {
  ThreadPool pool(1);
  GenOptions o;
  o.arch = "gpt-oss";
  o.layout = "merged";
  EXPECT_THROW(generate_model(o, tmp_path("gptoss_merged"), pool), Error);
}

}  // namespace
}  // namespace ms
