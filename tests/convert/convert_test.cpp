// The HF -> GGUF converter: round trips through tiny checkpoints the tests
// write themselves, read back with the GGUF reader.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "convert/converter.h"
#include "convert/hf_config.h"
#include "convert/quant_mix.h"
#include "convert/tensor_plan.h"
#include "convert/tiny_checkpoint.h"
#include "engine/quant_presets.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

namespace ms {
namespace {

using test::TinyModel;
using test::TinySpec;
namespace fs = std::filesystem;

class ConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ms_convert_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the checkpoint under dir_/name and converts it; returns the GGUF path.
  std::string convert(const TinySpec& s, const TinyModel& m, ConvertType type, const std::string& name = "hf",
                      ConvertSummary* summary = nullptr) {
    const fs::path in = dir_ / name;
    test::write_tiny_checkpoint(in, s, m);
    ConvertOptions o;
    o.input_dir = in.string();
    o.output_path = (dir_ / (name + ".gguf")).string();
    o.type = type;
    o.threads = 2;
    o.progress = false;
    ConvertSummary r = convert_hf_to_gguf(o);
    if (summary) *summary = r;
    return o.output_path;
  }

  fs::path dir_;
};

// What a GGUF tensor must hold, in f32, computed from the HF tensors
// independently of the converter's plan.
std::vector<float> expected_f32(const TinySpec& s, const TinyModel& m, const std::string& gguf) {
  const auto& v = m.values;
  if (gguf == "token_embd.weight") return v.at("model.embed_tokens.weight");
  if (gguf == "output_norm.weight") return v.at("model.norm.weight");
  if (gguf == "output.weight") return v.at("lm_head.weight");
  int L = -1;
  char rest[128] = {0};
  if (std::sscanf(gguf.c_str(), "blk.%d.%127s", &L, rest) != 2) ADD_FAILURE() << "unexpected tensor " << gguf;
  const std::string r = rest;
  const std::string hf = "model.layers." + std::to_string(L) + ".";
  auto permuted = [&](const std::vector<float>& src, int64_t heads) {
    // HF rotate-half -> GGUF adjacent pairs: within a head, row 2i+j <- row j*d/2+i.
    const int64_t d = s.head_dim, H = s.hidden;
    std::vector<float> out(src.size());
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d / 2; ++i)
        for (int64_t j = 0; j < 2; ++j)
          std::copy_n(src.begin() + (h * d + j * d / 2 + i) * H, H, out.begin() + (h * d + 2 * i + j) * H);
    return out;
  };
  const bool mix = test::is_mixtral(s);
  if (r == "attn_norm.weight") return v.at(hf + "input_layernorm.weight");
  if (r == "ffn_norm.weight") return v.at(hf + "post_attention_layernorm.weight");
  if (r == "attn_q.weight") {
    const auto& q = v.at(hf + "self_attn.q_proj.weight");
    return mix ? permuted(q, s.n_head) : q;
  }
  if (r == "attn_k.weight") {
    const auto& k = v.at(hf + "self_attn.k_proj.weight");
    return mix ? permuted(k, s.n_head_kv) : k;
  }
  if (r == "attn_v.weight") return v.at(hf + "self_attn.v_proj.weight");
  if (r == "attn_output.weight") return v.at(hf + "self_attn.o_proj.weight");
  if (r == "attn_q_norm.weight") return v.at(hf + "self_attn.q_norm.weight");
  if (r == "attn_k_norm.weight") return v.at(hf + "self_attn.k_norm.weight");
  if (r == "ffn_gate_inp.weight") return v.at(test::moe_prefix(s, L) + ".gate.weight");
  int which = r == "ffn_gate_exps.weight" ? 0 : r == "ffn_up_exps.weight" ? 1 : r == "ffn_down_exps.weight" ? 2 : -1;
  if (which < 0) {
    ADD_FAILURE() << "unexpected tensor " << gguf;
    return {};
  }
  std::vector<float> all;
  for (int64_t e = 0; e < s.n_expert; ++e) {
    const auto& x = v.at(test::expert_name(s, L, e, which));
    all.insert(all.end(), x.begin(), x.end());
  }
  return all;
}

