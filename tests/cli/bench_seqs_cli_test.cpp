// `moestream bench --seqs` (CPU, the tiny model): after the tg rows, one row
// per sequence count, `tgN xS seqs`, whose n_tokens is S x N (the aggregate);
// bad counts, and --seqs without a tg test, are errors naming --seqs.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tiny_bench_fixture.h"

namespace ms {
namespace {

using test::run_moestream;

class BenchSeqsCli : public test::TinyBenchFixture<BenchSeqsCli> {
 public:
  static constexpr const char* kFilePrefix = "bench_seqs_";
};

TEST_F(BenchSeqsCli, RowsPerSequenceCountWithAggregateTokens) {
  std::string out;
  ASSERT_EQ(run_moestream(bench("-p 0 -n 3 --seqs 1,4 --json"), &out, 120, true), 0) << out;
  const auto j = nlohmann::json::parse(out);
  const auto& rs = j.at("results");
  ASSERT_EQ(rs.size(), 3u) << out;
  const std::vector<std::string> names = {"tg3", "tg3 x1 seqs", "tg3 x4 seqs"};
  const std::vector<int> tokens = {3, 3, 12};
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].at("test").get<std::string>(), names[i]);
    EXPECT_EQ(rs[i].at("n_tokens").get<int>(), tokens[i]);
    EXPECT_GT(rs[i].at("tps_mean").get<double>(), 0);
  }
}

TEST_F(BenchSeqsCli, BadCountsAreErrorsNamingTheFlag) {
  for (const std::string args : {"-p 0 -n 2 --seqs 0", "-p 0 -n 2 --seqs 2,-1", "-p 0 -n 2 --seqs 5000",
                                 "-p 8 -n 0 --seqs 2"}) {
    std::string out;
    EXPECT_NE(run_moestream(bench(args), &out), 0) << args << "\n" << out;
    EXPECT_NE(out.find("--seqs"), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << args << "\n" << out;
  }
}

}  // namespace
}  // namespace ms
