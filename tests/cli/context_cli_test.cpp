// Context sizes through the moestream binary (CPU, the tiny model):
// `run` with --ctx 0 (the default) takes the model's trained context (no
// 4096 cap) and says what it costs (KV bytes per 1k tokens); an explicit
// --ctx is taken as given; `inspect --ctx 0` sizes for the model's context
// and with --vram states the largest context the budget holds.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"
#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "model/context_plan.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
using test::run_moestream;

class ContextCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string((fs::temp_directory_path() / ("context_cli_" + std::to_string(::getpid()) + ".gguf")).string());
    ThreadPool pool(2);
    GenOptions g;  // tiny qwen3moe
    generate_model(g, *model_, pool);
    n_ctx_train_ = GgufFile::open(*model_)->get_int("qwen3moe.context_length");
  }
  static void TearDownTestSuite() {
    fs::remove(*model_);
    delete model_;
  }
  static std::string m() { return "-m \"" + *model_ + "\" "; }
  static std::string* model_;
  static int64_t n_ctx_train_;
};
std::string* ContextCli::model_ = nullptr;
int64_t ContextCli::n_ctx_train_ = 0;

TEST_F(ContextCli, RunTakesTheModelsContextAndStatesItsCost) {
  std::string out;
  ASSERT_EQ(run_moestream("run " + m() + "-p hello -n 2 --backend cpu -t 2", &out), 0) << out;
  const std::string ctx = std::to_string(n_ctx_train_);
  EXPECT_NE(out.find("| ctx " + ctx + " |"), std::string::npos) << out;
  EXPECT_NE(out.find("context " + ctx + " tokens: KV cache "), std::string::npos) << out;
  EXPECT_NE(out.find("per 1k tokens"), std::string::npos) << out;
  ASSERT_EQ(run_moestream("run " + m() + "-p hello -n 2 --backend cpu -t 2 --ctx 100", &out), 0) << out;
  EXPECT_NE(out.find("| ctx 100 |"), std::string::npos) << out;
  // -n beyond the model's context: --ctx 0 grows to what the run needs.
  ASSERT_EQ(run_moestream("run " + m() + "-p hello -n " + std::to_string(n_ctx_train_ + 5) +
                              " --backend cpu -t 2 --ignore-eos -q",
                          &out),
            0)
      << out.substr(0, 2000);
  EXPECT_EQ(out.find("context full"), std::string::npos) << out.substr(0, 2000);
}

TEST_F(ContextCli, InspectStatesTheCostAndTheLargestContext) {
  std::string out;
  ASSERT_EQ(run_moestream("inspect \"" + *model_ + "\" --ctx 0 --no-tensors", &out), 0) << out;
  EXPECT_NE(out.find("VRAM at --ctx " + std::to_string(n_ctx_train_)), std::string::npos) << out;
  EXPECT_NE(out.find("KV per token"), std::string::npos) << out;
  ASSERT_EQ(run_moestream("inspect \"" + *model_ + "\" --ctx 0 --vram 600M --json --no-tensors", &out, 120, true), 0)
      << out;
  const auto v = nlohmann::json::parse(out).at("vram");
  EXPECT_EQ(v.at("ctx").get<int64_t>(), n_ctx_train_);
  const uint64_t per_token = v.at("kv_bytes_per_1k_tokens").get<uint64_t>() / 1024;
  ASSERT_GT(per_token, 0u);
  EXPECT_EQ(v.at("kv_bytes").get<uint64_t>(), per_token * static_cast<uint64_t>(n_ctx_train_));
  const uint64_t room = v.at("budget").get<uint64_t>() - v.at("dense_bytes").get<uint64_t>() -
                        v.at("reserve_bytes").get<uint64_t>();
  const int64_t fit = v.at("ctx_fits_max").get<int64_t>();
  EXPECT_EQ(fit, largest_context(KvCost{per_token, 0}, room));
  EXPECT_LE(static_cast<uint64_t>(fit) * per_token, room);
  EXPECT_GT(static_cast<uint64_t>(fit + 1024) * per_token, room);  // the next 1k step does not fit
}

TEST_F(ContextCli, NegativeContextIsAnError) {
  std::string out;
  EXPECT_NE(run_moestream("inspect \"" + *model_ + "\" --ctx -1", &out), 0);
  EXPECT_NE(out.find("--ctx"), std::string::npos) << out;
}

}  // namespace
}  // namespace ms
