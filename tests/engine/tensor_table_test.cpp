// The tensor table (model/tensor_table.h) against the files the generator
// writes: every dense per-layer tensor of a generated file is one the table
// (the recipe's blocks) reads, so neither side spells a name the other lacks.
// (The loader already refuses a file missing a table entry.)
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <unistd.h>
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
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace ms
