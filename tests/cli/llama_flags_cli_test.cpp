// llama.cpp's flag spellings through the moestream binary (src/cli/llama_flags.h):
// the ones that mean the same here give the same result as moestream's own
// flags; the layer/tensor placement flags (-ngl, -ot, --n-cpu-moe, ...) are
// answered with one line saying what --vram does instead; -fa is a no-op
// with a notice; --vram on a build without CUDA says that it does nothing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "tiny_bench_fixture.h"

namespace ms {
namespace {

using test::run_moestream;

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

TEST(LlamaFlags, LayerPlacementFlagsPointToVram) {
  for (const char* flag : {"-ngl 99", "--n-gpu-layers 99", "--gpu-layers=99", "-ot exps=CPU", "--override-tensor x=CPU",
                           "--n-cpu-moe 20", "-ncmoe 20", "--cpu-moe", "-cmoe"}) {
    for (const char* command : {"run -p hi", "serve", "bench -p 1 -n 1"}) {
      SCOPED_TRACE(std::string(command) + " " + flag);
      std::string out;
      EXPECT_EQ(run_moestream(std::string(command) + " " + flag, &out, 60), 1) << out;
      EXPECT_EQ(lines(out), 1u) << out;
      EXPECT_NE(out.find("--vram 8G"), std::string::npos) << out;
      EXPECT_NE(out.find("llama.cpp"), std::string::npos) << out;
      EXPECT_EQ(out.find("Could not convert"), std::string::npos) << out;
    }
  }
}

// Greedy text of the built-in tiny model under `flags` (stdout only).
std::string greedy(const std::string& flags, int* status) {
  std::string out;
  *status = run_moestream("run -p \"the cat\" -n 8 --temp 0 -q -t 2 " + flags, &out, 120, true);
  return out;
}

TEST(LlamaFlags, SameMeaningSameOutput) {
  int st = 0;
  const std::string plain = greedy("--ctx 256", &st);
  ASSERT_EQ(st, 0) << plain;
  ASSERT_FALSE(plain.empty());
  for (const char* flags : {"--ctx-size 256", "--ctx-size=256", "-c 256 -fa on", "-c 256 -fa", "-c 256 --flash-attn 1",
                            "-c 256 -ctk f16 -ctv f16"}) {
    EXPECT_EQ(greedy(flags, &st), plain) << flags;
    EXPECT_EQ(st, 0) << flags;
  }
  const std::string q8 = greedy("--ctx 256 --kv-type q8_0", &st);
  ASSERT_EQ(st, 0);
  EXPECT_EQ(greedy("-c 256 -ctk q8_0 -ctv q8_0", &st), q8);
  EXPECT_EQ(greedy("-c 256 --cache-type-k=q8_0 --cache-type-v q8_0", &st), q8);
  // -s is llama.cpp's --seed: the same sampled text.
  const std::string seeded = greedy("--ctx 256 --temp 1 --seed 7", &st);
  EXPECT_EQ(greedy("--ctx 256 --temp 1 -s 7", &st), seeded);
}

TEST(LlamaFlags, NoticesAndRefusals) {
  std::string out;
  EXPECT_EQ(run_moestream("run -p hi -n 1 -t 2 -fa on", &out), 0) << out;
  EXPECT_NE(out.find("-fa ignored"), std::string::npos) << out;
  // K and V share one type here.
  EXPECT_EQ(run_moestream("run -p hi -n 1 -ctk q8_0", &out), 1) << out;
  EXPECT_NE(out.find("one type"), std::string::npos) << out;
  EXPECT_EQ(lines(out), 1u) << out;
  // serve's -np / --alias reach --parallel / --model-name (their own checks answer).
  EXPECT_NE(run_moestream("serve -np 0", &out), 0);
  EXPECT_NE(out.find("--parallel must be >= 1"), std::string::npos) << out;
  EXPECT_NE(run_moestream("serve --alias", &out), 0);
  EXPECT_NE(out.find("--model-name"), std::string::npos) << out;
  EXPECT_NE(run_moestream("serve -to 0", &out), 0);
  EXPECT_NE(out.find("--read-timeout"), std::string::npos) << out;
  EXPECT_EQ(run_moestream("run -p hi -n 1 -t 2 --jinja -cb", &out), 0) << out;
  EXPECT_NE(out.find("--jinja ignored"), std::string::npos) << out;
  EXPECT_NE(out.find("-cb ignored: batching is always continuous"), std::string::npos) << out;
  EXPECT_NE(run_moestream("run --ctx-size -5 -p hi", &out), 0);
  EXPECT_NE(out.find("--ctx must be >= 0"), std::string::npos) << out;
}

TEST(LlamaFlags, VramOnABuildWithoutCudaSaysSo) {
  std::string info;
  ASSERT_EQ(run_moestream("info", &info), 0);
  if (info.find("cuda backend: not built") == std::string::npos) GTEST_SKIP() << "a CUDA build";
  std::string out;
  EXPECT_EQ(run_moestream("run -p hi -n 1 -t 2 --vram 8G", &out), 0) << out;
  EXPECT_NE(out.find("--vram applies to the CUDA backend, which this build does not have"), std::string::npos) << out;
}

class LlamaBenchFlags : public test::TinyBenchFixture<LlamaBenchFlags> {
 public:
  static constexpr const char* kFilePrefix = "llama_bench_flags_";
};

TEST_F(LlamaBenchFlags, OutputFormats) {
  std::string out;
  ASSERT_EQ(run_moestream(bench("-p 4 -n 2 -o json -fa 1"), &out, 120, true), 0) << out;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(out)) << out;
  std::string md;
  ASSERT_EQ(run_moestream(bench("-p 4 -n 2 -o md"), &md, 120, true), 0) << md;
  EXPECT_NE(md.find("| pp4"), std::string::npos) << md;
  EXPECT_EQ(run_moestream(bench("-p 4 -n 2 -o csv"), &out), 1) << out;
  EXPECT_NE(out.find("markdown"), std::string::npos) << out;
}

}  // namespace
}  // namespace ms