std::vector<float> dequantize(const GgufTensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  const int64_t n = t.row_len();
  for (int64_t r = 0; r < t.n_rows(); ++r)
    dequantize_row_ref(t.type, t.data + r * t.row_nbytes(), out.data() + r * n, n);
  return out;
}

size_t expected_tensor_count(const TinySpec& s) {
  const size_t per_layer = 5 /*attn_norm, q, k, v, o*/ + 1 /*ffn_norm*/ + 4 /*router + 3 experts*/ +
                           (test::is_mixtral(s) ? 0 : 2);
  return 2 + (s.tie ? 0 : 1) + static_cast<size_t>(s.n_layer) * per_layer;
}

// ---------------------------------------------------------------- round trips

TEST_F(ConvertTest, Qwen3MoeF32IsExactAndNamedAsSpecified) {
  TinySpec s;
  TinyModel m = test::make_tiny_model(s);
  ConvertSummary sum;
  const auto path = convert(s, m, ConvertType::F32, "hf", &sum);
  EXPECT_EQ(sum.expert_layout, "per-expert");
  auto f = GgufFile::open(path);
  ASSERT_EQ(f->tensors().size(), expected_tensor_count(s));
  for (const GgufTensorInfo& t : f->tensors()) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.type, DType::F32);
    const std::vector<float> want = expected_f32(s, m, t.name);
    ASSERT_EQ(static_cast<size_t>(t.n_elements()), want.size());
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size() * 4), 0) << "values differ";
  }
  // Shapes in GGUF order (innermost first); experts merged into 3-D.
  EXPECT_EQ(f->tensor("token_embd.weight").shape, (std::vector<int64_t>{64, 8}));
  EXPECT_EQ(f->tensor("blk.1.attn_q.weight").shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(f->tensor("blk.1.attn_k.weight").shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f->tensor("blk.0.attn_q_norm.weight").shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(f->tensor("blk.0.ffn_gate_inp.weight").shape, (std::vector<int64_t>{64, 4}));
  EXPECT_EQ(f->tensor("blk.0.ffn_gate_exps.weight").shape, (std::vector<int64_t>{64, 32, 4}));
  EXPECT_EQ(f->tensor("blk.0.ffn_up_exps.weight").shape, (std::vector<int64_t>{64, 32, 4}));
  EXPECT_EQ(f->tensor("blk.0.ffn_down_exps.weight").shape, (std::vector<int64_t>{32, 64, 4}));

  // Metadata.
  EXPECT_EQ(f->get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(f->get_string("general.name"), "hf");
  EXPECT_EQ(f->get_int("general.file_type"), 0);
  EXPECT_FALSE(f->has("general.quantization_version"));
  EXPECT_EQ(f->get_int("qwen3moe.block_count"), 2);
  EXPECT_EQ(f->get_int("qwen3moe.context_length"), 512);
  EXPECT_EQ(f->get_int("qwen3moe.embedding_length"), 64);
  EXPECT_EQ(f->get_int("qwen3moe.feed_forward_length"), 96);
  EXPECT_EQ(f->get_int("qwen3moe.expert_feed_forward_length"), 32);
  EXPECT_EQ(f->get_int("qwen3moe.attention.head_count"), 4);
  EXPECT_EQ(f->get_int("qwen3moe.attention.head_count_kv"), 2);
  EXPECT_EQ(f->get_int("qwen3moe.attention.key_length"), 16);
  EXPECT_EQ(f->get_int("qwen3moe.attention.value_length"), 16);
  EXPECT_EQ(f->get_int("qwen3moe.expert_count"), 4);
  EXPECT_EQ(f->get_int("qwen3moe.expert_used_count"), 2);
  EXPECT_TRUE(f->get_bool("qwen3moe.expert_weights_norm", false));
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("qwen3moe.attention.layer_norm_rms_epsilon")), 1e-6f);
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("qwen3moe.rope.freq_base")), 1e6f);
  // Tokenizer: 5 real tokens padded to vocab_size 8, chat template carried.
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  const GgufValue& toks = f->get("tokenizer.ggml.tokens");
  ASSERT_EQ(toks.arr.size(), 8u);
  EXPECT_EQ(toks.arr[3].s, "ab");
  EXPECT_EQ(toks.arr[4].s, "<|endoftext|>");
  EXPECT_EQ(toks.arr[7].s, "[PAD7]");
  EXPECT_EQ(f->get("tokenizer.ggml.token_type").arr[7].i, 5);  // unused
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 4);
  EXPECT_EQ(f->get_string("tokenizer.chat_template"), "{{ messages }}");
}

