// One tensor table (model/tensor_table.h) for the three things that name a
// model's tensors: per architecture, the file `gen` writes and the plan the
// converter makes from a Hugging Face checkpoint of the same shape hold the
// same tensors, of the same shapes, in the same order; and the loader binds
// every tensor the table lists, in every expert layout, to the field the
// table says (a name that drifts on any side fails here).
//
// The checkpoints are written from the HF modeling code's tensor names (zeros:
// only names and shapes matter to a plan); the converter's values are the
// round-trip tests' job (convert_test, qwen35_convert_test, gpt_oss_convert_test).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "convert/hf_config.h"
#include "convert/tensor_plan.h"
#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/recipe.h"
#include "model/tensor_table.h"
#include "model/weights.h"
#include "tiny_checkpoint.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

class TensorOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("moestream_tensor_order_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // gen's tiny preset of `arch` (q8_0: small and quick), opened.
  std::unique_ptr<GgufFile> generate(const std::string& arch, const std::string& layout = "stacked") {
    ThreadPool pool(2);
    GenOptions o;
    o.arch = arch;
    o.quant = "q8_0";
    o.layout = layout;
    o.seed = 3;
    const std::string path = (dir_ / (arch + "_" + layout + ".gguf")).string();
    generate_model(o, path, pool);
    return GgufFile::open(path);
  }

  fs::path dir_;
};

struct NameShape {
  std::string name;
  std::vector<int64_t> shape;
  bool operator==(const NameShape&) const = default;
};
std::ostream& operator<<(std::ostream& o, const NameShape& t) {
  o << t.name << " {";
  for (size_t i = 0; i < t.shape.size(); ++i) o << (i ? ", " : "") << t.shape[i];
  return o << "}";
}

