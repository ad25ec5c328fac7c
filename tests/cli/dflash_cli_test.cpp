// `run --spec dflash -md FILE` and `bench --spec dflash` (CPU, the tiny
// qwen3moe and a `gen --arch dflash` drafter): greedy text, and sampled text
// with a seed, is plain decoding's, in llama.cpp's spellings too
// (draft-dflash, --spec-draft-model),
// bench adds its row, and misuse is an error naming what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "tiny_bench_fixture.h"

namespace ms {
namespace {

using test::run_moestream;

class DFlashCli : public test::TinyBenchFixture<DFlashCli> {
 public:
  static constexpr const char* kFilePrefix = "dflash_cli_";
  static void SetUpTestSuite() {
    TinyBenchFixture::SetUpTestSuite();
    drafter_ = new std::string(*model_ + ".dflash.gguf");
    std::string out;
    const int rc = run_moestream("gen --arch dflash -q -o \"" + *drafter_ + "\"", &out);
    ASSERT_EQ(rc, 0) << out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*drafter_);
    delete drafter_;
    TinyBenchFixture::TearDownTestSuite();
  }
  static std::string run_args(const std::string& extra) {
    return "run -m \"" + *model_ + "\" -p \"The capital of France\" -n 30 --ignore-eos --backend cpu -t 2 " + extra;
  }
  static inline std::string* drafter_ = nullptr;
};

TEST_F(DFlashCli, GreedyTextIsPlainDecodingsAndBenchHasItsRow) {
  auto text_of = [](const std::string& extra) {
    std::string out;
    EXPECT_EQ(run_moestream(run_args(std::string("-q ") + (extra.find("--temp") == std::string::npos ? "--temp 0 " : "") + extra),
                            &out, 120, true),
              0)
        << extra << "\n" << out;
    return out;
  };
  const std::string base = text_of("");
  ASSERT_GT(base.size(), 10u);
  const std::string md = " -md \"" + *drafter_ + "\"";
  EXPECT_EQ(text_of("--spec dflash" + md), base);
  EXPECT_EQ(text_of("--spec draft-dflash --spec-fixed --draft-max 6" + md), base);
  EXPECT_EQ(text_of("--spec dflash --spec-fixed --spec-draft-model \"" + *drafter_ + "\""), base);
  // Sampled with a seed: drafts are point masses, the draws are plain decoding's.
  const std::string sampled = text_of("--temp 0.9 --seed 5");
  EXPECT_EQ(text_of("--temp 0.9 --seed 5 --spec dflash --spec-fixed --draft-max 4" + md), sampled);
  std::string out;
  ASSERT_EQ(run_moestream(run_args("--temp 0 --spec dflash --spec-fixed --draft-max 3" + md), &out), 0) << out;
  EXPECT_NE(out.find("spec dflash (K <= 3, fixed) | drafted"), std::string::npos) << out;
  EXPECT_NE(out.find("DFlash drafter"), std::string::npos) << out;
  ASSERT_EQ(run_moestream(bench("-p 0 -n 6 --spec dflash --json" + md), &out, 120, true), 0) << out;
  const auto rs = nlohmann::json::parse(out).at("results");
  ASSERT_EQ(rs.size(), 3u) << out;
  EXPECT_EQ(rs[2].at("test").get<std::string>(), "tg6 spec dflash");
}

TEST_F(DFlashCli, MisuseIsAnErrorNamingIt) {
  const std::string md = " -md \"" + *drafter_ + "\"";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--spec dflash", "-md"},
      {"--spec dflash --draft-p-min 0.3" + md, "--draft-p-min"},
      {"--spec dflash --device-draft gpu" + md, "--device-draft"},
      {"--spec dflash -md \"" + *model_ + "\"", "not 'dflash'"},  // a target model, not a drafter
      {"--spec dflash -md /nonexistent/d.gguf", "/nonexistent/d.gguf"},
      {"--spec draft" + md, "--spec dflash -md FILE"},  // a drafter is no draft model
  };
  for (const auto& [args, what] : cases) {
    std::string out;
    const int rc = run_moestream(run_args(args), &out);
    EXPECT_TRUE(rc != 0 && rc < 124) << args << ": status " << rc << "\n" << out;
    EXPECT_NE(out.find(what), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << args << "\n" << out;
  }
  std::string out;
  const int rc = run_moestream(bench("-p 0 -n 4 --spec dflash,draft" + md), &out);
  EXPECT_TRUE(rc != 0 && rc < 124) << out;
  EXPECT_NE(out.find("one of them at a time"), std::string::npos) << out;
}

}  // namespace
}  // namespace ms