TEST_F(ConvertTest, FusedExpertLayoutGivesTheSameFileAsPerExpert) {
  TinySpec s;
  TinyModel m = test::make_tiny_model(s);
  const auto per_expert = convert(s, m, ConvertType::F32, "per");
  s.fused = true;
  ConvertSummary sum;
  const auto fused = convert(s, m, ConvertType::F32, "fused", &sum);
  EXPECT_EQ(sum.expert_layout, "fused");
  auto a = GgufFile::open(per_expert);
  auto b = GgufFile::open(fused);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const GgufTensorInfo& t : a->tensors()) {
    SCOPED_TRACE(t.name);
    const GgufTensorInfo& u = b->tensor(t.name);
    EXPECT_EQ(t.shape, u.shape);
    ASSERT_EQ(t.nbytes, u.nbytes);
    EXPECT_EQ(std::memcmp(t.data, u.data, t.nbytes), 0);
  }
}

TEST_F(ConvertTest, MixtralPermutesQueryAndKeyRowsForAdjacentPairRope) {
  // Hand-checked example: 2 query heads and 1 KV head of size 4, every row
  // filled with its own index, so the GGUF row order shows the permutation.
  TinySpec s;
  s.model_type = "mixtral";
  s.hidden = 8;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.head_dim = 4;
  s.ff_exp = 8;
  s.n_layer = 1;
  TinyModel m = test::make_tiny_model(s);
  auto fill_rows = [&](const std::string& name) {
    auto& v = m.values[name];
    const int64_t cols = m.shapes[name][1];
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int64_t>(i) / cols);
  };
  fill_rows("model.layers.0.self_attn.q_proj.weight");
  fill_rows("model.layers.0.self_attn.k_proj.weight");
  fill_rows("model.layers.0.self_attn.v_proj.weight");
  auto f = GgufFile::open(convert(s, m, ConvertType::F32));
  auto rows = [&](const std::string& name) {
    const GgufTensorInfo& t = f->tensor(name);
    std::vector<float> out;
    for (int64_t r = 0; r < t.n_rows(); ++r) out.push_back(reinterpret_cast<const float*>(t.data)[r * t.row_len()]);
    return out;
  };
  // Head of 4: HF pairs (0,2) and (1,3); GGUF stores them adjacently: 0,2,1,3.
  EXPECT_EQ(rows("blk.0.attn_q.weight"), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_EQ(rows("blk.0.attn_k.weight"), (std::vector<float>{0, 2, 1, 3}));
  EXPECT_EQ(rows("blk.0.attn_v.weight"), (std::vector<float>{0, 1, 2, 3}));  // V is not rotated
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.expert_count"), 4);
  EXPECT_EQ(f->get_int("llama.rope.dimension_count"), 4);
  EXPECT_FALSE(f->find_tensor("blk.0.attn_q_norm.weight"));
  // Everything else (experts from w1/w3/w2) as expected.
  for (const GgufTensorInfo& t : f->tensors()) {
    SCOPED_TRACE(t.name);
    const std::vector<float> want = expected_f32(s, m, t.name);
    ASSERT_EQ(static_cast<size_t>(t.n_elements()), want.size());
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size() * 4), 0);
  }
}

