// Binding GGUF tensors to ModelWeights: the architecture table, hyper-parameter
// checks, and clear errors for unknown architectures, missing tensors and
// wrong shapes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/arch.h"
#include "model/weights.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

struct TinySpec {
  std::string arch = "qwen3moe";
  int n_layer = 2;
  int64_t D = 32, F = 64, E = 4, V = 16;
  int heads = 2, kv = 1, hd = 16;
  std::set<std::string> skip;                       // tensors to leave out
  std::function<void(std::string&, std::vector<int64_t>&)> edit;  // change a name/shape
};

// Writes a small all-F32 model following the naming conventions.
std::string write_model(const TinySpec& s, const std::string& file) {
  const std::string path = (fs::temp_directory_path() / (file + std::to_string(::getpid()) + ".gguf")).string();
  GgufWriter w(path);
  const std::string a = s.arch + ".";
  w.set("general.architecture", GgufValue::of_string(s.arch));
  w.set(a + "block_count", GgufValue::of_u32(s.n_layer));
  w.set(a + "embedding_length", GgufValue::of_u32(static_cast<uint32_t>(s.D)));
  w.set(a + "feed_forward_length", GgufValue::of_u32(static_cast<uint32_t>(s.F)));
  w.set(a + "attention.head_count", GgufValue::of_u32(s.heads));
  w.set(a + "attention.head_count_kv", GgufValue::of_u32(s.kv));
  w.set(a + "attention.key_length", GgufValue::of_u32(s.hd));
  w.set(a + "context_length", GgufValue::of_u32(256));
  const bool moe = s.arch == "qwen3moe";
  if (moe) {
    w.set(a + "expert_count", GgufValue::of_u32(static_cast<uint32_t>(s.E)));
    w.set(a + "expert_used_count", GgufValue::of_u32(2));
    w.set(a + "expert_feed_forward_length", GgufValue::of_u32(static_cast<uint32_t>(s.F)));
  }
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {{"token_embd.weight", {s.D, s.V}},
                                                                 {"output_norm.weight", {s.D}}};
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const int64_t q = s.heads * s.hd, kvd = s.kv * s.hd;
    t.push_back({b + "attn_norm.weight", {s.D}});
    t.push_back({b + "attn_q.weight", {s.D, q}});
    t.push_back({b + "attn_k.weight", {s.D, kvd}});
    t.push_back({b + "attn_v.weight", {s.D, kvd}});
    t.push_back({b + "attn_output.weight", {q, s.D}});
    if (s.arch == "qwen3" || moe) {
      t.push_back({b + "attn_q_norm.weight", {s.hd}});
      t.push_back({b + "attn_k_norm.weight", {s.hd}});
    }
    t.push_back({b + "ffn_norm.weight", {s.D}});
    if (moe) {
      t.push_back({b + "ffn_gate_inp.weight", {s.D, s.E}});
      t.push_back({b + "ffn_gate_exps.weight", {s.D, s.F, s.E}});
      t.push_back({b + "ffn_up_exps.weight", {s.D, s.F, s.E}});
      t.push_back({b + "ffn_down_exps.weight", {s.F, s.D, s.E}});
    } else {
      t.push_back({b + "ffn_gate.weight", {s.D, s.F}});
      t.push_back({b + "ffn_up.weight", {s.D, s.F}});
      t.push_back({b + "ffn_down.weight", {s.F, s.D}});
    }
  }
  std::vector<std::pair<std::string, std::vector<int64_t>>> kept;
  for (auto& [name, shape] : t) {
    if (s.skip.count(name)) continue;
    if (s.edit) s.edit(name, shape);
    kept.push_back({name, shape});
    w.add_tensor(name, DType::F32, shape);
  }
  for (auto& [name, shape] : kept) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    w.write_tensor_data(zeros.data(), zeros.size() * sizeof(float));
  }
  w.finish();
  return path;
}

