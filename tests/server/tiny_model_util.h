// The built-in tiny model generated into a temporary file for a server test,
// loaded with a CPU backend over two threads; the file goes with it.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "tokenizer/tokenizer.h"

namespace ms::server::test {

struct TinyCpuModel {
  ThreadPool pool{2};
  std::string path;
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<CpuBackend> be;
  // file_prefix names the test (the file is <tmp>/<prefix><pid>.gguf).
  // arch: gen's (qwen3moe by default; qwen35moe for a hybrid's recurrent state).
  explicit TinyCpuModel(const std::string& file_prefix, const std::string& arch = "qwen3moe")
      : path((std::filesystem::temp_directory_path() / (file_prefix + std::to_string(::getpid()) + ".gguf")).string()) {
    GenOptions g;
    g.arch = arch;
    g.preset = "tiny";
    generate_model(g, path, pool);
    model = LoadedModel::open(path);
    be = std::make_unique<CpuBackend>(model->weights, pool);
  }
  ~TinyCpuModel() { std::filesystem::remove(path); }
  TinyCpuModel(const TinyCpuModel&) = delete;
  TinyCpuModel& operator=(const TinyCpuModel&) = delete;
  const Tokenizer& tok() const { return *model->tokenizer; }
};

}  // namespace ms::server::test