TEST_F(ConvertTest, MixtralBothLayoutsAndShardsGiveTheSameTensors) {
  TinySpec s;
  s.model_type = "mixtral";
  s.n_head_kv = 2;
  TinyModel m = test::make_tiny_model(s);
  const auto v4 = convert(s, m, ConvertType::F32, "v4");
  TinySpec s5 = s;
  s5.fused = true;
  s5.mixtral_v5_names = true;
  s5.shards = 3;
  TinyModel m5 = test::make_tiny_model(s5);  // same seed: same values, v5 names
  const auto v5 = convert(s5, m5, ConvertType::F32, "v5");
  auto a = GgufFile::open(v4);
  auto b = GgufFile::open(v5);
  ASSERT_EQ(a->tensors().size(), expected_tensor_count(s));
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const GgufTensorInfo& t : a->tensors()) {
    SCOPED_TRACE(t.name);
    const std::vector<float> want = expected_f32(s, m, t.name);
    ASSERT_EQ(static_cast<size_t>(t.n_elements()), want.size());
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size() * 4), 0);
    const GgufTensorInfo& u = b->tensor(t.name);
    ASSERT_EQ(t.nbytes, u.nbytes);
    EXPECT_EQ(std::memcmp(t.data, u.data, t.nbytes), 0);
  }
}

TEST_F(ConvertTest, HalfPrecisionTargetsRoundOnceAndBf16SourcesStayExact) {
  TinySpec s;
  s.dtype = "BF16";
  s.n_layer = 1;
  TinyModel m = test::make_tiny_model(s);
  auto f = GgufFile::open(convert(s, m, ConvertType::BF16, "bf"));
  EXPECT_EQ(f->get_int("general.file_type"), 32);
  for (const GgufTensorInfo& t : f->tensors()) {
    SCOPED_TRACE(t.name);
    const bool vec = t.shape.size() == 1 || t.name.find("ffn_gate_inp") != std::string::npos;
    EXPECT_EQ(t.type, vec ? DType::F32 : DType::BF16);
    const std::vector<float> want = expected_f32(s, m, t.name);
    EXPECT_EQ(dequantize(t), want);  // BF16 -> BF16 (or F32) is exact
  }
  auto g = GgufFile::open(convert(s, m, ConvertType::F16, "f16"));
  EXPECT_EQ(g->get_int("general.file_type"), 1);
  const GgufTensorInfo& q = g->tensor("blk.0.attn_q.weight");
  EXPECT_EQ(q.type, DType::F16);
  const std::vector<float> want = expected_f32(s, m, q.name);
  const auto* h = reinterpret_cast<const uint16_t*>(q.data);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(h[i], f32_to_f16(want[i])) << i;
}

// Relative RMS error of `got` against `want`.
double rel_rms(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, w = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    w += double(want[i]) * want[i];
  }
  return std::sqrt(e / w);
}

