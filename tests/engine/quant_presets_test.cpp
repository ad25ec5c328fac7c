// The quantization schemes of engine/quant_presets.h: llama-quantize's preset
// rules (expected types worked out by hand from llama.cpp's
// llama_tensor_get_type for each case), shape fallbacks, tied heads, --pure,
// single types, UD-style mixes, and the errors for names we do not know.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/quant_presets.h"
#include "util/error.h"

namespace ms {
namespace {

// A model's tensors in file order (names and GGUF shapes), as gen and convert write them.
struct FakeModel {
  int n_layer = 48;
  int n_expert = 128;
  int n_head = 32, n_head_kv = 4;
  int64_t d = 2048, ff = 768, vocab = 1024;
  bool tied = false;
  bool shared_expert = false;

  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors() const {
    std::vector<std::pair<std::string, std::vector<int64_t>>> t;
    t.push_back({"token_embd.weight", {d, vocab}});
    t.push_back({"output_norm.weight", {d}});
    if (!tied) t.push_back({"output.weight", {d, vocab}});
    for (int il = 0; il < n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      t.push_back({b + "attn_norm.weight", {d}});
      t.push_back({b + "attn_q.weight", {d, 4096}});
      t.push_back({b + "attn_k.weight", {d, 512}});
      t.push_back({b + "attn_v.weight", {d, 512}});
      t.push_back({b + "attn_output.weight", {4096, d}});
      t.push_back({b + "ffn_norm.weight", {d}});
      if (n_expert > 0) {
        t.push_back({b + "ffn_gate_inp.weight", {d, n_expert}});
        t.push_back({b + "ffn_gate_exps.weight", {d, ff, n_expert}});
        t.push_back({b + "ffn_up_exps.weight", {d, ff, n_expert}});
        t.push_back({b + "ffn_down_exps.weight", {ff, d, n_expert}});
        if (shared_expert) {
          t.push_back({b + "ffn_gate_shexp.weight", {d, ff}});
          t.push_back({b + "ffn_up_shexp.weight", {d, ff}});
          t.push_back({b + "ffn_down_shexp.weight", {ff, d}});
        }
      } else {
        t.push_back({b + "ffn_gate.weight", {d, ff}});
        t.push_back({b + "ffn_up.weight", {d, ff}});
        t.push_back({b + "ffn_down.weight", {ff, d}});
      }
    }
    return t;
  }
};

// Every tensor's type under a scheme.
std::map<std::string, DType> types_of(const FakeModel& m, const std::string& scheme, bool pure = false) {
  const auto tensors = m.tensors();
  std::vector<std::string> names;
  for (const auto& [n, s] : tensors) names.push_back(n);
  MixModel mm;
  mm.n_layer = m.n_layer;
  mm.n_expert = m.n_expert;
  mm.n_head = m.n_head;
  mm.n_head_kv = m.n_head_kv;
  MixPlanner planner(parse_quant_scheme(scheme, pure), mm, names);
  std::map<std::string, DType> out;
  for (const auto& [n, s] : tensors) out[n] = planner.choose(n, s).type;
  return out;
}

std::string blk(int il, const std::string& part) { return "blk." + std::to_string(il) + "." + part + ".weight"; }

TEST(QuantPresets, Q4KMOnAManyExpertModel) {
  // Qwen3-30B-A3B's shape: 48 layers, 128 experts, 8 query heads per KV head.
  const auto t = types_of(FakeModel{}, "q4_k_m");
  EXPECT_EQ(t.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(t.at("token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(t.at("output_norm.weight"), DType::F32);
  EXPECT_EQ(t.at(blk(3, "ffn_gate_inp")), DType::F32);
  EXPECT_EQ(t.at(blk(3, "attn_norm")), DType::F32);
  // More bits (Q6_K) in the first and last eighth and every third layer between (48/8 = 6: layers 8, 11, ...).
  for (int il : {0, 5, 8, 11, 41, 42, 47}) {
    EXPECT_EQ(t.at(blk(il, "attn_v")), DType::Q6_K) << il;
    EXPECT_EQ(t.at(blk(il, "ffn_down_exps")), DType::Q6_K) << il;
  }
  for (int il : {6, 7, 9, 10, 40}) {
    EXPECT_EQ(t.at(blk(il, "attn_v")), DType::Q4_K) << il;
    EXPECT_EQ(t.at(blk(il, "ffn_down_exps")), DType::Q4_K) << il;
  }
  EXPECT_EQ(t.at(blk(0, "attn_k")), DType::Q4_K);
  EXPECT_EQ(t.at(blk(0, "attn_output")), DType::Q4_K);
  EXPECT_EQ(t.at(blk(0, "ffn_gate_exps")), DType::Q4_K);
  EXPECT_EQ(t.at(blk(0, "ffn_up_exps")), DType::Q4_K);
}

TEST(QuantPresets, EightExpertModelsGetQ80KeysAndValues) {
  FakeModel mixtral;
  mixtral.n_layer = 32;
  mixtral.n_expert = 8;
  mixtral.n_head_kv = 8;
  for (const char* s : {"q4_k_m", "q3_k_m", "q2_k", "iq4_xs"}) {
    const auto t = types_of(mixtral, s);
    EXPECT_EQ(t.at(blk(9, "attn_v")), DType::Q8_0) << s;
    EXPECT_EQ(t.at(blk(9, "attn_k")), DType::Q8_0) << s;
    EXPECT_EQ(t.at(blk(9, "attn_output")), DType::Q5_K) << s;
  }
  EXPECT_EQ(types_of(mixtral, "q4_k_m").at(blk(9, "attn_q")), DType::Q4_K);
  // Q5_K_M is not among the presets whose attn_output gets Q5_K.
  EXPECT_EQ(types_of(mixtral, "q5_k_m").at(blk(9, "attn_output")), DType::Q5_K);
  EXPECT_EQ(types_of(mixtral, "q6_k").at(blk(9, "attn_output")), DType::Q6_K);
  // The 1-2 bit IQ presets take another branch: keys Q4_K, values Q4_K (n_expert >= 4).
  const auto iq = types_of(mixtral, "iq2_m");
  EXPECT_EQ(iq.at(blk(9, "attn_k")), DType::Q4_K);
  EXPECT_EQ(iq.at(blk(9, "attn_v")), DType::Q4_K);
  EXPECT_EQ(iq.at(blk(9, "attn_output")), DType::Q5_K);
}

TEST(QuantPresets, Q3KMixes) {
  FakeModel dense;
  dense.n_expert = 0;  // 48 layers, n_gqa 8
  const auto m = types_of(dense, "q3_k_m");
  EXPECT_EQ(m.at(blk(0, "attn_v")), DType::Q5_K);  // the first two attn_v
  EXPECT_EQ(m.at(blk(1, "attn_v")), DType::Q5_K);
  EXPECT_EQ(m.at(blk(2, "attn_v")), DType::Q4_K);
  EXPECT_EQ(m.at(blk(2, "ffn_down")), DType::Q5_K);  // layers < 48/16
  EXPECT_EQ(m.at(blk(3, "ffn_down")), DType::Q4_K);
  EXPECT_EQ(m.at(blk(3, "attn_output")), DType::Q4_K);
  EXPECT_EQ(m.at(blk(3, "ffn_gate")), DType::Q3_K);
  EXPECT_EQ(m.at(blk(3, "attn_q")), DType::Q3_K);
  const auto l = types_of(dense, "q3_k_l");
  EXPECT_EQ(l.at(blk(20, "attn_v")), DType::Q5_K);
  EXPECT_EQ(l.at(blk(20, "ffn_down")), DType::Q5_K);
  EXPECT_EQ(l.at(blk(20, "attn_output")), DType::Q5_K);
  const auto s = types_of(dense, "q3_k_s");
  EXPECT_EQ(s.at(blk(20, "attn_v")), DType::Q3_K);
  EXPECT_EQ(s.at(blk(0, "ffn_down")), DType::Q3_K);
  EXPECT_EQ(s.at("output.weight"), DType::Q6_K);
}

TEST(QuantPresets, Q2K) {
  FakeModel m;  // n_gqa 8
  auto t = types_of(m, "q2_k");
  EXPECT_EQ(t.at("token_embd.weight"), DType::Q2_K);
  EXPECT_EQ(t.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(t.at(blk(4, "attn_v")), DType::Q4_K);
  EXPECT_EQ(t.at(blk(4, "ffn_down_exps")), DType::Q3_K);
  EXPECT_EQ(t.at(blk(4, "attn_output")), DType::Q3_K);
  EXPECT_EQ(t.at(blk(4, "ffn_gate_exps")), DType::Q2_K);
  m.n_head_kv = 16;  // n_gqa 2
  t = types_of(m, "q2_k");
  EXPECT_EQ(t.at(blk(4, "attn_v")), DType::Q3_K);
}

TEST(QuantPresets, IQ4XSAndIQ3Mixes) {
  const auto x = types_of(FakeModel{}, "iq4_xs");
  EXPECT_EQ(x.at("token_embd.weight"), DType::IQ4_XS);
  EXPECT_EQ(x.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(x.at(blk(4, "attn_v")), DType::Q5_K);         // n_gqa >= 4
  EXPECT_EQ(x.at(blk(5, "ffn_down_exps")), DType::Q5_K);  // first eighth, no imatrix
  EXPECT_EQ(x.at(blk(6, "ffn_down_exps")), DType::IQ4_XS);
  EXPECT_EQ(x.at(blk(6, "attn_output")), DType::IQ4_XS);

  FakeModel gqa2;
  gqa2.n_head_kv = 16;
  gqa2.n_expert = 16;
  const auto xxs = types_of(gqa2, "iq3_xxs");
  EXPECT_EQ(xxs.at("token_embd.weight"), DType::IQ3_S);
  EXPECT_EQ(xxs.at("output.weight"), DType::Q5_K);
  EXPECT_EQ(xxs.at(blk(9, "attn_v")), DType::IQ3_S);  // no imatrix
  EXPECT_EQ(xxs.at(blk(9, "attn_k")), DType::IQ2_S);
  EXPECT_EQ(xxs.at(blk(9, "attn_q")), DType::IQ2_S);
  EXPECT_EQ(xxs.at(blk(9, "attn_output")), DType::IQ3_S);
  EXPECT_EQ(xxs.at(blk(0, "ffn_down_exps")), DType::Q4_K);
  EXPECT_EQ(xxs.at(blk(9, "ffn_down_exps")), DType::Q3_K);
  EXPECT_EQ(xxs.at(blk(9, "ffn_up_exps")), DType::IQ3_XXS);

  const auto m = types_of(gqa2, "iq3_m");
  EXPECT_EQ(m.at("token_embd.weight"), DType::IQ3_S);
  EXPECT_EQ(m.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(m.at(blk(9, "attn_v")), DType::Q4_K);
  EXPECT_EQ(m.at(blk(9, "attn_output")), DType::Q4_K);
  EXPECT_EQ(m.at(blk(0, "ffn_down_exps")), DType::Q4_K);
  EXPECT_EQ(m.at(blk(9, "ffn_down_exps")), DType::IQ3_S);
  EXPECT_EQ(m.at(blk(9, "ffn_gate_exps")), DType::IQ3_S);
}

TEST(QuantPresets, IQ2MCountsFfnDownTensors) {
  FakeModel m;  // 48 layers, a shared expert: two ffn_down tensors per layer
  m.shared_expert = true;
  const auto t = types_of(m, "iq2_m");
  EXPECT_EQ(t.at("token_embd.weight"), DType::IQ3_S);
  EXPECT_EQ(t.at("output.weight"), DType::Q5_K);
  EXPECT_EQ(t.at(blk(7, "attn_v")), DType::Q4_K);
  EXPECT_EQ(t.at(blk(7, "attn_output")), DType::IQ3_S);
  EXPECT_EQ(t.at(blk(7, "ffn_gate_exps")), DType::IQ2_S);
  // The first 48/8 = 6 ffn_down tensors get IQ3_S: layers 0-2, each with two.
  EXPECT_EQ(t.at(blk(2, "ffn_down_exps")), DType::IQ3_S);
  EXPECT_EQ(t.at(blk(2, "ffn_down_shexp")), DType::IQ3_S);
  EXPECT_EQ(t.at(blk(3, "ffn_down_exps")), DType::IQ2_S);
}

TEST(QuantPresets, DeltaNetInputProjectionCountsAsAttnV) {
  // qwen35moe: three Gated DeltaNet layers (attn_qkv) then one attention
  // layer (attn_v); llama.cpp counts both as V-like tensors, in file order.
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (int il = 0; il < 4; ++il) {
    const bool linear = il % 4 != 3;
    names.push_back(blk(il, linear ? "attn_qkv" : "attn_v"));
    shapes.push_back({2048, linear ? 8192 : 512});
    names.push_back(blk(il, linear ? "ssm_alpha" : "attn_k"));
    shapes.push_back({2048, linear ? 32 : 512});
  }
  names.push_back("output.weight");
  shapes.push_back({2048, 1024});
  MixPlanner p(parse_quant_scheme("q3_k_m"), MixModel{4, 256, 16, 2}, names);
  std::vector<DType> got;
  for (size_t i = 0; i < names.size(); ++i) got.push_back(p.choose(names[i], shapes[i]).type);
  EXPECT_EQ(got[0], DType::Q5_K);  // blk.0.attn_qkv: the first V-like tensor
  EXPECT_EQ(got[1], DType::Q3_K);  // ssm_alpha: the default type
  EXPECT_EQ(got[2], DType::Q5_K);  // blk.1.attn_qkv: the second
  EXPECT_EQ(got[4], DType::Q4_K);  // blk.2.attn_qkv: the third
  EXPECT_EQ(got[6], DType::Q4_K);  // blk.3.attn_v
  EXPECT_EQ(got[8], DType::Q6_K);  // output
}

TEST(QuantPresets, ShapeFallbacks) {
  FakeModel m;
  m.d = 2048;
  m.ff = 96;  // expert rows of 96 (down) fit no 256-block
  auto t = types_of(m, "q4_k_m");
  EXPECT_EQ(t.at(blk(6, "ffn_down_exps")), DType::Q5_0);  // Q4_K -> Q5_0
  EXPECT_EQ(t.at(blk(0, "ffn_down_exps")), DType::Q8_0);  // Q6_K -> Q8_0
  EXPECT_EQ(types_of(m, "q2_k").at(blk(6, "ffn_down_exps")), DType::Q4_0);   // Q3_K -> Q4_0
  EXPECT_EQ(types_of(m, "q5_k_s").at(blk(6, "ffn_down_exps")), DType::Q5_1);  // Q5_K -> Q5_1
  EXPECT_EQ(types_of(m, "iq2_xxs").at(blk(9, "ffn_down_exps")), DType::IQ4_NL);
  m.ff = 40;  // not even a 32-block
  EXPECT_EQ(types_of(m, "q4_k_m").at(blk(6, "ffn_down_exps")), DType::F16);
  // An output head whose rows fit no 256-block is Q8_0.
  FakeModel narrow;
  narrow.d = 96;
  narrow.n_layer = 2;
  EXPECT_EQ(types_of(narrow, "q4_k_m").at("output.weight"), DType::Q8_0);
  // The note says why.
  MixPlanner p(parse_quant_scheme("q4_k"), MixModel{1, 0, 1, 1}, {"blk.0.attn_q.weight"});
  const MixChoice c = p.choose("blk.0.attn_q.weight", {96, 64});
  EXPECT_EQ(c.type, DType::Q5_0);
  EXPECT_NE(c.note.find("96"), std::string::npos);
}

TEST(QuantPresets, TiedEmbeddingTakesTheHeadsType) {
  FakeModel m;
  m.tied = true;
  EXPECT_EQ(types_of(m, "q4_k_m").at("token_embd.weight"), DType::Q6_K);
  EXPECT_EQ(types_of(m, "iq2_xxs").at("token_embd.weight"), DType::Q5_K);
}

TEST(QuantPresets, PureSingleAndFloat) {
  const FakeModel m;
  for (const auto& [n, t] : types_of(m, "q2_k", true))
    EXPECT_EQ(t, n.find("_norm") != std::string::npos || n.find("gate_inp") != std::string::npos ? DType::F32
                                                                                                   : DType::Q2_K)
        << n;
  EXPECT_EQ(types_of(m, "iq2_s", true).at(blk(0, "attn_q")), DType::IQ2_S);  // a type name, not the preset
  EXPECT_EQ(types_of(m, "iq2_s").at(blk(9, "attn_q")), DType::IQ2_XS);       // the preset's default type
  const auto q5 = types_of(m, "q5_k");  // a single type: the head by llama.cpp's output rule
  EXPECT_EQ(q5.at(blk(0, "attn_v")), DType::Q5_K);
  EXPECT_EQ(q5.at(blk(0, "ffn_down_exps")), DType::Q5_K);
  EXPECT_EQ(q5.at("token_embd.weight"), DType::Q5_K);
  EXPECT_EQ(q5.at("output.weight"), DType::Q6_K);
  for (const char* f : {"f16", "bf16", "f32"}) {
    const auto t = types_of(m, f);
    EXPECT_EQ(t.at("output.weight"), parse_quant_scheme(f).base) << f;
    EXPECT_EQ(t.at(blk(0, "attn_v")), parse_quant_scheme(f).base) << f;
    EXPECT_EQ(t.at(blk(0, "attn_norm")), DType::F32) << f;
  }
  EXPECT_EQ(types_of(m, "q8_0").at("output.weight"), DType::Q8_0);
  EXPECT_EQ(types_of(m, "q4_0").at("output.weight"), DType::Q6_K);
}

TEST(QuantPresets, UdAndMxfp4Mixes) {
  FakeModel m;
  m.shared_expert = true;
  const auto u = types_of(m, "ud_q2_k_xl");
  EXPECT_EQ(u.at(blk(3, "attn_q")), DType::Q8_0);
  EXPECT_EQ(u.at(blk(3, "attn_v")), DType::Q8_0);
  EXPECT_EQ(u.at(blk(3, "attn_output")), DType::Q8_0);
  EXPECT_EQ(u.at(blk(3, "ffn_gate_shexp")), DType::Q8_0);
  EXPECT_EQ(u.at(blk(3, "ffn_down_shexp")), DType::Q8_0);
  EXPECT_EQ(u.at(blk(3, "ffn_gate_exps")), DType::Q2_K);
  EXPECT_EQ(u.at(blk(3, "ffn_up_exps")), DType::Q2_K);
  EXPECT_EQ(u.at(blk(3, "ffn_down_exps")), DType::Q3_K);
  EXPECT_EQ(u.at(blk(3, "ffn_gate_inp")), DType::F32);
  EXPECT_EQ(u.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(u.at("token_embd.weight"), DType::Q4_K);
  const auto x = types_of(m, "mxfp4_moe");
  EXPECT_EQ(x.at(blk(3, "ffn_gate_exps")), DType::MXFP4);
  EXPECT_EQ(x.at(blk(3, "ffn_down_exps")), DType::MXFP4);
  EXPECT_EQ(x.at(blk(3, "ffn_down_shexp")), DType::Q8_0);
  EXPECT_EQ(x.at(blk(3, "attn_q")), DType::Q8_0);
  EXPECT_EQ(x.at("output.weight"), DType::Q8_0);
  EXPECT_EQ(x.at("token_embd.weight"), DType::Q8_0);
}

TEST(QuantPresets, WhatIsQuantizedAtAll) {
  EXPECT_TRUE(mix_quantizes("blk.0.attn_q.weight", 2));
  EXPECT_TRUE(mix_quantizes("blk.0.ffn_gate_exps.weight", 3));
  EXPECT_TRUE(mix_quantizes("blk.0.ssm_alpha.weight", 2));
  EXPECT_FALSE(mix_quantizes("blk.0.attn_q.bias", 1));
  EXPECT_FALSE(mix_quantizes("blk.0.attn_q_norm.weight", 1));
  EXPECT_FALSE(mix_quantizes("blk.0.ffn_gate_inp.weight", 2));
  EXPECT_FALSE(mix_quantizes("blk.0.ssm_conv1d.weight", 2));
  EXPECT_FALSE(mix_quantizes("blk.0.ssm_a", 1));
  EXPECT_FALSE(mix_quantizes("output_norm.weight", 1));
}

TEST(QuantPresets, NamesAndErrors) {
  EXPECT_EQ(parse_quant_scheme("Q4_K_M").name, "q4_k_m");
  EXPECT_EQ(parse_quant_scheme("q4-k-m").ftype, 15);
  EXPECT_EQ(parse_quant_scheme("iq4_xs").ftype, 30);
  EXPECT_EQ(parse_quant_scheme("q4_k").kind, QuantScheme::Kind::Single);
  EXPECT_EQ(parse_quant_scheme("q4_k").ftype, 14);          // closest preset: Q4_K_S
  EXPECT_EQ(parse_quant_scheme("iq3_s", true).ftype, 26);   // the preset of the same name
  EXPECT_EQ(parse_quant_scheme("iq2_s", true).ftype, 28);   // also by name (the preset defaults to iq2_XS)
  EXPECT_EQ(parse_quant_scheme("q2_k").kind, QuantScheme::Kind::Preset);
  EXPECT_EQ(parse_quant_scheme("ud_q2_k_xl").kind, QuantScheme::Kind::Ud);
  for (const char* bad : {"q9_z", "q8_k", "q8_1", "i32", "f64", ""}) {
    try {
      parse_quant_scheme(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("q4_k_m"), std::string::npos) << msg;  // lists what is valid
      EXPECT_NE(msg.find("iq2_m"), std::string::npos) << msg;
      EXPECT_NE(msg.find("ud_q2_k_xl"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(parse_quant_scheme("q4_k_m", true), Error);  // --pure takes a type name
  EXPECT_THROW(parse_quant_scheme("q8_k", true), Error);
  // Every listed name parses.
  for (const auto& list : {quant_preset_names(), quant_ud_names(), quant_single_names()})
    for (const std::string& n : list) EXPECT_NO_THROW(parse_quant_scheme(n)) << n;
}

}  // namespace
}  // namespace ms
