// `run --spec` and `bench --spec` (CPU, the tiny models): the text with
// speculative decoding is plain decoding's (greedy and sampled with a seed),
// the summary reports what speculation did, bench adds `tgN greedy` and one
// `tgN spec ...` row per drafter, and bad values are errors naming the flag;
// --spec mtp on a tiny qwen35moe (its MTP block), refused on a model without one.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <filesystem>

#include "cli_run.h"
#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "tiny_bench_fixture.h"

namespace ms {
namespace {

using test::run_moestream;

std::string text(const std::string& extra) {
  std::string out;
  const int rc = run_moestream("run -p \"The capital of France\" -n 40 --ignore-eos --backend cpu -t 2 -q " + extra,
                               &out, 120, true);
  EXPECT_EQ(rc, 0) << extra << "\n" << out;
  return out;
}

TEST(SpecCli, TextIsPlainDecodings) {
  for (const std::string sampling : {"--temp 0", "--temp 0.9 --seed 5"}) {
    const std::string base = text(sampling);
    ASSERT_GT(base.size(), 10u);
    EXPECT_EQ(text(sampling + " --spec ngram"), base) << sampling;
    EXPECT_EQ(text(sampling + " --spec oracle:0.6"), base) << sampling;
    EXPECT_EQ(text(sampling + " --spec oracle:1 --spec-fixed --draft-max 3"), base) << sampling;
    EXPECT_EQ(text(sampling + " --spec ngram --draft-max 2 --draft-min 2"), base) << sampling;
    EXPECT_EQ(text(sampling + " --spec oracle:0.5 --spec-rollback replay"), base) << sampling;
  }
}

TEST(SpecCli, SummaryReportsTheDrafts) {
  std::string out;
  ASSERT_EQ(run_moestream("run -p hi -n 20 --ignore-eos --temp 0 --backend cpu -t 2 --spec oracle:1 --spec-fixed "
                          "--draft-max 4",
                          &out),
            0)
      << out;
  // 1 token from the prompt, then 19 = 5 + 5 + 5 + 4: three verifies of 4 and one of 3.
  EXPECT_NE(out.find("spec oracle:1 (K <= 4, fixed) | drafted 15, accepted 15 (100.0%) | by position: 1.00 1.00 "
                     "1.00 1.00 | 4.75 tokens per verify (4 verifies, 0 plain steps)"),
            std::string::npos)
      << out;
}

TEST(SpecCli, BadValuesAreErrorsNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run -p hi -n 2 --spec eagle", "--spec"},
      {"run -p hi -n 2 --spec oracle:1.5", "--spec"},
      {"run -p hi -n 2 --spec ngram --draft-max 0", "--draft-max"},
      {"run -p hi -n 2 --spec ngram --draft-max 100", "--draft-max"},
      {"run -p hi -n 2 --spec ngram --draft-max 4 --draft-min 5", "--draft-min"},
      {"run -p hi -n 2 --draft-max 4", "--spec"},
      {"run -p hi -n 2 --spec-fixed", "--spec"},
      {"run -p hi -n 2 --spec ngram --spec-rollback undo", "--spec-rollback"},
      {"run --bench -n 2 --spec ngram", "--spec"},
      {"bench -p 0 -n 2 --spec oracle:x", "--spec"},
      {"bench -p 0 -n 2 --spec ngram --draft-max 0", "--draft-max"},
      {"bench -p 8 -n 0 --spec ngram", "--spec"},
      {"run -p hi -n 2 --spec mtp", "no MTP block"},  // the default tiny model is a qwen3moe
      {"bench -p 0 -n 2 --spec mtp", "no MTP block"},
  };
  for (const auto& [args, flag] : cases) {
    std::string out;
    const int rc = run_moestream(args + " --backend cpu -t 2", &out);
    EXPECT_TRUE(rc != 0 && rc < 124) << args << ": status " << rc << "\n" << out;
    EXPECT_NE(out.find(flag), std::string::npos) << args << ": the error should name " << flag << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << args << "\n" << out;
  }
}

class BenchSpecCli : public test::TinyBenchFixture<BenchSpecCli> {
 public:
  static constexpr const char* kFilePrefix = "bench_spec_";
};

TEST_F(BenchSpecCli, RowsPerDrafterBesideGreedy) {
  std::string out;
  ASSERT_EQ(run_moestream(bench("-p 0 -n 6 --spec oracle:0.8,ngram --json"), &out, 120, true), 0) << out;
  const auto j = nlohmann::json::parse(out);
  const auto& rs = j.at("results");
  const std::vector<std::string> names = {"tg6", "tg6 greedy", "tg6 spec oracle:0.8", "tg6 spec ngram"};
  ASSERT_EQ(rs.size(), names.size()) << out;
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].at("test").get<std::string>(), names[i]);
    EXPECT_EQ(rs[i].at("n_tokens").get<int>(), 6);
    EXPECT_GT(rs[i].at("tps_mean").get<double>(), 0);
  }
  // Without --spec, the rows bench always printed.
  ASSERT_EQ(run_moestream(bench("-p 0 -n 6 --json"), &out, 120, true), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out).at("results").size(), 1u);
}