TEST_F(ConvertTest, Q4KMMixFollowsTheTableAndStaysWithinEachFormatsError) {
  TinySpec s;
  s.hidden = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.ff_exp = 256;
  s.n_expert = 2;
  s.n_layer = 2;  // layer 1 is in the last eighth: boosted
  TinyModel m = test::make_tiny_model(s);
  auto f = GgufFile::open(convert(s, m, ConvertType::Q4_K_M));
  EXPECT_EQ(f->get_int("general.file_type"), 15);
  EXPECT_EQ(f->get_int("general.quantization_version"), 2);
  auto type_of = [&](const std::string& n) { return f->tensor(n).type; };
  EXPECT_EQ(type_of("token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(type_of("output.weight"), DType::Q6_K);
  EXPECT_EQ(type_of("output_norm.weight"), DType::F32);
  EXPECT_EQ(type_of("blk.0.ffn_gate_inp.weight"), DType::F32);
  EXPECT_EQ(type_of("blk.0.attn_q.weight"), DType::Q4_K);
  EXPECT_EQ(type_of("blk.0.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(type_of("blk.1.attn_v.weight"), DType::Q6_K);
  EXPECT_EQ(type_of("blk.0.ffn_down_exps.weight"), DType::Q4_K);
  EXPECT_EQ(type_of("blk.1.ffn_down_exps.weight"), DType::Q6_K);
  EXPECT_EQ(type_of("blk.1.ffn_gate_exps.weight"), DType::Q4_K);
  for (const GgufTensorInfo& t : f->tensors()) {
    SCOPED_TRACE(t.name);
    const std::vector<float> want = expected_f32(s, m, t.name);
    const std::vector<float> got = dequantize(t);
    ASSERT_EQ(got.size(), want.size());
    // Uniform [-1, 1] data: the expected error is step/sqrt(12) relative to
    // an RMS of 1/sqrt(3), i.e. ~6.7% at 4 bits, ~1.6% at 6 bits; allow 1.5x.
    const double bound = t.type == DType::F32 ? 0.0 : t.type == DType::Q4_K ? 0.10 : 0.025;
    EXPECT_LE(rel_rms(got, want), bound) << type_name(t.type);
  }
}

TEST_F(ConvertTest, Q8_0ErrorIsBoundedPerBlock) {
  TinySpec s;
  s.n_layer = 1;
  TinyModel m = test::make_tiny_model(s);
  auto f = GgufFile::open(convert(s, m, ConvertType::Q8_0));
  EXPECT_EQ(f->get_int("general.file_type"), 7);
  const GgufTensorInfo& t = f->tensor("blk.0.ffn_down_exps.weight");
  ASSERT_EQ(t.type, DType::Q8_0);
  const std::vector<float> want = expected_f32(s, m, t.name);
  const std::vector<float> got = dequantize(t);
  for (size_t b = 0; b < want.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(want[i]));
    const float d = amax / 127.0f;  // half a step, plus the scale's f16 rounding
    for (size_t i = b; i < b + 32; ++i) ASSERT_LE(std::fabs(got[i] - want[i]), 0.6f * d + 1e-7f) << i;
  }
}

TEST_F(ConvertTest, RowsTheKBlocksCannotTileFallBackWithANote) {
  TinySpec s;  // hidden 64: not a multiple of 256
  s.n_layer = 1;
  TinyModel m = test::make_tiny_model(s);
  ConvertSummary sum;
  auto f = GgufFile::open(convert(s, m, ConvertType::Q4_K_M, "hf", &sum));
  // llama.cpp's fallbacks: q4_K -> q5_0 (32-element blocks); the head -> q8_0.
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight").type, DType::Q5_0);
  EXPECT_EQ(f->tensor("output.weight").type, DType::Q8_0);
  bool noted = false;
  for (const auto& n : sum.notes) noted |= n.find("blk.0.attn_q.weight") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST_F(ConvertTest, EveryKAndLegacyTargetWritesThePresetsTypes) {
  TinySpec s;
  s.hidden = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.ff_exp = 256;
  s.n_expert = 2;
  s.n_layer = 2;
  TinyModel m = test::make_tiny_model(s);
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q5_k_s",
                           "q5_k_m", "q6_k", "q3_k", "q4_k", "q5_k"}) {
    SCOPED_TRACE(name);
    const ConvertType t = parse_convert_type(name);
    auto f = GgufFile::open(convert(s, m, t, name));
    const QuantScheme scheme = parse_quant_scheme(name);
    EXPECT_EQ(f->get_int("general.file_type"), scheme.ftype);
    std::vector<std::string> names;
    for (const GgufTensorInfo& ti : f->tensors()) names.push_back(ti.name);
    MixPlanner planner(scheme, MixModel{2, 2, 4, 2}, names);
    for (const GgufTensorInfo& ti : f->tensors()) {
      EXPECT_EQ(type_name(ti.type), std::string(type_name(planner.choose(ti.name, ti.shape).type))) << ti.name;
      // Valid blocks of that type, close to the source (2-bit is coarse: bound loose).
      const std::vector<float> want = expected_f32(s, m, ti.name);
      const std::vector<float> got = dequantize(ti);
      ASSERT_EQ(got.size(), want.size());
      for (float v : got) ASSERT_TRUE(std::isfinite(v)) << ti.name;
      EXPECT_LE(rel_rms(got, want), ti.type == DType::F32 ? 0.0 : 0.45) << ti.name << " " << type_name(ti.type);
    }
  }
  // A few facts of the presets on this model (2 layers, 2 experts, n_gqa 2).
  auto q2 = GgufFile::open(convert(s, m, ConvertType::Q2_K, "q2"));
  EXPECT_EQ(q2->tensor("blk.0.attn_v.weight").type, DType::Q3_K);
  EXPECT_EQ(q2->tensor("blk.0.ffn_down_exps.weight").type, DType::Q3_K);
  EXPECT_EQ(q2->tensor("blk.0.attn_output.weight").type, DType::Q3_K);
  EXPECT_EQ(q2->tensor("blk.0.ffn_gate_exps.weight").type, DType::Q2_K);
  EXPECT_EQ(q2->tensor("output.weight").type, DType::Q6_K);
  auto q3 = GgufFile::open(convert(s, m, ConvertType::Q3_K_M, "q3"));
  EXPECT_EQ(q3->tensor("blk.0.attn_v.weight").type, DType::Q5_K);
  EXPECT_EQ(q3->tensor("blk.1.ffn_down_exps.weight").type, DType::Q4_K);
  EXPECT_EQ(q3->tensor("blk.1.attn_q.weight").type, DType::Q3_K);
}

TEST_F(ConvertTest, TiedEmbeddingsWriteNoOutputTensor) {
  TinySpec s;
  s.tie = true;
  s.n_layer = 1;
  TinyModel m = test::make_tiny_model(s);
  auto f = GgufFile::open(convert(s, m, ConvertType::F32));
  EXPECT_FALSE(f->find_tensor("output.weight"));
  EXPECT_EQ(f->tensors().size(), expected_tensor_count(s));
}

// ---------------------------------------------------------------- bad input

class ConvertErrorTest : public ConvertTest {
 protected:
  // Converts dir_/hf and returns the error message (empty if none).
  std::string error_of(bool allow_unused = false) {
    ConvertOptions o;
    o.input_dir = (dir_ / "hf").string();
    o.output_path = (dir_ / "out.gguf").string();
    o.type = ConvertType::F32;
    o.progress = false;
    o.allow_unused = allow_unused;
    try {
      convert_hf_to_gguf(o);
    } catch (const Error& e) {
      EXPECT_FALSE(fs::exists(o.output_path)) << "a failed conversion left " << o.output_path;
      return e.what();
    }
    return "";
  }
  void write(const TinySpec& s, const TinyModel& m) { test::write_tiny_checkpoint(dir_ / "hf", s, m); }
};

TEST_F(ConvertErrorTest, MissingExpertTensorIsNamed) {
  TinySpec s;
  TinyModel m = test::make_tiny_model(s);
  const std::string gone = test::expert_name(s, 1, 3, 1);
  m.values.erase(gone);
  m.shapes.erase(gone);
  write(s, m);
  const std::string e = error_of();
  EXPECT_NE(e.find(gone), std::string::npos) << e;
}

TEST_F(ConvertErrorTest, ShapeThatDisagreesWithConfigIsNamed) {
  TinySpec s;
  TinyModel m = test::make_tiny_model(s);
  const std::string name = "model.layers.0.self_attn.k_proj.weight";
  m.shapes[name] = {16, 64};  // config says 2 KV heads of 16 = 32 rows
  m.values[name].resize(16 * 64);
  write(s, m);
  const std::string e = error_of();
  EXPECT_NE(e.find(name), std::string::npos) << e;
  EXPECT_NE(e.find("[16, 64]"), std::string::npos) << e;
  EXPECT_NE(e.find("[32, 64]"), std::string::npos) << e;
}

TEST_F(ConvertErrorTest, IntegerDtypeForAWeightIsRefused) {
  TinySpec s;
  s.n_layer = 1;
  TinyModel m = test::make_tiny_model(s);
  write(s, m);
  // Rewrite the file with one weight stored as I64.
  std::vector<test::StEntry> entries = test::checkpoint_entries(s, m);
  for (auto& en : entries)
    if (en.name == "model.norm.weight") {
      en.dtype = "I64";
      en.bytes.assign(static_cast<size_t>(s.hidden) * 8, 0);
    }
  test::write_safetensors(dir_ / "hf" / "model.safetensors", entries);
  const std::string e = error_of();
  EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("I64"), std::string::npos) << e;
}

TEST_F(ConvertErrorTest, MissingShardIsAnError) {
  TinySpec s;
  s.shards = 2;
  s.n_layer = 1;
  TinyModel m = test::make_tiny_model(s);
  write(s, m);
  fs::remove(dir_ / "hf" / "model-00002-of-00002.safetensors");
  const std::string e = error_of();
  EXPECT_NE(e.find("model-00002-of-00002.safetensors"), std::string::npos) << e;
}

TEST_F(ConvertErrorTest, UnusedTensorsAreAnErrorUnlessAllowed) {
  TinySpec s;
  s.n_layer = 1;
  TinyModel m = test::make_tiny_model(s);
  m.shapes["model.layers.0.mlp.shared_expert.up_proj.weight"] = {4, 64};
  m.values["model.layers.0.mlp.shared_expert.up_proj.weight"].assign(4 * 64, 0.5f);
  m.shapes["model.layers.0.self_attn.rotary_emb.inv_freq"] = {8};  // silently skipped: derived
  m.values["model.layers.0.self_attn.rotary_emb.inv_freq"].assign(8, 1.0f);
  write(s, m);
  const std::string e = error_of();
  EXPECT_NE(e.find("shared_expert.up_proj"), std::string::npos) << e;
  EXPECT_EQ(e.find("inv_freq"), std::string::npos) << e;
  EXPECT_NE(e.find("--allow-unused"), std::string::npos) << e;
  EXPECT_EQ(error_of(/*allow_unused=*/true), "");
}

TEST_F(ConvertErrorTest, MissingTokenizerIsAnError) {
  TinySpec s;
  s.n_layer = 1;
  write(s, test::make_tiny_model(s));
  fs::remove(dir_ / "hf" / "tokenizer.json");
  EXPECT_NE(error_of().find("tokenizer.json"), std::string::npos);
}

TEST_F(ConvertErrorTest, TokenizerLargerThanTheEmbeddingIsAnError) {
  TinySpec s;
  s.vocab = 4;  // the tiny tokenizer has 5 tokens
  s.n_layer = 1;
  write(s, test::make_tiny_model(s));
  const std::string e = error_of();
  EXPECT_NE(e.find("5 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("vocab_size is 4"), std::string::npos) << e;
}

TEST_F(ConvertTest, ChatTemplateComesFromItsOwnFileWhenTheConfigHasNone) {
  test::write_tiny_tokenizer(dir_);
  std::ofstream(dir_ / "tokenizer_config.json") << R"({"eos_token": "<|endoftext|>"})";
  std::ofstream(dir_ / "chat_template.jinja") << "{% for m in messages %}{{ m.content }}{% endfor %}";
  const Vocab v = load_hf_vocab(dir_.string(), 6);
  EXPECT_EQ(v.chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_EQ(v.n_tokens(), 6);
  EXPECT_EQ(v.tokens[5], "[PAD5]");
  EXPECT_EQ(v.types[5], TokenType::Unused);
}

// ---------------------------------------------------------------- config.json

TEST(HfConfigTest, UnsupportedArchitectureListsTheSupportedOnes) {
  try {
    parse_hf_config(R"({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]})", "config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gpt_neox"), std::string::npos) << m;
    EXPECT_NE(m.find("qwen3_moe"), std::string::npos) << m;
    EXPECT_NE(m.find("mixtral"), std::string::npos) << m;
  }
}

TEST(HfConfigTest, ReadsTransformers5Spellings) {
  const HfModelConfig c = parse_hf_config(R"({
    "model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
    "moe_intermediate_size": 16, "num_local_experts": 8, "num_experts_per_tok": 2,
    "norm_topk_prob": false, "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0},
    "max_position_embeddings": 1024, "mlp_only_layers": [], "decoder_sparse_step": 1})",
                                          "config.json");
  EXPECT_EQ(c.gguf_arch, "qwen3moe");
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e6);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.permute_qk);
}

