// The tuning flags (src/cli/backend_choice.h, TuningSetup) of run, serve,
// bench and logits: listed in --help under their own heading; bad values are
// errors naming the flag (no model run, no crash); the CPU's greedy text does
// not depend on them (they choose how, not what, is computed); on a GPU,
// --no-graph and --no-pdl keep the greedy text bit for bit, the unfused
// paths run, and --step-timing prints its summary (only when asked).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_run.h"
#ifdef MOESTREAM_HAVE_CUDA
#include "cuda/device.h"
#endif

namespace ms {
namespace {

using test::run_moestream;

const char* kHeading = "Tuning (defaults are measured best)";
const std::vector<std::string> kFlags = {
    "--no-graph",     "--no-fuse-decode",  "--no-fuse-prefill", "--no-pdl",          "--step-timing",
    "--no-gated",     "--no-prompt-stage", "--prompt-cpu",      "--no-stage-gap",    "--no-staged-hits",
    "--no-pinned-prompt", "--transit-slots", "--hybrid-profile", "--link-timeline", "--spin-us",
    "--gemm-min-batch"};

TEST(TuningFlags, HelpListsThemUnderTheirHeading) {
  for (const char* cmd : {"run", "serve", "bench", "logits"}) {
    std::string out;
    ASSERT_EQ(run_moestream(std::string(cmd) + " --help", &out), 0) << cmd << "\n" << out;
    const size_t heading = out.find(kHeading);
    ASSERT_NE(heading, std::string::npos) << cmd << " --help has no tuning heading\n" << out;
    for (const std::string& f : kFlags) {
      const size_t at = out.find(f);
      ASSERT_NE(at, std::string::npos) << cmd << " --help lacks " << f;
      EXPECT_GT(at, heading) << cmd << ": " << f << " is listed before the tuning heading";
    }
  }
}

TEST(TuningFlags, BadValuesAreErrorsNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run -p hi -n 1 --backend cpu --transit-slots 100000", "--transit-slots"},
      {"run -p hi -n 1 --backend cpu --transit-slots -2", "--transit-slots"},
      {"run -p hi -n 1 --backend cpu --spin-us -1", "--spin-us"},
      {"run -p hi -n 1 --backend cpu --link-timeline 3", "--link-timeline"},
      {"run -p hi -n 1 --backend cpu --spin-us 100000000", "--spin-us"},
      {"bench -p 1 -n 1 --backend cpu --spin-us x", "--spin-us"},
      {"run -p hi -n 1 --backend cpu --no-graph=maybe", "--no-graph"},
  };
  for (const auto& [args, flag] : cases) {
    std::string out;
    // A parse error's status is CLI11's (104, 105, ...), as for every flag.
    const int rc = run_moestream(args, &out);
    EXPECT_TRUE(rc != 0 && rc < 124) << args << ": status " << rc << "\n" << out;
    EXPECT_NE(out.find(flag), std::string::npos) << args << ": the error should name " << flag << "\n" << out;
  }
}

// The generated text (after the prompt line) of a greedy run of the built-in model.
std::string greedy_text(const std::string& extra) {
  std::string out;
  const int rc = run_moestream("run -p \"The capital of France\" -n 12 --temp 0 -q " + extra, &out, 120, true);
  EXPECT_EQ(rc, 0) << extra << "\n" << out;
  return out;
}

TEST(TuningFlags, CpuGreedyTextDoesNotDependOnThem) {
  const std::string base = greedy_text("--backend cpu -t 2");
  ASSERT_FALSE(base.empty());
  // The CUDA-only ones are taken (and ignored) by the CPU backend too.
  EXPECT_EQ(greedy_text("--backend cpu -t 2 --spin-us 0"), base);
  EXPECT_EQ(greedy_text("--backend cpu -t 2 --spin-us 50000 --no-graph --no-pdl --transit-slots 4 --prompt-cpu"),
            base);
}

#ifdef MOESTREAM_HAVE_CUDA
TEST(TuningFlags, CudaSwitchesKeepTheGreedyTextAndStepTimingReports) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string base = greedy_text("--backend cuda");
  ASSERT_FALSE(base.empty());
  // Graph replay and PDL change scheduling only: the same bits, so the same text.
  for (const char* flags : {"--no-graph", "--no-pdl", "--no-graph --no-pdl"})
    EXPECT_EQ(greedy_text(std::string("--backend cuda ") + flags), base) << flags;
  // The unfused kernels round differently (within the tolerance
  // CudaBackend.FusedDecodeMatchesSeparateOps checks), so a near tie may
  // change a token: here they must run and produce text.
  for (const char* flags : {"--no-fuse-decode", "--no-fuse-prefill"})
    EXPECT_FALSE(greedy_text(std::string("--backend cuda ") + flags).empty()) << flags;
  std::string out;
  ASSERT_EQ(run_moestream("run -p hi -n 8 --temp 0 -q --backend cuda --step-timing", &out), 0) << out;
  EXPECT_NE(out.find("moestream cuda timing:"), std::string::npos) << out;
  ASSERT_EQ(run_moestream("run -p hi -n 8 --temp 0 -q --backend cuda", &out), 0) << out;
  EXPECT_EQ(out.find("moestream cuda timing:"), std::string::npos) << out;
}
#endif

}  // namespace
}  // namespace ms