// `--spec draft -md FILE`: a one-layer model of the same vocabulary drafts
// for the suite's tiny model; greedy text is plain decoding's, the draft's
// flags in both spellings, bench's JSON carries speculation's counts.
class DraftSpecCli : public test::TinyBenchFixture<DraftSpecCli> {
 public:
  static constexpr const char* kFilePrefix = "draft_spec_";
  static void SetUpTestSuite() {
    TinyBenchFixture::SetUpTestSuite();
    draft_ = new std::string(*model_ + ".draft.gguf");
    ThreadPool pool(2);
    GenOptions g;
    g.n_layer = 1;
    g.seed = 9;
    generate_model(g, *draft_, pool);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*draft_);
    delete draft_;
    TinyBenchFixture::TearDownTestSuite();
  }
  static std::string run_text(const std::string& extra, std::string* out) {
    return "run -m \"" + *model_ + "\" -p \"The capital of France\" -n 30 --ignore-eos --backend cpu -t 2 " + extra;
  }
  static inline std::string* draft_ = nullptr;
};

TEST_F(DraftSpecCli, GreedyTextIsPlainDecodingsAndTheSummarySaysDraft) {
  auto text_of = [](const std::string& extra) {
    std::string out;
    EXPECT_EQ(run_moestream(run_text("-q --temp 0 " + extra, nullptr), &out, 120, true), 0) << extra << "\n" << out;
    return out;
  };
  const std::string base = text_of("");
  ASSERT_GT(base.size(), 10u);
  const std::string md = " -md \"" + *draft_ + "\"";
  EXPECT_EQ(text_of("--spec draft" + md), base);
  EXPECT_EQ(text_of("--spec draft --spec-fixed --draft-max 5 --device-draft cpu" + md), base);
  EXPECT_EQ(text_of("--spec draft --draft-p-min 0.2 --model-draft \"" + *draft_ + "\" -devd cpu"), base);
  EXPECT_EQ(text_of("--spec draft --spec-fixed -md \"" + *model_ + "\""), base) << "the model drafting for itself";
  std::string out;
  ASSERT_EQ(run_moestream(run_text("--temp 0.8 --seed 4 --spec draft --spec-fixed" + md, nullptr), &out), 0) << out;
  EXPECT_NE(out.find("spec draft (K <= 8, fixed) | drafted"), std::string::npos) << out;
  EXPECT_NE(out.find("ms per step by drafts: 0:"), std::string::npos) << out;
}

