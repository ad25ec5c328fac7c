// The synthetic model writer (`moestream gen`): presets, quant mixes, determinism, and the
// real shapes of the big presets (checked from the tensor plan, without
// writing 16 GB).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "model/weights.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / (name + std::to_string(::getpid()) + ".gguf")).string();
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(SyntheticModel, PresetsHaveTheRealShapes) {
  const GenShape q = gen_preset("qwen3moe", "qwen3-30b-a3b");
  EXPECT_EQ(q.n_layer, 48);
  EXPECT_EQ(q.n_embd, 2048);
  EXPECT_EQ(q.n_head, 32);
  EXPECT_EQ(q.n_head_kv, 4);
  EXPECT_EQ(q.head_dim, 128);
  EXPECT_EQ(q.n_expert, 128);
  EXPECT_EQ(q.n_expert_used, 8);
  EXPECT_EQ(q.n_ff_exp, 768);
  EXPECT_EQ(q.n_vocab, 151936);
  const GenShape m = gen_preset("mixtral", "mixtral-8x7b");
  EXPECT_EQ(m.gguf_arch, "llama");
  EXPECT_EQ(m.n_layer, 32);
  EXPECT_EQ(m.n_embd, 4096);
  EXPECT_EQ(m.n_expert, 8);
  EXPECT_EQ(m.n_expert_used, 2);
  EXPECT_EQ(m.n_ff_exp, 14336);
  EXPECT_EQ(m.n_vocab, 32000);
  EXPECT_THROW(gen_preset("mixtral", "qwen3-30b-a3b"), Error);
  EXPECT_THROW(gen_preset("qwen3moe", "huge"), Error);
  EXPECT_THROW(gen_preset("gpt2", "tiny"), Error);
}

TEST(SyntheticModel, FileCarriesTheSchemesTypes) {
  // The tiny qwen3moe has 8 experts, so llama.cpp's Q4_K_M gives its attn_k
  // and attn_v Q8_0 and attn_output Q5_K; the output head is Q6_K.
  ThreadPool pool(2);
  GenOptions o;
  o.quant = "Q4_K_M";
  const std::string p = tmp_path("gen_mix");
  generate_model(o, p, pool);
  auto f = GgufFile::open(p);
  EXPECT_EQ(f->get_int("general.file_type"), 15);
  EXPECT_EQ(f->get_string("moestream.synthetic.quant"), "q4_k_m");
  EXPECT_EQ(f->find_tensor("output.weight")->type, DType::Q6_K);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, DType::Q4_K);
  EXPECT_EQ(f->find_tensor("blk.1.attn_v.weight")->type, DType::Q8_0);
  EXPECT_EQ(f->find_tensor("blk.1.attn_k.weight")->type, DType::Q8_0);
  EXPECT_EQ(f->find_tensor("blk.1.attn_output.weight")->type, DType::Q5_K);
  EXPECT_EQ(f->find_tensor("blk.1.attn_q.weight")->type, DType::Q4_K);
  // More bits for ffn_down: of 4 layers, the last eighth (layer 3) and every third from 4/8 = 0 (layer 2).
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down_exps.weight")->type, DType::Q4_K);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down_exps.weight")->type, DType::Q4_K);
  EXPECT_EQ(f->find_tensor("blk.2.ffn_down_exps.weight")->type, DType::Q6_K);
  EXPECT_EQ(f->find_tensor("blk.3.ffn_down_exps.weight")->type, DType::Q6_K);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_inp.weight")->type, DType::F32);
  EXPECT_EQ(f->find_tensor("blk.1.attn_norm.weight")->type, DType::F32);
  f.reset();
  // --pure: one type for every matrix, the head included.
  o.quant = "q5_k";
  o.pure = true;
  generate_model(o, p, pool);
  f = GgufFile::open(p);
  EXPECT_EQ(f->find_tensor("output.weight")->type, DType::Q5_K);
  EXPECT_EQ(f->find_tensor("blk.1.attn_v.weight")->type, DType::Q5_K);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_inp.weight")->type, DType::F32);
  EXPECT_TRUE(f->get_bool("moestream.synthetic.pure", false));
  f.reset();
  fs::remove(p);
}

TEST(SyntheticModel, SameSeedSameFileDifferentSeedDiffers) {
  ThreadPool two(2), one(1);
  GenOptions o;
  o.seed = 3;
  const std::string a = tmp_path("gen_a"), b = tmp_path("gen_b"), c = tmp_path("gen_c");
  generate_model(o, a, two);
  generate_model(o, b, one);  // thread count does not matter
  o.seed = 4;
  generate_model(o, c, two);
  EXPECT_EQ(slurp(a), slurp(b));
  EXPECT_NE(slurp(a), slurp(c));
  auto f = GgufFile::open(a);
  ModelWeights w = bind_weights(*f);
  EXPECT_EQ(w.cfg.arch_name, "qwen3moe");
  EXPECT_EQ(w.cfg.n_expert, 8);
  EXPECT_EQ(f->get_int("moestream.synthetic.seed"), 3);
  EXPECT_EQ(w.layers[0].experts.gate_type, DType::Q4_K);
  EXPECT_EQ(w.output.type, DType::Q6_K);
  for (const auto& p : {a, b, c}) fs::remove(p);
}

TEST(SyntheticModel, BadOptionsAreErrors) {
  ThreadPool pool(1);
  GenOptions o;
  o.layout = "diagonal";
  EXPECT_THROW(generate_model(o, tmp_path("gen_bad"), pool), Error);
  o = GenOptions{};
  o.router_skew = -1;
  EXPECT_THROW(generate_model(o, tmp_path("gen_bad"), pool), Error);
  o = GenOptions{};
  o.quant = "nope";
  EXPECT_THROW(generate_model(o, tmp_path("gen_bad"), pool), Error);
  o.quant = "q8_k";  // an activation format
  EXPECT_THROW(generate_model(o, tmp_path("gen_bad"), pool), Error);
  EXPECT_FALSE(fs::exists(tmp_path("gen_bad")));
}

}  // namespace
}  // namespace ms
