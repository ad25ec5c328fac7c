// `run --spec-tree N` and `bench --spec-tree A,B` (CPU, the tiny model; docs/
// speculative.md "Draft trees"): the text with trees is plain decoding's
// (greedy and sampled with a seed), the summary says the trees, a drafter
// without distributions falls back to chains and says why, bench adds a row
// per budget with the tree counts in its JSON, and bad values are errors
// naming the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tiny_bench_fixture.h"

namespace ms {
namespace {

using test::run_moestream;

std::string run_out(const std::string& extra, bool stdout_only) {
  std::string out;
  const int rc = run_moestream("run -p \"The capital of France\" -n 40 --ignore-eos --backend cpu -t 2 " + extra, &out,
                               120, stdout_only);
  EXPECT_EQ(rc, 0) << extra << "\n" << out;
  return out;
}

TEST(SpecTreeCli, TextIsPlainDecodingsAndTheSummarySaysTrees) {
  for (const std::string sampling : {"--temp 0", "--temp 0.9 --seed 5"}) {
    const std::string base = run_out("-q " + sampling, true);
    ASSERT_GT(base.size(), 10u);
    EXPECT_EQ(run_out("-q " + sampling + " --spec oracle:0.6 --spec-tree 8", true), base) << sampling;
    EXPECT_EQ(run_out("-q " + sampling + " --spec oracle:0.5 --spec-tree 24 --spec-fixed --draft-max 5", true), base)
        << sampling;
  }
  const std::string all = run_out("--temp 0 --spec oracle:0.5 --spec-tree 12 --spec-fixed --draft-max 4", false);
  EXPECT_NE(all.find("(K <= 4, fixed, tree 12)"), std::string::npos) << all;
  EXPECT_NE(all.find("| trees: "), std::string::npos) << all;
  // n-gram drafts have no distributions: chains, and the run says so.
  const std::string ng = run_out("--temp 0 --spec ngram --spec-tree 4", false);
  EXPECT_NE(ng.find("--spec-tree: drafts verified as chains: the ngram drafter gives no distributions"),
            std::string::npos)
      << ng;
  EXPECT_EQ(ng.find("| trees: "), std::string::npos) << ng;
}

TEST(SpecTreeCli, BadValuesAreErrorsNamingTheFlag) {
  for (const std::string args : {"run -p hi -n 2 --spec oracle:0.5 --spec-tree 300",
                                 "run -p hi -n 2 --spec oracle:0.5 --spec-tree -1", "run -p hi -n 2 --spec-tree 4",
                                 "bench -p 0 -n 2 --spec oracle:0.5 --spec-tree 0,999"}) {
    std::string out;
    const int rc = run_moestream(args + " --backend cpu -t 2", &out);
    EXPECT_TRUE(rc != 0 && rc < 124) << args << ": status " << rc << "\n" << out;
    EXPECT_NE(out.find("--spec-tree"), std::string::npos) << args << ": the error should name --spec-tree\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << args << "\n" << out;
  }
}

class BenchTreeCli : public test::TinyBenchFixture<BenchTreeCli> {
 public:
  static constexpr const char* kFilePrefix = "bench_tree_";
};

TEST_F(BenchTreeCli, RowsPerBudgetWithTheTreeCounts) {
  std::string out;
  ASSERT_EQ(run_moestream(bench("-p 0 -n 12 --spec oracle:0.8 --spec-tree 0,8 --spec-fixed --draft-max 4 --json"),
                          &out, 120, true),
            0)
      << out;
  const auto rs = nlohmann::json::parse(out).at("results");
  const std::vector<std::string> names = {"tg12", "tg12 greedy", "tg12 spec oracle:0.8", "tg12 spec oracle:0.8 tree8"};
  ASSERT_EQ(rs.size(), names.size()) << out;
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(rs[i].at("test").get<std::string>(), names[i]);
  const auto& chain = rs[2].at("spec");
  const auto& tree = rs[3].at("spec");
  EXPECT_EQ(chain.at("tree_verifies").get<int64_t>(), 0);
  EXPECT_GT(tree.at("tree_verifies").get<int64_t>(), 0);
  EXPECT_EQ(tree.at("tree_verifies").get<int64_t>(), tree.at("verifies").get<int64_t>());
  EXPECT_GT(tree.at("tree_nodes").get<int64_t>(), tree.at("verifies").get<int64_t>() * 4)
      << "trees of 8 wider than the chain of 4 (more than 4 drafts each on average)";
}

}  // namespace
}  // namespace ms
