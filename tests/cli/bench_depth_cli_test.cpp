// `moestream bench` with llama-bench's lists and depth (CPU, the tiny model):
// -p/-n/-d take comma lists, every (depth, size) pair is a row named as
// llama-bench names it (`pp16 @ d24`), in its order (per depth: pp rows, then
// tg rows); --json carries each result's depth; bad items are errors naming
// the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tiny_bench_fixture.h"

namespace ms {
namespace {

using test::run_moestream;

class BenchDepthCli : public test::TinyBenchFixture<BenchDepthCli> {
 public:
  static constexpr const char* kFilePrefix = "bench_depth_";
};

// The `test` column of the markdown table's rows.
std::vector<std::string> test_column(const std::string& out) {
  std::vector<std::string> tests;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| model", 0) == 0) continue;
    std::vector<std::string> cells;
    std::istringstream row(line);
    std::string cell;
    while (std::getline(row, cell, '|')) cells.push_back(cell);
    // "", model, size, backend, test, t/s, of floor
    if (cells.size() < 6) continue;
    std::string t = cells[4];
    t.erase(0, t.find_first_not_of(' '));
    t.erase(t.find_last_not_of(' ') + 1);
    tests.push_back(t);
  }
  return tests;
}

TEST_F(BenchDepthCli, ListsAndDepthGiveLlamaBenchRows) {
  std::string out;
  ASSERT_EQ(run_moestream(bench("-p 16,32 -n 4 -d 0,24"), &out), 0) << out;
  const std::vector<std::string> want = {"pp16", "pp32", "tg4", "pp16 @ d24", "pp32 @ d24", "tg4 @ d24"};
  EXPECT_EQ(test_column(out), want) << out;
  // A list with 0 skips that size, as llama-bench does.
  ASSERT_EQ(run_moestream(bench("-p 0,8 -n 0 -d 5"), &out), 0) << out;
  EXPECT_EQ(test_column(out), std::vector<std::string>{"pp8 @ d5"}) << out;
}

TEST_F(BenchDepthCli, JsonCarriesDepth) {
  std::string out;
  ASSERT_EQ(run_moestream(bench("-p 8 -n 3,5 -d 0,17 --json"), &out, 120, true), 0) << out;
  const auto j = nlohmann::json::parse(out);
  const auto& rs = j.at("results");
  ASSERT_EQ(rs.size(), 6u) << out;
  const std::vector<std::string> names = {"pp8", "tg3", "tg5", "pp8 @ d17", "tg3 @ d17", "tg5 @ d17"};
  const std::vector<int> depth = {0, 0, 0, 17, 17, 17}, tokens = {8, 3, 5, 8, 3, 5};
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].at("test").get<std::string>(), names[i]);
    EXPECT_EQ(rs[i].at("n_depth").get<int>(), depth[i]);
    EXPECT_EQ(rs[i].at("n_tokens").get<int>(), tokens[i]);
    EXPECT_GT(rs[i].at("tps_mean").get<double>(), 0);
  }
}

TEST_F(BenchDepthCli, BadListsAreErrorsNamingTheFlag) {
  struct Bad {
    std::string args, names;
  };
  for (const Bad& b : {Bad{"-p 16,abc -n 1", "-p"}, Bad{"-p 16 -n 1,-2", "-n"}, Bad{"-p 16 -n 1 -d 4,-5", "-d"},
                       Bad{"-p 0 -n 0", "nothing to measure"}, Bad{"-p 16 -n 1 -d 1048576", "-d"},
                       Bad{"-p 16 -n 1 -d 2000000", "-d"}}) {
    std::string out;
    EXPECT_NE(run_moestream(bench(b.args), &out), 0) << b.args << "\n" << out;
    EXPECT_NE(out.find(b.names), std::string::npos) << b.args << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << b.args << "\n" << out;
  }
}

}  // namespace
}  // namespace ms
