// The per-architecture recipes (model/recipe.h) as plans of block calls: the
// blocks each layer runs and their parameters, and the refusal of parts a
// backend lacks. (That the backends compute the recipes right is checked
// against the reference model in forward_test / qwen35_forward_test.)
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <variant>

#include "model/recipe.h"
#include "model/tensor_table.h"
#include "util/error.h"

namespace ms {
namespace {

ModelConfig config(const std::string& arch, int n_layer, int n_expert) {
  ModelConfig c;
  c.arch_name = arch;
  c.arch = &arch_info(arch);
  c.n_layer = n_layer;
  c.n_expert = n_expert;
  c.n_expert_used = n_expert > 0 ? 2 : 0;
  c.router_renorm = c.arch->default_renorm;
  return c;
}

TEST(Recipe, Qwen35MoeAlternatesDeltaNetAndGatedAttention) {
  ModelConfig c = config("qwen35moe", 8, 16);
  c.linear_layer = {true, true, true, false, true, true, true, false};
  const auto plan = plan_layers(c);
  ASSERT_EQ(plan.size(), 8u);
  for (int il = 0; il < 8; ++il) {
    const auto& calls = plan[static_cast<size_t>(il)];
    ASSERT_EQ(calls.size(), 2u) << il;
    if (c.is_linear(il)) {
      EXPECT_TRUE(std::holds_alternative<LinearAttentionBlock>(calls[0])) << il;
    } else {
      const auto* a = std::get_if<AttentionBlock>(&calls[0]);
      ASSERT_NE(a, nullptr) << il;
      EXPECT_TRUE(a->output_gate);
      EXPECT_TRUE(a->qk_norm);
      EXPECT_FALSE(a->qkv_bias);
    }
    const auto* m = std::get_if<MoeFfnBlock>(&calls[1]);
    ASSERT_NE(m, nullptr) << il;
    EXPECT_TRUE(m->shared_expert);
    EXPECT_EQ(m->router_mode, RouterMode::SoftmaxTopK);
  }
}

TEST(Recipe, DecoderFamilyTakesItsSwitchesFromTheArchRow) {
  struct Case {
    const char* arch;
    int n_expert;
    bool qk_norm, qkv_bias, moe;
    RopeMode rope;
  };
  for (const Case& k : {Case{"llama", 0, false, false, false, RopeMode::Normal},
                        Case{"llama", 8, false, false, true, RopeMode::Normal},  // Mixtral
                        Case{"qwen2", 0, false, true, false, RopeMode::Neox},
                        Case{"qwen3", 0, true, false, false, RopeMode::Neox},
                        Case{"qwen3moe", 8, true, false, true, RopeMode::Neox}}) {
    const ModelConfig c = config(k.arch, 3, k.n_expert);
    const auto plan = plan_layers(c);
    ASSERT_EQ(plan.size(), 3u) << k.arch;
    for (const auto& calls : plan) {
      ASSERT_EQ(calls.size(), 2u) << k.arch;
      const auto* a = std::get_if<AttentionBlock>(&calls[0]);
      ASSERT_NE(a, nullptr) << k.arch;
      EXPECT_EQ(a->qk_norm, k.qk_norm) << k.arch;
      EXPECT_EQ(a->qkv_bias, k.qkv_bias) << k.arch;
      EXPECT_EQ(a->rope_mode, k.rope) << k.arch;
      EXPECT_FALSE(a->output_gate || a->sinks || a->output_bias || a->window) << k.arch;
      if (k.moe) {
        const auto* m = std::get_if<MoeFfnBlock>(&calls[1]);
        ASSERT_NE(m, nullptr) << k.arch;
        EXPECT_EQ(m->router_mode, c.arch->router_mode) << k.arch;
        EXPECT_FALSE(m->shared_expert) << k.arch;
      } else {
        EXPECT_TRUE(std::holds_alternative<DenseFfnBlock>(calls[1])) << k.arch;
      }
    }
  }
}

TEST(Recipe, EveryArchitectureHasOne) {
  for (const ArchInfo& a : all_archs()) {
    ModelConfig c = config(a.name, 2, a.moe ? 4 : 0);
    if (a.linear_attention) c.linear_layer = {true, false};
    try {
      EXPECT_EQ(plan_layers(c).size(), 2u) << a.name;
    } catch (const Error& e) {
      ADD_FAILURE() << a.name << ": " << e.what();
    }
  }
}

TEST(Recipe, UnknownArchitectureIsNamed) {
  ModelConfig c = config("qwen3", 1, 0);
  c.arch_name = "no-such-arch";
  try {
    recipe_for(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-arch"), std::string::npos) << e.what();
  }
}

TEST(Recipe, MissingPartsAreNamed) {
  const BlockSupport none;
  BlockSupport all;
  all.attention_output_bias = all.attention_sinks = all.attention_window = true;
  all.router_bias = all.expert_bias = all.clamped_swiglu = true;
  AttentionBlock a;
  EXPECT_EQ(missing_block_part(a, none), nullptr);
  a.sinks = true;
  EXPECT_STREQ(missing_block_part(a, none), "attention sinks");
  a.sinks = false;
  a.window = 128;
  EXPECT_STREQ(missing_block_part(a, none), "sliding-window attention");
  a.output_bias = true;
  EXPECT_EQ(missing_block_part(a, all), nullptr);
  MoeFfnBlock m;
  EXPECT_EQ(missing_block_part(m, none), nullptr);
  m.act.kind = GluActivation::Kind::ClampedSwiGLU;
  EXPECT_STREQ(missing_block_part(m, none), "the clamped SwiGLU");
  m.router_bias = true;
  EXPECT_STREQ(missing_block_part(m, none), "the router bias");
  m.expert_bias = true;
  EXPECT_EQ(missing_block_part(m, all), nullptr);
  DenseFfnBlock d;
  d.act.kind = GluActivation::Kind::ClampedSwiGLU;
  EXPECT_STREQ(missing_block_part(d, none), "the clamped SwiGLU");
  // Today's architectures need no optional part.
  ModelConfig c = config("qwen3moe", 2, 4);
  EXPECT_NO_THROW(check_blocks(c, none, "test"));
}

// The names a layer's blocks read, from the tensor table.
std::vector<std::string> names(const ModelConfig& c, int il) {
  std::vector<std::string> out;
  for (const LayerTensorSpec& t : layer_tensor_table(c, il, plan_layers(c)[static_cast<size_t>(il)])) out.push_back(t.name);
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(TensorTable, FollowsTheBlocksOfEachLayer) {
  ModelConfig q = config("qwen35moe", 4, 8);
  q.linear_layer = {true, true, true, false};
  q.n_embd = 64;
  q.n_head = 4;
  q.n_head_kv = 2;
  q.head_dim = 16;
  q.n_ff_shexp = 32;
  const auto lin = names(q, 0), att = names(q, 3);
  EXPECT_TRUE(has(lin, "blk.0.attn_qkv.weight") && has(lin, "blk.0.ssm_a") && !has(lin, "blk.0.attn_q.weight"));
  EXPECT_TRUE(has(att, "blk.3.attn_q.weight") && has(att, "blk.3.attn_q_norm.weight") && !has(att, "blk.3.ssm_a"));
  for (const auto* v : {&lin, &att}) {
    EXPECT_TRUE(has(*v, v == &lin ? "blk.0.post_attention_norm.weight" : "blk.3.post_attention_norm.weight"));
    EXPECT_TRUE(has(*v, v == &lin ? "blk.0.ffn_gate_shexp.weight" : "blk.3.ffn_gate_shexp.weight"));
  }
  for (const LayerTensorSpec& t : layer_tensor_table(q, 3, plan_layers(q)[3]))
    if (t.name == "blk.3.attn_q.weight") EXPECT_EQ(t.shape, (std::vector<int64_t>{64, 2 * 4 * 16}));  // [q | gate]

  ModelConfig g = config("gpt-oss", 2, 8);
  g.n_swa = 8;
  g.swa_layer = {true, false};
  const auto go = names(g, 0);
  for (const char* n : {"blk.0.attn_q.bias", "blk.0.attn_output.bias", "blk.0.attn_sinks.weight",
                        "blk.0.post_attention_norm.weight", "blk.0.ffn_gate_inp.bias"})
    EXPECT_TRUE(has(go, n)) << n;
  EXPECT_FALSE(has(go, "blk.0.attn_q_norm.weight"));

  const auto dense = names(config("qwen2", 1, 0), 0);
  EXPECT_TRUE(has(dense, "blk.0.ffn_norm.weight") && has(dense, "blk.0.ffn_gate.weight") &&
              has(dense, "blk.0.attn_k.bias") && !has(dense, "blk.0.ffn_gate_inp.weight"));
}

}  // namespace
}  // namespace ms