TEST(HfConfigTest, RefusesWhatTheGgufCannotCarry) {
  const std::string base = R"("model_type": "mixtral", "vocab_size": 100, "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 32,
      "num_local_experts": 4, "num_experts_per_tok": 2)";
  EXPECT_NO_THROW(parse_hf_config("{" + base + "}", "c"));
  EXPECT_THROW(parse_hf_config("{" + base + R"(, "rope_scaling": {"type": "yarn", "factor": 4})" + "}", "c"), Error);
  EXPECT_THROW(parse_hf_config("{" + base + R"(, "hidden_act": "gelu"})", "c"), Error);
  EXPECT_THROW(parse_hf_config("{" + base + R"(, "num_experts_per_tok": 9})", "c"), Error);
  EXPECT_THROW(parse_hf_config(R"({"model_type": "mixtral", "hidden_size": 64})", "c"), Error);
  EXPECT_THROW(parse_hf_config("not json", "c"), Error);
  const HfModelConfig c = parse_hf_config("{" + base + "}", "c");
  EXPECT_EQ(c.gguf_arch, "llama");
  EXPECT_TRUE(c.permute_qk);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);  // Mixtral's default
}

TEST(HfConfigTest, Qwen3MoeWithDenseLayersIsRefused) {
  EXPECT_THROW(parse_hf_config(R"({"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "moe_intermediate_size": 16, "num_experts": 8,
      "num_experts_per_tok": 2, "mlp_only_layers": [0]})",
                               "c"),
               Error);
}

