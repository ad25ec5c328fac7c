// A test suite's tiny generated qwen3moe for `moestream bench` CLI tests:
// made once per suite (Suite names it: Suite::kFilePrefix), removed after;
// bench(args) is the CPU bench command line over it, without the bandwidth
// probe.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"

namespace ms::test {

template <class Suite>
class TinyBenchFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string((std::filesystem::temp_directory_path() /
                              (std::string(Suite::kFilePrefix) + std::to_string(::getpid()) + ".gguf"))
                                 .string());
    ThreadPool pool(2);
    GenOptions g;  // tiny qwen3moe
    generate_model(g, *model_, pool);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*model_);
    delete model_;
  }
  static std::string bench(const std::string& args) {
    return "bench -m \"" + *model_ + "\" --backend cpu -t 2 -r 1 --bandwidth 10 " + args;  // no bandwidth probe
  }
  static inline std::string* model_ = nullptr;
};

}  // namespace ms::test
