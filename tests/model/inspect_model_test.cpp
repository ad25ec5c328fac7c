// Hyper-parameters, tensor roles, the dense/expert byte split and the VRAM
// plan that `moestream inspect` prints, on small GGUFs written here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "format/gguf.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

struct T {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
};
using KV = std::vector<std::pair<std::string, GgufValue>>;

class InspectModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ms_inspect_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a GGUF with zeroed tensor data and opens it.
  std::unique_ptr<GgufFile> make(const KV& kv, const std::vector<T>& tensors) {
    const std::string p = (dir_ / ("m" + std::to_string(n_++) + ".gguf")).string();
    {
      GgufWriter w(p);
      for (const auto& [k, v] : kv) w.set(k, v);
      for (const auto& t : tensors) w.add_tensor(t.name, t.type, t.shape);
      for (const auto& t : tensors) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        const std::vector<uint8_t> zeros(static_cast<size_t>(n / type_info(t.type).block_size * type_info(t.type).type_size));
        w.write_tensor_data(zeros.data(), zeros.size());
      }
      w.finish();
    }
    return GgufFile::open(p);
  }

  fs::path dir_;
  int n_ = 0;
};

GgufValue u32(uint32_t v) { return GgufValue::of_u32(v); }

// A qwen3moe-shaped model: 2 layers, n_embd 64, 4 heads of 32 (2 KV heads),
// 4 experts (top 2) of width 32, a 10-token vocabulary.
KV qwen3moe_kv() {
  return {{"general.architecture", GgufValue::of_string("qwen3moe")},
          {"general.name", GgufValue::of_string("tiny")},
          {"qwen3moe.block_count", u32(2)},
          {"qwen3moe.embedding_length", u32(64)},
          {"qwen3moe.feed_forward_length", u32(96)},
          {"qwen3moe.attention.head_count", u32(4)},
          {"qwen3moe.attention.head_count_kv", u32(2)},
          {"qwen3moe.attention.key_length", u32(32)},
          {"qwen3moe.attention.value_length", u32(32)},
          {"qwen3moe.context_length", u32(4096)},
          {"qwen3moe.expert_count", u32(4)},
          {"qwen3moe.expert_used_count", u32(2)},
          {"qwen3moe.rope.freq_base", GgufValue::of_f32(1e6f)},
          {"qwen3moe.attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-6f)},
          {"qwen3moe.expert_weights_norm", GgufValue::of_bool(true)},
          {"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
          {"tokenizer.ggml.tokens", GgufValue::of_strings({"a", "b", "c", "d", "e", "f", "g", "h", "<s>", "</s>"})}};
}

std::vector<T> qwen3moe_tensors() {
  std::vector<T> t = {{"token_embd.weight", DType::F16, {64, 12}},  // 1536 B
                      {"output_norm.weight", DType::F32, {64}},     // 256 B
                      {"output.weight", DType::Q8_0, {64, 12}}};    // 816 B
  for (int il = 0; il < 2; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    for (const T& x : std::vector<T>{{b + "attn_norm.weight", DType::F32, {64}},           // 256
                                     {b + "attn_q.weight", DType::Q8_0, {64, 128}},        // 8704
                                     {b + "attn_k.weight", DType::Q8_0, {64, 64}},         // 4352
                                     {b + "attn_v.weight", DType::Q8_0, {64, 64}},         // 4352
                                     {b + "attn_output.weight", DType::Q8_0, {128, 64}},   // 8704
                                     {b + "attn_q_norm.weight", DType::F32, {32}},         // 128
                                     {b + "attn_k_norm.weight", DType::F32, {32}},         // 128
                                     {b + "ffn_norm.weight", DType::F32, {64}},            // 256
                                     {b + "ffn_gate_inp.weight", DType::F32, {64, 4}},     // 1024
                                     {b + "ffn_gate_exps.weight", DType::Q8_0, {64, 32, 4}},  // 8704
                                     {b + "ffn_up_exps.weight", DType::Q8_0, {64, 32, 4}},    // 8704
                                     {b + "ffn_down_exps.weight", DType::Q4_0, {32, 64, 4}}})  // 4608
      t.push_back(x);
  }
  return t;
}

constexpr uint64_t kGlobal = 1536 + 256 + 816;
constexpr uint64_t kLayerDense = 256 + 8704 + 4352 + 4352 + 8704 + 128 + 128 + 256 + 1024;
constexpr uint64_t kLayerExperts = 8704 + 8704 + 4608;
constexpr uint64_t kOneExpert = kLayerExperts / 4;

TEST_F(InspectModelTest, ReadsQwen3MoeHyperParameters) {
  auto f = make(qwen3moe_kv(), qwen3moe_tensors());
  const ModelHParams h = read_hparams(*f);
  EXPECT_EQ(h.arch, "qwen3moe");
  EXPECT_EQ(h.name, "tiny");
  EXPECT_TRUE(h.known_arch);
  EXPECT_TRUE(h.is_moe());
  EXPECT_EQ(h.n_layer, 2);
  EXPECT_EQ(h.n_embd, 64);
  EXPECT_EQ(h.n_ff, 96);
  EXPECT_EQ(h.n_ff_exp, 32) << "inferred from ffn_gate_exps: no expert_feed_forward_length key";
  EXPECT_EQ(h.n_head, 4);
  EXPECT_EQ(h.n_head_kv, 2);
  EXPECT_EQ(h.head_dim, 32);
  EXPECT_EQ(h.head_dim_v, 32);
  EXPECT_EQ(h.n_ctx_train, 4096);
  EXPECT_EQ(h.n_expert, 4);
  EXPECT_EQ(h.n_expert_used, 2);
  EXPECT_EQ(h.n_expert_shared, 0);
  EXPECT_FLOAT_EQ(static_cast<float>(h.rope_freq_base), 1e6f);
  EXPECT_FLOAT_EQ(static_cast<float>(h.rms_eps), 1e-6f);
  EXPECT_EQ(h.n_vocab, 10) << "tokenizer length wins over token_embd rows";
  ASSERT_TRUE(h.expert_weights_norm.has_value());
  EXPECT_TRUE(*h.expert_weights_norm);
  EXPECT_EQ(h.layer_has_attention, (std::vector<bool>{true, true}));
  EXPECT_EQ(h.n_attention_layers(), 2);
  EXPECT_TRUE(h.problems.empty());
  // 2 layers x 2 KV heads x (32 + 32) x 2 B per token.
  EXPECT_EQ(h.kv_cache_bytes(1), 512u);
  EXPECT_EQ(h.kv_cache_bytes(100), 51200u);
}

TEST_F(InspectModelTest, DefaultsAndInferences) {
  KV kv = {{"general.architecture", GgufValue::of_string("qwen3moe")},
           {"qwen3moe.block_count", u32(1)},
           {"qwen3moe.embedding_length", u32(64)},
           {"qwen3moe.attention.head_count", u32(8)},
           {"qwen3moe.expert_count", u32(2)},
           {"qwen3moe.expert_used_count", u32(1)}};
  // Merged gate+up: 2*n_ff rows.
  auto f = make(kv, {{"token_embd.weight", DType::F32, {64, 7}},
                     {"blk.0.ffn_gate_up_exps.weight", DType::F32, {64, 48, 2}},
                     {"blk.0.ffn_down_exps.weight", DType::F32, {24, 64, 2}}});
  const ModelHParams h = read_hparams(*f);
  EXPECT_EQ(h.n_head_kv, 8) << "defaults to head_count";
  EXPECT_EQ(h.head_dim, 8) << "defaults to n_embd / n_head";
  EXPECT_EQ(h.head_dim_v, 8) << "defaults to key_length";
  EXPECT_EQ(h.n_ff_exp, 24) << "merged gate_up rows / 2";
  EXPECT_EQ(h.n_vocab, 7) << "token_embd rows without a tokenizer";
  EXPECT_FALSE(h.expert_weights_norm.has_value());
  EXPECT_EQ(h.rope_freq_base, 0.0);

  kv.emplace_back("qwen3moe.expert_feed_forward_length", u32(20));
  EXPECT_EQ(read_hparams(*make(kv, {{"blk.0.ffn_gate_exps.weight", DType::F32, {64, 48, 2}}})).n_ff_exp, 20)
      << "the key wins over the tensors";
  KV per_expert = kv;
  per_expert.pop_back();
  EXPECT_EQ(read_hparams(*make(per_expert, {{"blk.0.ffn_gate.0.weight", DType::F32, {64, 40}}})).n_ff_exp, 40);
  EXPECT_EQ(read_hparams(*make(per_expert, {{"blk.0.ffn_down_exps.weight", DType::F32, {36, 64, 2}}})).n_ff_exp, 36);
}

TEST_F(InspectModelTest, HybridLinearAttentionLayersHaveNoKvCache) {
  KV kv = {{"general.architecture", GgufValue::of_string("qwen35moe")},
           {"qwen35moe.block_count", u32(8)},
           {"qwen35moe.embedding_length", u32(64)},
           {"qwen35moe.attention.head_count", u32(4)},
           {"qwen35moe.attention.head_count_kv", u32(1)},
           {"qwen35moe.attention.key_length", u32(16)},
           {"qwen35moe.expert_count", u32(2)},
           {"qwen35moe.expert_used_count", u32(1)},
           {"qwen35moe.ssm.conv_kernel", u32(4)},
           {"qwen35moe.ssm.state_size", u32(8)},
           {"qwen35moe.ssm.group_count", u32(2)},
           {"qwen35moe.ssm.time_step_rank", u32(4)},
           {"qwen35moe.ssm.inner_size", u32(32)}};
  {
    const ModelHParams h = read_hparams(*make(kv, {}));
    // 6 linear layers, each: conv window 3 x (2*2*8 + 32) floats + state 4 x 8 x 8 floats.
    EXPECT_EQ(h.recurrent_state_bytes(), 6u * (3 * 64 + 4 * 8 * 8) * 4);
    EXPECT_EQ(h.full_attention_interval, 4) << "qwen35moe's default";
    EXPECT_EQ(h.layer_has_attention, (std::vector<bool>{false, false, false, true, false, false, false, true}));
    EXPECT_EQ(h.n_head_kv_layer[0], 0);
    EXPECT_EQ(h.n_head_kv_layer[3], 1);
    EXPECT_EQ(h.kv_cache_bytes(10), 10u * 2 * 1 * (16 + 16) * 2);
  }
  kv.emplace_back("qwen35moe.full_attention_interval", u32(2));
  const ModelHParams h = read_hparams(*make(kv, {}));
  EXPECT_EQ(h.n_attention_layers(), 4);
  EXPECT_TRUE(h.layer_has_attention[1]);
  EXPECT_FALSE(h.layer_has_attention[2]);
  EXPECT_EQ(h.kv_cache_bytes(10), 10u * 4 * 1 * (16 + 16) * 2);
}

TEST_F(InspectModelTest, HybridMtpLayersAreAttentionAndNotInTheKvSum) {
  KV kv = {{"general.architecture", GgufValue::of_string("qwen35moe")},
           {"qwen35moe.block_count", u32(5)},  // 4 layers + 1 MTP block
           {"qwen35moe.nextn_predict_layers", u32(1)},
           {"qwen35moe.embedding_length", u32(64)},
           {"qwen35moe.attention.head_count", u32(4)},
           {"qwen35moe.attention.head_count_kv", u32(1)},
           {"qwen35moe.attention.key_length", u32(16)},
           {"qwen35moe.expert_count", u32(2)},
           {"qwen35moe.expert_used_count", u32(1)},
           {"qwen35moe.ssm.conv_kernel", u32(4)},
           {"qwen35moe.ssm.state_size", u32(8)},
           {"qwen35moe.ssm.group_count", u32(2)},
           {"qwen35moe.ssm.time_step_rank", u32(4)},
           {"qwen35moe.ssm.inner_size", u32(32)}};
  const ModelHParams h = read_hparams(*make(kv, {}));
  EXPECT_EQ(h.n_layer_nextn, 1);
  // Layer 4 is the MTP block: (4 + 1) % 4 != 0, yet it has attention.
  EXPECT_EQ(h.layer_has_attention, (std::vector<bool>{false, false, false, true, true}));
  EXPECT_EQ(h.layer_is_recurrent, (std::vector<bool>{true, true, true, false, false}));
  EXPECT_EQ(h.kv_cache_bytes(10), 10u * 1 * 1 * (16 + 16) * 2) << "only the main stack's attention layer";
  // A missing Gated DeltaNet key is named.
  KV bad;
  for (auto& [k, v] : kv)
    if (k != "qwen35moe.ssm.group_count") bad.emplace_back(k, v);
  try {
    read_hparams(*make(bad, {}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen35moe.ssm.group_count"), std::string::npos) << e.what();
  }
  KV too_many = kv;
  too_many[1] = {"qwen35moe.nextn_predict_layers", u32(5)};
  EXPECT_THROW(read_hparams(*make(too_many, {})), Error);
}

TEST_F(InspectModelTest, PerLayerKvHeadCounts) {
  KV kv = {{"general.architecture", GgufValue::of_string("llama")},
           {"llama.block_count", u32(3)},
           {"llama.embedding_length", u32(32)},
           {"llama.feed_forward_length", u32(64)},
           {"llama.attention.head_count", u32(4)},
           {"llama.attention.head_count_kv", GgufValue::of_i32s({2, 0, 1})}};
  const ModelHParams h = read_hparams(*make(kv, {}));
  EXPECT_EQ(h.n_head_kv_layer, (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(h.layer_has_attention, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(h.kv_cache_bytes(1), (2u + 1u) * (8 + 8) * 2);
  EXPECT_FALSE(h.is_moe());
}

TEST_F(InspectModelTest, MissingRequiredKeysAreNamed) {
  auto expect_missing = [&](const KV& kv, const std::string& key) {
    auto f = make(kv, {});
    const ModelHParams h = inspect_hparams(*f);  // lenient: no throw
    ASSERT_FALSE(h.problems.empty()) << key;
    EXPECT_NE(h.problems.front().find("'" + key + "'"), std::string::npos) << h.problems.front();
    try {
      read_hparams(*f);
      ADD_FAILURE() << "read_hparams accepted a file without " << key;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(f->path()), std::string::npos) << e.what();
    }
  };
  KV full = qwen3moe_kv();
  auto without = [&](const std::string& key) {
    KV kv;
    for (const auto& e : full)
      if (e.first != key) kv.push_back(e);
    return kv;
  };
  expect_missing(without("general.architecture"), "general.architecture");
  expect_missing(without("qwen3moe.block_count"), "qwen3moe.block_count");
  expect_missing(without("qwen3moe.embedding_length"), "qwen3moe.embedding_length");
  expect_missing(without("qwen3moe.attention.head_count"), "qwen3moe.attention.head_count");
  expect_missing(without("qwen3moe.expert_count"), "qwen3moe.expert_count");
  expect_missing(without("qwen3moe.expert_used_count"), "qwen3moe.expert_used_count");
  KV too_many_used = without("qwen3moe.expert_used_count");
  too_many_used.emplace_back("qwen3moe.expert_used_count", u32(5));
  expect_missing(too_many_used, "qwen3moe.expert_used_count");
  KV zero_layers = without("qwen3moe.block_count");
  zero_layers.emplace_back("qwen3moe.block_count", GgufValue::of_i32(-1));
  expect_missing(zero_layers, "qwen3moe.block_count");
  // A dense known architecture needs its FFN width.
  expect_missing({{"general.architecture", GgufValue::of_string("qwen3")},
                  {"qwen3.block_count", u32(1)},
                  {"qwen3.embedding_length", u32(8)},
                  {"qwen3.attention.head_count", u32(1)}},
                 "qwen3.feed_forward_length");
}

TEST_F(InspectModelTest, UnknownArchitecturesReportWhatTheyCan) {
  auto f = make({{"general.architecture", GgufValue::of_string("mamba9")},
                 {"mamba9.block_count", u32(3)},
                 {"mamba9.embedding_length", u32(16)},
                 {"mamba9.attention.head_count", u32(2)}},
                {});
  const ModelHParams h = read_hparams(*f);
  EXPECT_FALSE(h.known_arch);
  EXPECT_EQ(h.n_layer, 3);
  EXPECT_EQ(h.n_ff, 0);
  EXPECT_TRUE(h.problems.empty());
}

TEST_F(InspectModelTest, WrongValueTypesThrowNamingKeyAndFile) {
  KV kv = qwen3moe_kv();
  kv.emplace_back("qwen3moe.block_count", GgufValue::of_string("two"));  // replaces the u32
  auto f = make(kv, {});
  try {
    inspect_hparams(*f);
    ADD_FAILURE() << "accepted a string block_count";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("qwen3moe.block_count"), std::string::npos) << m;
    EXPECT_EQ(m.rfind(f->path() + ": ", 0), 0u) << m;
  }
}

// ---------------------------------------------------------------- roles

TEST(TensorRoles, ClassifiesGgufNames) {
  struct Case {
    const char* name;
    TensorRole role;
    int layer, expert;
    const char* suffix;
  };
  const Case cases[] = {
      {"token_embd.weight", TensorRole::TokenEmbd, -1, -1, "weight"},
      {"output.weight", TensorRole::Output, -1, -1, "weight"},
      {"output_norm.weight", TensorRole::OutputNorm, -1, -1, "weight"},
      {"blk.0.attn_norm.weight", TensorRole::AttnNorm, 0, -1, "weight"},
      {"blk.12.attn_q.weight", TensorRole::AttnQ, 12, -1, "weight"},
      {"blk.12.attn_q.bias", TensorRole::AttnQ, 12, -1, "bias"},
      {"blk.1.attn_k.weight", TensorRole::AttnK, 1, -1, "weight"},
      {"blk.1.attn_v.weight", TensorRole::AttnV, 1, -1, "weight"},
      {"blk.1.attn_qkv.weight", TensorRole::AttnQKV, 1, -1, "weight"},
      {"blk.1.attn_output.weight", TensorRole::AttnOutput, 1, -1, "weight"},
      {"blk.1.attn_q_norm.weight", TensorRole::AttnQNorm, 1, -1, "weight"},
      {"blk.1.attn_k_norm.weight", TensorRole::AttnKNorm, 1, -1, "weight"},
      {"blk.1.post_attention_norm.weight", TensorRole::AttnPostNorm, 1, -1, "weight"},
      {"blk.1.ffn_norm.weight", TensorRole::FfnNorm, 1, -1, "weight"},
      {"blk.3.ffn_gate_inp.weight", TensorRole::Router, 3, -1, "weight"},
      {"blk.3.ffn_gate_exps.weight", TensorRole::ExpertGate, 3, -1, "weight"},
      {"blk.3.ffn_up_exps.weight", TensorRole::ExpertUp, 3, -1, "weight"},
      {"blk.3.ffn_down_exps.weight", TensorRole::ExpertDown, 3, -1, "weight"},
      {"blk.3.ffn_gate_up_exps.weight", TensorRole::ExpertGateUp, 3, -1, "weight"},
      {"blk.3.ffn_down_exps.bias", TensorRole::ExpertDown, 3, -1, "bias"},
      {"blk.4.ffn_gate.7.weight", TensorRole::ExpertGate, 4, 7, "weight"},
      {"blk.4.ffn_up.0.weight", TensorRole::ExpertUp, 4, 0, "weight"},
      {"blk.4.ffn_down.15.weight", TensorRole::ExpertDown, 4, 15, "weight"},
      {"blk.5.ffn_gate_shexp.weight", TensorRole::SharedGate, 5, -1, "weight"},
      {"blk.5.ffn_up_shexp.weight", TensorRole::SharedUp, 5, -1, "weight"},
      {"blk.5.ffn_down_shexp.weight", TensorRole::SharedDown, 5, -1, "weight"},
      {"blk.5.ffn_gate_inp_shexp.weight", TensorRole::SharedRouter, 5, -1, "weight"},
      {"blk.6.ffn_gate.weight", TensorRole::DenseGate, 6, -1, "weight"},
      {"blk.6.ffn_up.weight", TensorRole::DenseUp, 6, -1, "weight"},
      {"blk.6.ffn_down.weight", TensorRole::DenseDown, 6, -1, "weight"},
      {"blk.6.ssm_conv1d.weight", TensorRole::Other, 6, -1, "weight"},
      {"rope_freqs.weight", TensorRole::Other, -1, -1, "weight"},
      // Not blk.<index>.<part>: global Other, the rest kept as the suffix.
      {"blk.x.attn_q.weight", TensorRole::Other, -1, -1, "x.attn_q.weight"},
      {"blk.99999999999.attn_q.weight", TensorRole::Other, -1, -1, "99999999999.attn_q.weight"},
      {"blk.-1.attn_q.weight", TensorRole::Other, -1, -1, "-1.attn_q.weight"},
      {"", TensorRole::Other, -1, -1, ""},
      {"blk.2", TensorRole::Other, -1, -1, "2"},
  };
  for (const Case& c : cases) {
    const TensorClass t = classify_tensor(c.name);
    EXPECT_EQ(t.role, c.role) << c.name << " -> " << role_name(t.role);
    EXPECT_EQ(t.layer, c.layer) << c.name;
    EXPECT_EQ(t.expert, c.expert) << c.name;
    EXPECT_EQ(t.suffix, c.suffix) << c.name;
  }
  EXPECT_TRUE(classify_tensor("blk.0.ffn_gate_up_exps.weight").is_routed_expert());
  EXPECT_TRUE(classify_tensor("blk.0.ffn_gate.3.weight").is_routed_expert());
  EXPECT_FALSE(classify_tensor("blk.0.ffn_gate.weight").is_routed_expert());
  EXPECT_FALSE(classify_tensor("blk.0.ffn_up_shexp.weight").is_routed_expert());
  EXPECT_TRUE(classify_tensor("blk.0.ffn_up_shexp.weight").is_shared_expert());
  EXPECT_STREQ(role_name(TensorRole::Router), "router");
  EXPECT_STREQ(role_name(TensorRole::ExpertGateUp), "expert_gate_up");
}

// ---------------------------------------------------------------- split

TEST_F(InspectModelTest, SplitsDenseAndExpertBytes) {
  auto f = make(qwen3moe_kv(), qwen3moe_tensors());
  const WeightSplit s = split_weights(*f);
  ASSERT_EQ(s.layers.size(), 2u);
  EXPECT_EQ(s.global_bytes, kGlobal);
  EXPECT_EQ(s.n_global_tensors, 3);
  for (int il = 0; il < 2; ++il) {
    const LayerSplit& l = s.layers[static_cast<size_t>(il)];
    EXPECT_EQ(l.layer, il);
    EXPECT_EQ(l.dense_bytes, kLayerDense);
    EXPECT_EQ(l.expert_bytes, kLayerExperts);
    EXPECT_EQ(l.n_dense_tensors, 9);
    EXPECT_EQ(l.n_expert_tensors, 3);
    EXPECT_EQ(l.n_expert, 4);
    EXPECT_EQ(l.one_expert_bytes, kOneExpert);
  }
  EXPECT_EQ(s.dense_bytes, kGlobal + 2 * kLayerDense);
  EXPECT_EQ(s.expert_bytes, 2 * kLayerExperts);
  EXPECT_EQ(s.total_experts, 8);
  EXPECT_EQ(s.one_expert_bytes, kOneExpert);
  uint64_t file_sum = 0;
  for (const auto& t : f->tensors()) file_sum += t.nbytes;
  EXPECT_EQ(s.total_bytes(), file_sum) << "every tensor is counted once";
}

// gpt-oss's expert biases (ffn_*_exps.bias, [rows][n_expert] f32) stay
// resident on every backend: dense bytes, neither in the expert bytes the
// tiers move nor in one expert's slot.
TEST_F(InspectModelTest, ExpertBiasesCountAsDenseBytes) {
  std::vector<T> tensors = qwen3moe_tensors();
  for (int il = 0; il < 2; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    tensors.push_back({b + "ffn_gate_exps.bias", DType::F32, {32, 4}});  // 512
    tensors.push_back({b + "ffn_up_exps.bias", DType::F32, {32, 4}});    // 512
    tensors.push_back({b + "ffn_down_exps.bias", DType::F32, {64, 4}});  // 1024
  }
  constexpr uint64_t kLayerBiases = 512 + 512 + 1024;
  auto f = make(qwen3moe_kv(), tensors);
  const WeightSplit s = split_weights(*f);
  ASSERT_EQ(s.layers.size(), 2u);
  for (const LayerSplit& l : s.layers) {
    EXPECT_EQ(l.dense_bytes, kLayerDense + kLayerBiases);
    EXPECT_EQ(l.expert_bytes, kLayerExperts);
    EXPECT_EQ(l.n_dense_tensors, 12);
    EXPECT_EQ(l.n_expert, 4);
    EXPECT_EQ(l.one_expert_bytes, kOneExpert);
  }
  EXPECT_EQ(s.dense_bytes, kGlobal + 2 * (kLayerDense + kLayerBiases));
  EXPECT_EQ(s.expert_bytes, 2 * kLayerExperts);
  uint64_t file_sum = 0;
  for (const auto& t : f->tensors()) file_sum += t.nbytes;
  EXPECT_EQ(s.total_bytes(), file_sum) << "every tensor is counted once";
}

TEST_F(InspectModelTest, SplitsPerExpertAndMergedLayouts) {
  // Layer 0: per-expert 2-D tensors, expert 1 larger (q8_0 vs f16 down) than expert 0.
  // Layer 1: merged gate_up. Layer 2: dense FFN with a shared expert only.
  auto f = make({}, {{"blk.0.ffn_gate.0.weight", DType::F32, {8, 4}},   // 128
                     {"blk.0.ffn_up.0.weight", DType::F32, {8, 4}},     // 128
                     {"blk.0.ffn_down.0.weight", DType::F16, {4, 8}},   // 64
                     {"blk.0.ffn_gate.1.weight", DType::F32, {8, 4}},   // 128
                     {"blk.0.ffn_up.1.weight", DType::F32, {8, 4}},     // 128
                     {"blk.0.ffn_down.1.weight", DType::F32, {4, 8}},   // 128
                     {"blk.0.ffn_gate_inp.weight", DType::F32, {8, 2}},  // 64, dense
                     {"blk.1.ffn_gate_up_exps.weight", DType::F32, {8, 8, 3}},  // 768
                     {"blk.1.ffn_down_exps.weight", DType::F32, {4, 8, 3}},     // 384
                     {"blk.2.ffn_up_shexp.weight", DType::F32, {8, 4}},         // 128, dense
                     {"blk.2.ffn_gate.weight", DType::F32, {8, 4}}});           // 128, dense
  const WeightSplit s = split_weights(*f);
  ASSERT_EQ(s.layers.size(), 3u);
  EXPECT_EQ(s.layers[0].n_expert, 2);
  EXPECT_EQ(s.layers[0].expert_bytes, 128u * 5 + 64);
  EXPECT_EQ(s.layers[0].one_expert_bytes, 384u) << "the larger of the two experts";
  EXPECT_EQ(s.layers[0].dense_bytes, 64u);
  EXPECT_EQ(s.layers[1].n_expert, 3);
  EXPECT_EQ(s.layers[1].one_expert_bytes, (768u + 384u) / 3);
  EXPECT_EQ(s.layers[2].n_expert, 0);
  EXPECT_EQ(s.layers[2].expert_bytes, 0u);
  EXPECT_EQ(s.layers[2].dense_bytes, 256u);
  EXPECT_EQ(s.total_experts, 5);
  EXPECT_EQ(s.one_expert_bytes, 384u);
}

TEST_F(InspectModelTest, DisagreeingExpertCountsInALayerAreAnError) {
  auto f = make({}, {{"blk.0.ffn_gate_exps.weight", DType::F32, {8, 4, 4}},
                     {"blk.0.ffn_up_exps.weight", DType::F32, {8, 4, 3}}});
  try {
    split_weights(*f);
    ADD_FAILURE() << "accepted experts 4 vs 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up_exps.weight"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- VRAM plan

TEST_F(InspectModelTest, VramPlanCountsExpertsThatFit) {
  auto f = make(qwen3moe_kv(), qwen3moe_tensors());
  const ModelHParams h = read_hparams(*f);
  const WeightSplit s = split_weights(*f);
  const uint64_t dense = kGlobal + 2 * kLayerDense;
  const uint64_t kv = 100 * 512;
  const uint64_t reserve = kVramFixedReserve + 10 * 4 * 64;
  const uint64_t minimum = dense + kv + reserve;
  EXPECT_EQ(vram_reserve_bytes(10), reserve);

  const VramPlan need = vram_needs(s, h, 100);
  EXPECT_EQ(need.dense_bytes, dense);
  EXPECT_EQ(need.kv_bytes, kv);
  EXPECT_EQ(need.reserve_bytes, reserve);
  EXPECT_EQ(need.minimum_bytes, minimum);
  EXPECT_EQ(need.everything_bytes, minimum + 2 * kLayerExperts);

  const VramPlan three = plan_vram(s, h, minimum + 3 * kOneExpert + 100, 100);
  EXPECT_TRUE(three.fits_minimum);
  EXPECT_FALSE(three.fits_everything);
  EXPECT_EQ(three.room, 3 * kOneExpert + 100);
  EXPECT_EQ(three.experts_fit, 3);
  EXPECT_EQ(three.total_experts, 8);
  EXPECT_DOUBLE_EQ(three.fraction, 3.0 / 8.0);
  EXPECT_EQ(three.layers_fit, 0);

  const VramPlan five = plan_vram(s, h, minimum + kLayerExperts + kOneExpert, 100);
  EXPECT_EQ(five.experts_fit, 5);
  EXPECT_EQ(five.layers_fit, 1);

  const VramPlan all = plan_vram(s, h, need.everything_bytes, 100);
  EXPECT_TRUE(all.fits_everything);
  EXPECT_EQ(all.experts_fit, 8);
  EXPECT_EQ(all.layers_fit, 2);
  EXPECT_DOUBLE_EQ(all.fraction, 1.0);

  const VramPlan exact = plan_vram(s, h, minimum, 100);
  EXPECT_TRUE(exact.fits_minimum);
  EXPECT_EQ(exact.room, 0u);
  EXPECT_EQ(exact.experts_fit, 0);

  const VramPlan short_by = plan_vram(s, h, minimum - 1000, 100);
  EXPECT_FALSE(short_by.fits_minimum);
  EXPECT_EQ(short_by.shortfall, 1000u);
  EXPECT_EQ(short_by.experts_fit, 0);
  EXPECT_EQ(short_by.room, 0u);

  // A longer context costs KV bytes and so experts.
  EXPECT_EQ(plan_vram(s, h, minimum + 3 * kOneExpert, 100 + 3 * kOneExpert / 512).experts_fit, 0);
}

}  // namespace
}  // namespace ms