TEST_F(DraftSpecCli, BenchJsonCarriesSpeculationsCounts) {
  std::string out;
  ASSERT_EQ(run_moestream(bench("-p 0 -n 12 --spec draft,oracle:1 --spec-fixed --draft-max 3 --json -md \"" +
                                *draft_ + "\""),
                          &out, 120, true),
            0)
      << out;
  const auto rs = nlohmann::json::parse(out).at("results");
  ASSERT_EQ(rs.size(), 4u) << out;
  EXPECT_EQ(rs[2].at("test").get<std::string>(), "tg12 spec draft");
  EXPECT_FALSE(rs[1].contains("spec")) << "greedy has no drafts";
  const auto& o = rs[3].at("spec");
  // oracle:1, K = 3 fixed: 12 tokens after the prompt's one: 3 verifies of 4 tokens.
  EXPECT_EQ(o.at("verifies").get<int>(), 3) << o.dump();
  EXPECT_DOUBLE_EQ(o.at("tokens_per_verify").get<double>(), 4.0);
  ASSERT_EQ(o.at("acceptance_by_position").size(), 3u);
  EXPECT_EQ(o.at("acceptance_by_position")[2].at("accepted").get<int>(), 3);
  EXPECT_EQ(o.at("step_time_by_drafts").at("3").at("steps").get<int>(), 3);
  EXPECT_GT(rs[2].at("spec").at("drafted").get<int>(), 0);
}

TEST_F(DraftSpecCli, BadDraftFlagsAreErrors) {
  const std::string md = " -md \"" + *draft_ + "\"";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--spec ngram" + md, "--spec draft"},
      {"--draft-p-min 0.5", "--spec draft"},
      {"--spec draft", "-md"},
      {"--spec draft --draft-p-min 1.5" + md, "--draft-p-min"},
      {"--spec draft --device-draft tpu" + md, "--device-draft"},
      {"--spec draft -md /nonexistent/draft.gguf", "/nonexistent/draft.gguf"},
  };
  for (const auto& [args, what] : cases) {
    std::string out;
    const int rc = run_moestream(run_text(args, nullptr), &out);
    EXPECT_TRUE(rc != 0 && rc < 124) << args << ": status " << rc << "\n" << out;
    EXPECT_NE(out.find(what), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << args << "\n" << out;
  }
}

// --spec mtp on a tiny qwen35moe, which carries an MTP block: the text is
// plain decoding's, and bench adds its row.
class MtpSpecCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(
        (std::filesystem::temp_directory_path() / ("spec_mtp_" + std::to_string(::getpid()) + ".gguf")).string());
    ThreadPool pool(2);
    GenOptions g;
    g.arch = "qwen35moe";
    generate_model(g, *model_, pool);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*model_);
    delete model_;
  }
  static inline std::string* model_ = nullptr;
};

TEST_F(MtpSpecCli, TextIsPlainDecodingsAndBenchHasItsRow) {
  const std::string m = "-m \"" + *model_ + "\" ";
  const std::string base = text(m + "--temp 0");
  ASSERT_GT(base.size(), 10u);
  EXPECT_EQ(text(m + "--temp 0 --spec mtp --spec-fixed --draft-max 3"), base);
  EXPECT_EQ(text(m + "--temp 0 --spec mtp"), base);
  std::string out;
  ASSERT_EQ(run_moestream("run " + m + "-p hi -n 12 --ignore-eos --temp 0 --backend cpu -t 2 --spec mtp --spec-fixed "
                          "--draft-max 2",
                          &out),
            0)
      << out;
  EXPECT_NE(out.find("spec mtp (K <= 2, fixed) | drafted "), std::string::npos) << out;
  ASSERT_EQ(run_moestream("bench " + m + "--backend cpu -t 2 -r 1 --bandwidth 10 -p 0 -n 6 --spec mtp --json", &out,
                          120, true),
            0)
      << out;
  const auto rs = nlohmann::json::parse(out).at("results");
  ASSERT_EQ(rs.size(), 3u) << out;
  EXPECT_EQ(rs[2].at("test").get<std::string>(), "tg6 spec mtp");
}

}  // namespace
}  // namespace ms
