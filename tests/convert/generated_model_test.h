// The converter tests' starting point: a tiny model made by `gen` (f32) in a
// fresh temporary folder, removed after the test, and the values of its
// tensors through the reference dequantizer.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "quant/quant.h"

namespace ms::test {

inline std::vector<float> tensor_values(const GgufTensorInfo& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  dequantize_row_ref(t.type, t.data, v.data(), n);
  return v;
}

class GeneratedModelTest : public ::testing::Test {
 protected:
  // `tag` names the folder (one per test process and fixture).
  void generate(const std::string& arch, uint64_t seed, const std::string& tag) {
    dir_ = std::filesystem::temp_directory_path() / ("moestream_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ThreadPool pool(2);
    GenOptions o;
    o.arch = arch;
    o.quant = "f32";
    o.seed = seed;
    gguf_ = (dir_ / "orig.gguf").string();
    generate_model(o, gguf_, pool);
    src_ = GgufFile::open(gguf_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::filesystem::path dir_;
  std::string gguf_;
  std::unique_ptr<GgufFile> src_;
};

}  // namespace ms::test