// A Hugging Face checkpoint of gen shape `s` (the model's `arch`), zeros in
// BF16, under the names transformers' modeling code gives its parameters.
// With `mtp`, qwen35moe's MTP block (mtp.*) too; with `attention_bias`,
// biases on every attention projection (config attention_bias: true).
void write_hf_checkpoint(const fs::path& dir, const std::string& arch, const GenShape& s, bool mtp,
                         bool attention_bias = false) {
  std::vector<test::StEntry> out;
  auto put = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out.push_back({name, "BF16", std::move(shape), std::vector<uint8_t>(static_cast<size_t>(2 * n), 0)});
  };
  const bool q35 = arch == "qwen35moe", gpt_oss = arch == "gpt-oss", mixtral = arch == "mixtral";
  const int64_t H = s.n_embd, V = s.n_vocab, D = s.head_dim, QH = s.n_head * D, KH = s.n_head_kv * D;
  const int64_t E = s.n_expert, Fe = s.n_ff_exp, F = s.n_ff;
  put("model.embed_tokens.weight", {V, H});
  put("model.norm.weight", {H});
  put("lm_head.weight", {V, H});
  auto attention = [&](const std::string& at) {
    put(at + "q_proj.weight", {q35 ? 2 * QH : QH, H});
    put(at + "k_proj.weight", {KH, H});
    put(at + "v_proj.weight", {KH, H});
    put(at + "o_proj.weight", {H, QH});
    if (arch == "qwen2" || gpt_oss || attention_bias) {
      put(at + "q_proj.bias", {QH});
      put(at + "k_proj.bias", {KH});
      put(at + "v_proj.bias", {KH});
    }
    if (gpt_oss || attention_bias) put(at + "o_proj.bias", {H});
    if (gpt_oss) put(at + "sinks", {s.n_head});
    if (arch == "qwen3" || arch == "qwen3moe" || q35) {
      put(at + "q_norm.weight", {D});
      put(at + "k_norm.weight", {D});
    }
  };
  auto layer = [&](const std::string& hf, bool full_attention) {
    put(hf + "input_layernorm.weight", {H});
    put(hf + "post_attention_layernorm.weight", {H});
    if (full_attention) {
      attention(hf + "self_attn.");
    } else {
      const int64_t nk = s.ssm_k_heads, nv = s.ssm_v_heads, VD = nv * s.ssm_head_v, CD = 2 * nk * s.ssm_head_k + VD;
      const std::string la = hf + "linear_attn.";
      put(la + "in_proj_qkv.weight", {CD, H});
      put(la + "in_proj_z.weight", {VD, H});
      put(la + "in_proj_b.weight", {nv, H});
      put(la + "in_proj_a.weight", {nv, H});
      put(la + "A_log", {nv});
      put(la + "dt_bias", {nv});
      put(la + "conv1d.weight", {CD, 1, s.ssm_conv_kernel});
      put(la + "norm.weight", {s.ssm_head_v});
      put(la + "out_proj.weight", {H, VD});
    }
    if (E == 0) {
      put(hf + "mlp.gate_proj.weight", {F, H});
      put(hf + "mlp.up_proj.weight", {F, H});
      put(hf + "mlp.down_proj.weight", {H, F});
      return;
    }
    if (gpt_oss) {
      put(hf + "mlp.router.weight", {E, H});
      put(hf + "mlp.router.bias", {E});
      put(hf + "mlp.experts.gate_up_proj", {E, H, 2 * Fe});
      put(hf + "mlp.experts.gate_up_proj_bias", {E, 2 * Fe});
      put(hf + "mlp.experts.down_proj", {E, Fe, H});
      put(hf + "mlp.experts.down_proj_bias", {E, H});
      return;
    }
    const std::string moe = hf + (mixtral ? "block_sparse_moe." : "mlp.");
    put(moe + "gate.weight", {E, H});
    for (int64_t e = 0; e < E; ++e) {
      const std::string ex = moe + "experts." + std::to_string(e) + ".";
      put(ex + (mixtral ? "w1" : "gate_proj") + ".weight", {Fe, H});
      put(ex + (mixtral ? "w3" : "up_proj") + ".weight", {Fe, H});
      put(ex + (mixtral ? "w2" : "down_proj") + ".weight", {H, Fe});
    }
    if (q35) {
      put(moe + "shared_expert.gate_proj.weight", {s.n_ff_shexp, H});
      put(moe + "shared_expert.up_proj.weight", {s.n_ff_shexp, H});
      put(moe + "shared_expert.down_proj.weight", {H, s.n_ff_shexp});
      put(moe + "shared_expert_gate.weight", {1, H});
    }
  };
  for (int L = 0; L < s.n_layer; ++L)
    layer("model.layers." + std::to_string(L) + ".", !q35 || (L + 1) % s.full_attn_interval == 0);
  if (q35 && mtp) {
    layer("mtp.layers.0.", true);
    put("mtp.fc.weight", {H, 2 * H});
    put("mtp.pre_fc_norm_embedding.weight", {H});
    put("mtp.pre_fc_norm_hidden.weight", {H});
    put("mtp.norm.weight", {H});
  }
  fs::create_directories(dir);
  test::write_safetensors(dir / "model.safetensors", out);

  const std::map<std::string, std::pair<std::string, std::string>> kinds = {
      {"llama", {"llama", "LlamaForCausalLM"}},       {"mixtral", {"mixtral", "MixtralForCausalLM"}},
      {"qwen2", {"qwen2", "Qwen2ForCausalLM"}},       {"qwen3", {"qwen3", "Qwen3ForCausalLM"}},
      {"qwen3moe", {"qwen3_moe", "Qwen3MoeForCausalLM"}}, {"qwen35moe", {"qwen3_5_moe_text", "Qwen3_5MoeForCausalLM"}},
      {"gpt-oss", {"gpt_oss", "GptOssForCausalLM"}},
  };
  nlohmann::json c = {
      {"model_type", kinds.at(arch).first},
      {"architectures", {kinds.at(arch).second}},
      {"vocab_size", V},
      {"hidden_size", H},
      {"num_hidden_layers", s.n_layer},
      {"num_attention_heads", s.n_head},
      {"num_key_value_heads", s.n_head_kv},
      {"head_dim", D},
      {"max_position_embeddings", s.n_ctx},
      {"rms_norm_eps", s.rms_eps},
      {"rope_theta", s.rope_base},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", false},
      {"intermediate_size", E > 0 && (mixtral || gpt_oss) ? Fe : F},
  };
  if (attention_bias) c["attention_bias"] = true;
  if (E > 0) {
    c["num_experts_per_tok"] = s.n_expert_used;
    c[mixtral || gpt_oss ? "num_local_experts" : "num_experts"] = E;
  }
  if (arch == "qwen3moe" || q35) c["moe_intermediate_size"] = Fe;
  if (q35) {
    c.erase("rope_theta");
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", s.rope_base}, {"partial_rotary_factor", 0.25},
                            {"mrope_section", {3, 3, 2}}, {"mrope_interleaved", true}};
    c["shared_expert_intermediate_size"] = s.n_ff_shexp;
    c["linear_conv_kernel_dim"] = s.ssm_conv_kernel;
    c["linear_key_head_dim"] = s.ssm_head_k;
    c["linear_value_head_dim"] = s.ssm_head_v;
    c["linear_num_key_heads"] = s.ssm_k_heads;
    c["linear_num_value_heads"] = s.ssm_v_heads;
    c["full_attention_interval"] = s.full_attn_interval;
    c["mtp_num_hidden_layers"] = 1;
  }
  if (gpt_oss) {
    c["experts_per_token"] = s.n_expert_used;
    c["sliding_window"] = s.sliding_window;
    c["swiglu_limit"] = 7.0;
    c["attention_bias"] = true;
    c["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", s.yarn_factor},
                         {"original_max_position_embeddings", s.yarn_orig_ctx},
                         {"beta_fast", 32.0},
                         {"beta_slow", 1.0},
                         {"truncate", false}};
  }
  std::ofstream(dir / "config.json") << c.dump(2);
}

