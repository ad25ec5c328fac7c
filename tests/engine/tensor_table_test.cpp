// The tensor table (model/tensor_table.h) against the files the generator
// writes: every dense per-layer tensor of a generated file is one the table
// (the recipe's blocks) reads, so neither side spells a name the other lacks.
// (The loader already refuses a file missing a table entry.)
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>
#include <variant>

#include "cpu/thread_pool.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "model/tensor_roles.h"
#include "model/tensor_table.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

TEST(TensorTable, CoversEveryDenseLayerTensorOfGeneratedFiles) {
  const fs::path dir = fs::temp_directory_path() / ("moestream_tensor_table_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ThreadPool pool(2);
  for (const char* arch : {"qwen3moe", "qwen35moe", "mixtral", "gpt-oss", "qwen3", "qwen2", "llama"}) {
    GenOptions o;
    o.arch = arch;
    o.preset = "tiny";
    o.quant = "q8_0";
    o.seed = 5;
    const std::string path = (dir / (std::string(arch) + ".gguf")).string();
    generate_model(o, path, pool);
    auto m = LoadedModel::open(path);
    const ModelConfig& c = m->weights.cfg;
    const auto plan = plan_layers(c);
    std::set<std::string> table;
    for (int il = 0; il < c.n_layer; ++il)
      for (const LayerTensorSpec& t : layer_tensor_table(c, il, plan[static_cast<size_t>(il)])) table.insert(t.name);
    // MTP blocks are bound as the main stack's attention layers.
    for (int j = 0; j < c.n_layer_mtp; ++j)
      for (const auto& calls : plan)
        if (!calls.empty() && std::holds_alternative<AttentionBlock>(calls.front())) {
          for (const LayerTensorSpec& t : layer_tensor_table(c, c.n_layer + j, calls)) table.insert(t.name);
          break;
        }
    int checked = 0;
    for (const GgufTensorInfo& t : m->file->tensors()) {
      const TensorClass k = classify_tensor(t.name);
      if (k.layer < 0 || k.is_routed_expert() || t.name.find(".nextn.") != std::string::npos) continue;
      EXPECT_TRUE(table.count(t.name)) << arch << ": the file has '" << t.name << "', which no block reads";
      ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(table.size())) << arch;

    // gen lists the dense tensors from the table over the config it means to
    // write (gen_model_config): that config must give the same table as the
    // one the file reads back as, layer by layer, names, shapes and order.
    const ModelConfig g = gen_model_config(gen_preset(arch, "tiny"));
    ASSERT_EQ(g.n_layer, c.n_layer) << arch;
    const auto gplan = plan_layers(g);
    for (int il = 0; il < c.n_layer; ++il) {
      const auto from_file = layer_tensor_table(c, il, plan[static_cast<size_t>(il)]);
      const auto from_gen = layer_tensor_table(g, il, gplan[static_cast<size_t>(il)]);
      ASSERT_EQ(from_gen.size(), from_file.size()) << arch << " layer " << il;
      for (size_t i = 0; i < from_file.size(); ++i) {
        EXPECT_EQ(from_gen[i].name, from_file[i].name) << arch;
        EXPECT_EQ(from_gen[i].shape, from_file[i].shape) << arch << " " << from_file[i].name;
      }
      // ... and the file stores them in table order (gen writes what it lists).
      std::vector<std::string> in_file;
      for (const GgufTensorInfo& t : m->file->tensors())
        if (classify_tensor(t.name).layer == il && !classify_tensor(t.name).is_routed_expert() &&
            t.name.find(".nextn.") == std::string::npos)
          in_file.push_back(t.name);
      std::vector<std::string> listed;
      for (const LayerTensorSpec& t : from_file) listed.push_back(t.name);
      EXPECT_EQ(in_file, listed) << arch << " layer " << il;
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The one spelling: every entry of every arch's table is named by
// layer_tensor_name (what the generator, the converter and the test
// reference call), and within a layer no two fields share a name.
TEST(TensorTable, NamesComeFromOneSpellingPerField) {
  for (const char* arch : {"qwen3moe", "qwen35moe", "mixtral", "gpt-oss", "qwen3", "qwen2", "llama"}) {
    const ModelConfig c = gen_model_config(gen_preset(arch, "tiny"));
    const auto plan = plan_layers(c);
    for (int il = 0; il < c.n_layer; ++il) {
      std::set<std::string> names;
      for (const LayerTensorSpec& t : layer_tensor_table(c, il, plan[static_cast<size_t>(il)])) {
        EXPECT_EQ(t.name, layer_tensor_name(il, t.field, *c.arch)) << arch;
        EXPECT_TRUE(names.insert(t.name).second) << arch << ": two fields named " << t.name;
      }
    }
  }
  EXPECT_STREQ(layer_tensor_suffix(&LayerWeights::ffn_norm, arch_info("qwen3moe")), "ffn_norm.weight");
  EXPECT_STREQ(layer_tensor_suffix(&LayerWeights::ffn_norm, arch_info("gpt-oss")), "post_attention_norm.weight");
}

// classify_tensor (model/tensor_roles.h: the byte split between dense weights
// and the tiered routed experts, read from names alone) agrees with the
// table on what is a routed expert, in every layout, MTP blocks included.
TEST(TensorTableRoles, RoutedExpertsAreExactlyTheTablesExpertEntries) {
  for (const char* arch : {"qwen3moe", "qwen35moe", "mixtral", "gpt-oss", "qwen3", "qwen2", "llama"}) {
    const GenShape s = gen_preset(arch, "tiny");
    for (ExpertLayout layout : {ExpertLayout::Stacked, ExpertLayout::Merged, ExpertLayout::PerExpert}) {
      const ModelConfig c = gen_model_config(s);
      int n_expert_tensors = 0;
      for (const LayerTensorSpec& t : model_tensor_table(c, layout, s.tied_output)) {
        const TensorClass k = classify_tensor(t.name);
        const bool expert = t.kind == LayerTensorSpec::Kind::Expert;
        n_expert_tensors += expert ? 1 : 0;
        EXPECT_EQ(k.is_routed_expert(), expert) << arch << " " << t.name;
        EXPECT_EQ(k.layer, t.layer) << t.name;
        if (expert) EXPECT_EQ(k.expert, t.expert) << t.name;
        if (t.kind == LayerTensorSpec::Kind::Dense && t.field == &LayerWeights::router)
          EXPECT_EQ(k.role, TensorRole::Router) << t.name;
      }
      EXPECT_EQ(n_expert_tensors > 0, s.n_expert > 0) << arch;
    }
  }
}

}  // namespace
}  // namespace ms