std::string bind_error(const TinySpec& s) {
  const std::string path = write_model(s, "weights_test_err");
  std::string msg;
  try {
    auto f = GgufFile::open(path);
    bind_weights(*f);
  } catch (const Error& e) {
    msg = e.what();
  }
  fs::remove(path);
  return msg;
}

TEST(Arch, TableRowsAndUnknownArchitecture) {
  EXPECT_EQ(arch_info("llama").rope_mode, RopeMode::Normal);
  EXPECT_EQ(arch_info("qwen3moe").rope_mode, RopeMode::Neox);
  EXPECT_TRUE(arch_info("qwen3moe").qk_norm);
  EXPECT_TRUE(arch_info("qwen2").qkv_bias);
  EXPECT_EQ(arch_info("llama").router_mode, RouterMode::TopKSoftmax);
  try {
    arch_info("mamba");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown architecture 'mamba'"), std::string::npos) << m;
    EXPECT_NE(m.find("qwen3moe"), std::string::npos) << m;
  }
}

TEST(Weights, BindsAMoeModel) {
  TinySpec s;
  const std::string path = write_model(s, "weights_test_ok");
  auto f = GgufFile::open(path);
  ModelWeights w = bind_weights(*f);
  EXPECT_EQ(w.cfg.n_layer, 2);
  EXPECT_EQ(w.cfg.n_expert, 4);
  EXPECT_EQ(w.cfg.n_ff_exp, 64);
  EXPECT_EQ(w.cfg.n_vocab, 16);
  EXPECT_TRUE(w.tied_output);
  EXPECT_EQ(w.output.data, w.token_embd.data);
  const ExpertWeights& ex = w.layers[1].experts;
  EXPECT_EQ(ex.layout, "stacked");
  EXPECT_EQ(ex.gate_bytes(), 64u * 32 * 4);
  EXPECT_EQ(ex.gate(1) - ex.gate(0), 64 * 32 * 4);
  const auto r = ex.ranges(2);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].offset, static_cast<uint64_t>(ex.gate(2) - f->base()));
  EXPECT_EQ(r[2].size, ex.down_bytes());
  EXPECT_GT(w.active_bytes_per_token(), 2u * ex.expert_bytes() * 2);
  fs::remove(path);
}

TEST(Weights, UnknownArchitectureIsNamed) {
  TinySpec s;
  s.arch = "gpt2";
  const std::string m = bind_error(s);
  EXPECT_NE(m.find("unknown architecture 'gpt2'"), std::string::npos) << m;
}

TEST(Weights, MissingTensorIsNamed) {
  TinySpec s;
  s.skip = {"blk.1.attn_k_norm.weight"};
  const std::string m = bind_error(s);
  EXPECT_NE(m.find("missing tensor 'blk.1.attn_k_norm.weight'"), std::string::npos) << m;
  s.skip = {"blk.0.ffn_down_exps.weight"};
  EXPECT_NE(bind_error(s).find("'blk.0.ffn_down_exps.weight'"), std::string::npos);
}

TEST(Weights, WrongShapeIsNamed) {
  TinySpec s;
  s.edit = [](std::string& name, std::vector<int64_t>& shape) {
    if (name == "blk.0.attn_q.weight") shape[1] = 48;
  };
  const std::string m = bind_error(s);
  EXPECT_NE(m.find("'blk.0.attn_q.weight' has shape {32, 48}"), std::string::npos) << m;
}

TEST(Weights, BindsADenseModel) {
  TinySpec s;
  s.arch = "qwen3";
  const std::string path = write_model(s, "weights_test_dense");
  auto f = GgufFile::open(path);
  ModelWeights w = bind_weights(*f);
  EXPECT_FALSE(w.cfg.is_moe());
  EXPECT_EQ(w.cfg.n_ff, 64);
  EXPECT_TRUE(w.layers[0].ffn_down);
  fs::remove(path);
}

}  // namespace
}  // namespace ms