std::vector<NameShape> file_tensors(const GgufFile& f) {
  std::vector<NameShape> v;
  for (const GgufTensorInfo& t : f.tensors()) v.push_back({t.name, t.shape});
  return v;
}

// Per architecture: gen's file and the converter's plan list the same tensors
// in the same order (qwen35moe also from a checkpoint without its MTP block:
// gen's list less the MTP block's tensors).
TEST_F(TensorOrderTest, GenAndConverterListTheSameTensorsInTheSameOrder) {
  struct Case {
    const char* arch;
    bool mtp;
  };
  for (const Case& k : {Case{"llama", false}, Case{"mixtral", false}, Case{"qwen2", false}, Case{"qwen3", false},
                        Case{"qwen3moe", false}, Case{"qwen35moe", true}, Case{"qwen35moe", false},
                        Case{"gpt-oss", false}}) {
    SCOPED_TRACE(std::string(k.arch) + (k.mtp ? " with MTP" : ""));
    const GenShape s = gen_preset(k.arch, "tiny");
    std::vector<NameShape> want = file_tensors(*generate(k.arch));
    if (s.n_mtp > 0 && !k.mtp) {  // the MTP block is the last one: blk.<n_layer>.*
      const std::string mtp_prefix = "blk." + std::to_string(s.n_layer) + ".";
      std::erase_if(want, [&](const NameShape& t) { return t.name.rfind(mtp_prefix, 0) == 0; });
    }
    const fs::path hf = dir_ / (std::string("hf_") + k.arch + (k.mtp ? "_mtp" : ""));
    write_hf_checkpoint(hf, k.arch, s, k.mtp);
    const HfModelConfig cfg = read_hf_config(hf.string());
    const SafetensorsModel model(hf.string());
    const ConversionPlan plan = plan_conversion(cfg, model, ConvertType::F32);
    EXPECT_TRUE(plan.unused.empty()) << "the test's checkpoint has a tensor the converter does not map: "
                                     << (plan.unused.empty() ? "" : plan.unused.front());
    std::vector<NameShape> got;
    for (const PlannedTensor& t : plan.tensors) got.push_back({t.name, t.shape});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "tensor " << i;
  }
}

// A checkpoint part the architecture's recipe would not read (attention
// biases on llama: the loader binds only what the table lists) is refused,
// naming the tensor, instead of written and silently ignored.
TEST_F(TensorOrderTest, ConverterRefusesTensorsTheTableDoesNotList) {
  const fs::path hf = dir_ / "hf_llama_bias";
  write_hf_checkpoint(hf, "llama", gen_preset("llama", "tiny"), false, true);
  const HfModelConfig cfg = read_hf_config(hf.string());
  const SafetensorsModel model(hf.string());
  try {
    plan_conversion(cfg, model, ConvertType::F32);
    FAIL() << "converted a llama checkpoint with attention biases";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn_"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(".bias"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'llama'"), std::string::npos) << e.what();
  }
}

// gen writes exactly the tensor table of the config it means to write, in
// every expert layout: names, shapes, order.
TEST_F(TensorOrderTest, GenWritesTheTableInEveryLayout) {
  for (const char* arch : {"qwen3moe", "qwen35moe", "mixtral", "gpt-oss", "qwen3", "qwen2", "llama"}) {
    for (ExpertLayout layout : {ExpertLayout::Stacked, ExpertLayout::Merged, ExpertLayout::PerExpert}) {
      if (std::string(arch) == "gpt-oss" && layout != ExpertLayout::Stacked) continue;  // stacked only
      if (gen_preset(arch, "tiny").n_expert == 0 && layout != ExpertLayout::Stacked) continue;
      SCOPED_TRACE(std::string(arch) + " " + expert_layout_name(layout));
      const GenShape s = gen_preset(arch, "tiny");
      std::vector<NameShape> table;
      for (const LayerTensorSpec& t : model_tensor_table(gen_model_config(s), layout, s.tied_output))
        table.push_back({t.name, t.shape});
      EXPECT_EQ(file_tensors(*generate(arch, expert_layout_name(layout))), table);
    }
  }
}

