// `--kv-type f16|f32|q8_0` through the moestream binary (CPU): run, bench and
// logits take q8_0; `inspect --kv-type` counts its bytes in the budget sums
// (34/64 of f16's K/V, f32 twice); an unknown type is a usage error naming the
// flag (run, bench, inspect, serve).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("kv_type_cli_" + name + "_" + std::to_string(::getpid()))).string();
}

// Runs `moestream args` under a time limit; returns the exit status (124:
// timed out), *output gets stdout (and stderr unless split_stderr).
int moestream(const std::string& args, std::string* output, bool split_stderr = false) {
  const std::string log = tmp_path("log");
  const std::string cmd = "timeout 120 \"" + std::string(MS_MOESTREAM_BIN) + "\" " + args + " >\"" + log + "\"" +
                          (split_stderr ? " 2>/dev/null" : " 2>&1") + " </dev/null";
  const int status = std::system(cmd.c_str());
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  *output = ss.str();
  fs::remove(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

class KvTypeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(tmp_path("model") + ".gguf");
    ThreadPool pool(2);
    GenOptions g;  // tiny qwen3moe: head size 64
    generate_model(g, *model_, pool);
  }
  static void TearDownTestSuite() {
    fs::remove(*model_);
    delete model_;
  }
  static std::string m() { return "-m \"" + *model_ + "\" "; }
  static std::string* model_;
};
std::string* KvTypeCli::model_ = nullptr;

TEST_F(KvTypeCli, RunBenchAndLogitsTakeQ8_0) {
  std::string out;
  ASSERT_EQ(moestream("run " + m() + "--backend cpu --kv-type q8_0 -p \"hello world\" -n 6 --temp 0", &out), 0) << out;
  EXPECT_NE(out.find("(kv q8_0)"), std::string::npos) << out;
  ASSERT_EQ(moestream("bench " + m() + "--backend cpu --kv-type q8_0 -p 16 -n 4 -r 1", &out), 0) << out;
  EXPECT_NE(out.find("kv q8_0"), std::string::npos) << out;
  const std::string f16 = tmp_path("f16.f32"), q8 = tmp_path("q8.f32");
  ASSERT_EQ(moestream("logits " + m() + "--backend cpu --tokens 5,77,300,12 -o \"" + f16 + "\"", &out), 0) << out;
  ASSERT_EQ(moestream("logits " + m() + "--backend cpu --kv-type q8_0 --tokens 5,77,300,12 -o \"" + q8 + "\"", &out), 0)
      << out;
  EXPECT_EQ(fs::file_size(f16), fs::file_size(q8));
  EXPECT_GT(fs::file_size(q8), 0u);
  fs::remove(f16);
  fs::remove(q8);
}

TEST_F(KvTypeCli, InspectCountsTheTypesBytes) {
  auto kv = [&](const std::string& type) {
    std::string out;
    EXPECT_EQ(moestream("inspect \"" + *model_ + "\" --no-tensors --json --ctx 8192 --kv-type " + type, &out, true), 0)
        << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    EXPECT_EQ(j["vram"]["kv_type"], type);
    return j["vram"]["kv_bytes"].get<uint64_t>();
  };
  const uint64_t f16 = kv("f16"), f32 = kv("f32"), q8 = kv("q8_0");
  EXPECT_GT(f16, 0u);
  EXPECT_EQ(f32, 2 * f16);
  EXPECT_EQ(q8 * 64, f16 * 34);
  std::string out;
  ASSERT_EQ(moestream("inspect \"" + *model_ + "\" --no-tensors --ctx 8192 --kv-type q8_0", &out), 0) << out;
  EXPECT_NE(out.find("q8_0 K and V"), std::string::npos) << out;
}

TEST_F(KvTypeCli, UnknownTypeIsAnErrorNamingTheFlag) {
  for (const std::string cmd : {"run " + m() + "-n 1", "bench " + m() + "-p 4 -n 1 -r 1", "inspect \"" + *model_ + "\"",
                                "serve " + m() + "--port 0"}) {
    std::string out;
    // A usage error (CLI11's validation: exit status 105), before any model is read.
    const int rc = moestream(cmd + " --kv-type q4_0", &out);
    EXPECT_TRUE(rc != 0 && rc != 124 && rc < 128) << cmd << ": exit status " << rc << "\n" << out;
    EXPECT_NE(out.find("--kv-type"), std::string::npos) << cmd << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << cmd << "\n" << out;
  }
}

}  // namespace
}  // namespace ms