// ---------------------------------------------------------------- mix table, permutation

TEST(QuantMixTest, PlainTargetsAndNames) {
  EXPECT_EQ(choose_tensor_type(ConvertType::Q8_0, ConvertRole::FfnGate, 3, 48, 4096, 3, false).type, DType::Q8_0);
  EXPECT_EQ(choose_tensor_type(ConvertType::BF16, ConvertRole::Router, 0, 48, 4096, 2, false).type, DType::F32);
  EXPECT_EQ(choose_tensor_type(ConvertType::F16, ConvertRole::Norm, 0, 48, 4096, 1, false).type, DType::F32);
  const TypeChoice fb = choose_tensor_type(ConvertType::Q8_0, ConvertRole::AttnQ, 0, 48, 40, 2, false);
  EXPECT_EQ(fb.type, DType::F16);
  EXPECT_FALSE(fb.note.empty());
  EXPECT_THROW(choose_tensor_type(ConvertType::Q4_K_M, ConvertRole::AttnQ, 0, 48, 4096, 2, false), Error);
  EXPECT_EQ(parse_convert_type("Q4_K_M"), ConvertType::Q4_K_M);
  EXPECT_EQ(parse_convert_type("q3_k"), ConvertType::Q3_K);
  EXPECT_EQ(gguf_file_type(ConvertType::Q3_K_S), 11u);
  EXPECT_EQ(gguf_file_type(ConvertType::Q4_0), 2u);
  try {
    parse_convert_type("iq2_xxs");
    ADD_FAILURE() << "iq2_xxs accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q3_k_m"), std::string::npos) << e.what();  // lists the valid ones
  }
}

TEST(TensorPlanTest, RopePermutationWithinAHead) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < 8; ++r) rows.push_back(permuted_head_row(r, 8));
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
  Slab s;
  s.n_rows = 8;
  s.permute_heads = 2;  // two heads of 4
  std::vector<int64_t> across;
  for (int64_t r = 0; r < 8; ++r) across.push_back(source_row_in_slab(s, r));
  EXPECT_EQ(across, (std::vector<int64_t>{0, 2, 1, 3, 4, 6, 5, 7}));
}

}  // namespace
}  // namespace ms