// Where the loader put a table entry: the bound view (or, for routed-expert
// matrices, whether every expert's pointer lies inside the named tensor).
void expect_bound(const ModelWeights& w, const GgufFile& f, const LayerTensorSpec& t) {
  const int il = t.layer;
  const LayerWeights* l = nullptr;
  const MtpWeights* m = nullptr;
  if (il >= 0 && il < w.cfg.n_layer) l = &w.layers[static_cast<size_t>(il)];
  if (il >= w.cfg.n_layer) {
    m = &w.mtp[static_cast<size_t>(il - w.cfg.n_layer)];
    l = &m->layer;
  }
  const GgufTensorInfo* in_file = f.find_tensor(t.name);
  switch (t.kind) {
    case LayerTensorSpec::Kind::Global:
      EXPECT_EQ((w.*t.global).name, t.name);
      return;
    case LayerTensorSpec::Kind::Dense:
      EXPECT_EQ((l->*t.field).name, t.name);
      return;
    case LayerTensorSpec::Kind::Mtp:
      ASSERT_NE(m, nullptr) << t.name;
      EXPECT_EQ((m->*t.mtp).name, in_file ? t.name : "") << t.name;
      return;
    case LayerTensorSpec::Kind::Expert:
      break;
  }
  ASSERT_NE(in_file, nullptr) << t.name;
  const ExpertWeights& ex = l->experts;
  switch (t.part) {
    case ExpertPart::GateBias: EXPECT_EQ(ex.gate_b_view_.name, t.name); return;
    case ExpertPart::UpBias: EXPECT_EQ(ex.up_b_view_.name, t.name); return;
    case ExpertPart::DownBias: EXPECT_EQ(ex.down_b_view_.name, t.name); return;
    default: break;
  }
  const uint8_t* begin = in_file->data;
  const uint8_t* end = begin + in_file->nbytes;
  auto inside = [&](const uint8_t* p) { return p >= begin && p < end; };
  for (int e = 0; e < ex.n_expert; ++e) {
    if (t.expert >= 0 && e != t.expert) continue;
    const bool gate = t.part == ExpertPart::Gate || t.part == ExpertPart::GateUp;
    const bool up = t.part == ExpertPart::Up || t.part == ExpertPart::GateUp;
    if (gate) EXPECT_TRUE(inside(ex.gate(e))) << t.name << " expert " << e;
    if (up) EXPECT_TRUE(inside(ex.up(e))) << t.name << " expert " << e;
    if (t.part == ExpertPart::Down) EXPECT_TRUE(inside(ex.down(e))) << t.name << " expert " << e;
  }
}

// The loader binds every tensor the table lists, each where the table says,
// and nothing in the file goes unbound.
TEST_F(TensorOrderTest, LoaderBindsEveryTableEntry) {
  for (const char* arch : {"qwen3moe", "qwen35moe", "mixtral", "gpt-oss", "qwen3", "qwen2", "llama"}) {
    for (ExpertLayout layout : {ExpertLayout::Stacked, ExpertLayout::Merged, ExpertLayout::PerExpert}) {
      if (std::string(arch) == "gpt-oss" && layout != ExpertLayout::Stacked) continue;
      if (gen_preset(arch, "tiny").n_expert == 0 && layout != ExpertLayout::Stacked) continue;
      SCOPED_TRACE(std::string(arch) + " " + expert_layout_name(layout));
      auto f = generate(arch, expert_layout_name(layout));
      const ModelWeights w = bind_weights(*f);
      const ModelConfig& c = w.cfg;
      ASSERT_EQ(static_cast<int>(w.mtp.size()), c.n_layer_mtp);
      std::vector<LayerTensorSpec> all = global_tensor_table(c, false);
      const auto plan = plan_layers(c);
      for (int il = 0; il < c.n_layer + c.n_layer_mtp; ++il)
        for (LayerTensorSpec& t :
             layer_file_tensors(c, il, il < c.n_layer ? plan[static_cast<size_t>(il)] : mtp_blocks(plan), layout))
          all.push_back(std::move(t));
      size_t in_file = 0;
      for (const LayerTensorSpec& t : all) {
        expect_bound(w, *f, t);
        if (f->find_tensor(t.name)) ++in_file;
        else EXPECT_FALSE(t.required) << t.name << " is required but gen did not write it";
      }
      EXPECT_EQ(in_file, f->tensors().size()) << "a tensor of the file that the table does not list";
      for (const LayerWeights& l : w.layers)
        if (c.is_moe()) EXPECT_EQ(l.experts.layout, expert_layout_name(layout));
    }
  }
}

}  // namespace
}  // namespace ms
