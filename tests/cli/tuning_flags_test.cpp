// The tuning flags (src/cli/backend_choice.h) of run, serve, bench and
// logits: each one, and each of the --vram options, lands in the typed
// option it tunes (cuda_options(), parsed in process; a flag with no case
// here fails the test); names are parsed once, bad ones are errors naming
// the flag and the valid values; listed in --help under their own heading;
// bad values are errors in the binary too (no model run, no crash); the
// CPU's greedy text does
// not depend on them (they choose how, not what, is computed); on a GPU,
// --no-graph keeps the greedy text bit for bit, the unfused
// paths run, and --step-timing prints its summary (only when asked).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/cli_run.h"
#include "util/error.h"
#ifdef MOESTREAM_HAVE_CUDA
#include "cuda/device.h"
#endif

namespace ms {
namespace {

using test::run_moestream;

const char* kHeading = "Tuning (defaults are measured best)";
const std::vector<std::string> kFlags = {
    "--no-graph",     "--no-fuse-decode",  "--no-fuse-prefill", "--step-timing",
    "--no-gated",     "--no-prompt-stage", "--prompt-cpu",      "--no-stage-gap",    "--no-staged-hits",
    "--no-draft-credit", "--no-pinned-prompt", "--transit-slots", "--hybrid-profile", "--link-timeline",
    "--spin-us", "--gemm-min-batch"};

// ---------------------------------------------------------------- in process
struct Parsed {
  cli::BackendSetup setup;
  CudaOptions opt;
};

// The command line's model flags as run takes them (add_vram_options), then
// the backend's options for it.
Parsed parse(const std::string& args) {
  CLI::App app{"tuning flags"};
  Parsed p;
  cli::add_vram_options(app, &p.setup.vram, true);
  app.parse(args, false);
  p.opt = cli::cuda_options(p.setup);
  return p;
}

struct FlagCase {
  std::string args;
  std::function<bool(const Parsed&)> landed;  // false with no flags, true with args
};

const std::vector<FlagCase>& flag_cases() {
  static const std::vector<FlagCase> cases = {
      {"--no-graph", [](const Parsed& p) { return !p.opt.use_graph; }},
      {"--no-fuse-decode", [](const Parsed& p) { return !p.opt.fused_decode; }},
      {"--no-fuse-prefill", [](const Parsed& p) { return !p.opt.fused_prefill; }},
      {"--step-timing", [](const Parsed& p) { return p.opt.step_timing; }},
      {"--no-gated", [](const Parsed& p) { return !p.opt.tiered.gated; }},
      {"--no-prompt-stage", [](const Parsed& p) { return !p.opt.tiered.step.prompt_stage; }},
      {"--prompt-cpu", [](const Parsed& p) { return p.opt.tiered.step.prompt_cpu; }},
      {"--no-stage-gap", [](const Parsed& p) { return !p.opt.tiered.step.stage_gap; }},
      {"--no-staged-hits", [](const Parsed& p) { return !p.opt.tiered.step.staged_hits; }},
      {"--no-draft-credit", [](const Parsed& p) { return !p.opt.tiered.step.draft_credit; }},
      {"--no-pinned-prompt", [](const Parsed& p) { return !p.opt.tiered.pinned_prompt_kernels; }},
      {"--transit-slots 6", [](const Parsed& p) { return p.opt.tiered.transit_slots == 6; }},
      {"--hybrid-profile", [](const Parsed& p) { return p.opt.tiered.serve_profile; }},
      {"--link-timeline 2", [](const Parsed& p) { return p.opt.tiered.link_timeline == 2; }},
      {"--gemm-min-batch 8", [](const Parsed& p) { return p.opt.gemm_min_batch == 8; }},
      {"--spin-us 7", [](const Parsed& p) { return p.setup.vram.spin_us == 7; }},
      {"--vram 10.5G",
       [](const Parsed& p) { return p.opt.vram_budget == (uint64_t{21} << 29) && !p.opt.vram_full; }},
      {"--vram full", [](const Parsed& p) { return p.opt.vram_full; }},
      {"--policy lru", [](const Parsed& p) { return p.opt.tiered.policy == "lru"; }},
      {"--profile hot.json", [](const Parsed& p) { return p.setup.vram.profile == "hot.json"; }},
      {"--host-pin staging", [](const Parsed& p) { return p.opt.tiered.host_pin == cuda::HostPin::Staging; }},
      {"--host-pin register", [](const Parsed& p) { return p.opt.tiered.host_pin == cuda::HostPin::Register; }},
      {"--prefetch next", [](const Parsed& p) { return p.opt.tiered.step.prefetch == DecodePrefetch::Next; }},
      {"--prefetch off", [](const Parsed& p) { return p.opt.tiered.step.prefetch == DecodePrefetch::Off; }},
      {"--cost pcie_gbps=20,cpu_gflops=7",
       [](const Parsed& p) {
         const CostOverrides& c = p.opt.tiered.step.cost;
         return c.sets(&CostModel::pcie_gbps) && c.sets(&CostModel::cpu_gflops) &&
                c.text() == "pcie_gbps=20,cpu_gflops=7";
       }},
      {"--verbose-steps", [](const Parsed& p) { return p.opt.tiered.verbose_steps; }},
      {"--devices 1", [](const Parsed& p) { return p.opt.device == 1 && p.setup.vram.devices == std::vector<int>{1}; }},
  };
  return cases;
}

TEST(TuningFlags, EachLandsInTheOptionItTunes) {
  const Parsed defaults = parse("");
  for (const FlagCase& c : flag_cases()) {
    EXPECT_FALSE(c.landed(defaults)) << c.args << ": the default already looks set";
    EXPECT_TRUE(c.landed(parse(c.args))) << c.args << " did not reach its option";
  }
  // Together, each still lands (no flag resets another's field).
  std::string all;
  for (const FlagCase& c : flag_cases())
    if (c.args != "--vram full" && c.args.rfind("--host-pin register", 0) != 0 && c.args != "--prefetch off")
      all += c.args + " ";
  const Parsed together = parse(all);
  for (const FlagCase& c : flag_cases())
    if (all.find(c.args + " ") != std::string::npos) EXPECT_TRUE(c.landed(together)) << c.args << " (all flags)";
  // --gemm-min-batch 0 is the default threshold, the one named constant.
  EXPECT_EQ(parse("--gemm-min-batch 0").opt.gemm_min_batch, cuda::kGemmMinTokens);
  EXPECT_EQ(defaults.opt.gemm_min_batch, cuda::kGemmMinTokens);
}

// A flag added to the command without a case above fails here.
TEST(TuningFlags, EveryFlagHasACase) {
  CLI::App app{"tuning flags"};
  cli::VramSetup v;
  cli::add_vram_options(app, &v, true);
  std::set<std::string> covered;
  for (const FlagCase& c : flag_cases()) covered.insert(c.args.substr(0, c.args.find(' ')));
  int flags = 0;
  for (const CLI::Option* o : app.get_options()) {
    const std::string name = o->get_name();
    if (name == "--help") continue;
    ++flags;
    EXPECT_TRUE(covered.count(name)) << name << " has no case in flag_cases()";
  }
  EXPECT_GE(flags, 21);
}

TEST(TuningFlags, TheSetupsSizesLand) {
  cli::BackendSetup s;
  s.ctx = 300;
  s.max_batch = 40;
  s.n_seq = 3;
  s.kv_type = KvType::Q8_0;
  CudaOptions o = cli::cuda_options(s);
  EXPECT_EQ(o.ctx, 300);
  EXPECT_EQ(o.max_batch, 40);
  EXPECT_EQ(o.n_seq, 3);
  EXPECT_EQ(o.kv_type, KvType::Q8_0);
  EXPECT_FALSE(o.kv_f32);
  s.kv_type = KvType::F32;
  EXPECT_TRUE(cli::cuda_options(s).kv_f32);
  s.n_seq = 0;  // at least one sequence
  EXPECT_EQ(cli::cuda_options(s).n_seq, 1);
  s.vram.budget = "lots";
  EXPECT_THROW(cli::cuda_options(s), Error);
}

// Names are parsed once, as the command line is read: a bad one is an error
// naming the flag and what it takes (the binary's status: CLI11's for a
// name outside a list, 1 for --cost, as before).
TEST(TuningFlags, BadNamesAreErrorsListingTheValidOnes) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--host-pin pinned", {"--host-pin", "staging"}},
      {"--prefetch sometimes", {"--prefetch", "next"}},
      {"--cost warp_speed=9", {"--cost", "warp_speed", "known: pcie_gbps"}},
      {"--cost pcie_gbps=0", {"--cost", "pcie_gbps"}},
      {"--cost pcie_gbps", {"--cost", "name=value"}},
      {"--gemm-min-batch 5000", {"--gemm-min-batch"}},
      {"--transit-slots 100000", {"--transit-slots"}},
      {"--link-timeline 3", {"--link-timeline"}},
  };
  for (const auto& [args, want] : cases) {
    try {
      parse(args);
      ADD_FAILURE() << args << ": no error";
    } catch (const std::exception& e) {  // CLI11's check, or the value's own parse (--cost)
      for (const std::string& w : want) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << args << ": " << e.what();
    }
  }
  // The policy's name is checked before a model opens, on either backend.
  cli::VramSetup v = parse("--policy nope").setup.vram;
  try {
    cli::check_vram_options(v);
    ADD_FAILURE() << "--policy nope: no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--policy nope"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lru"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- the binary
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
      {"run -p hi -n 1 --backend cpu --host-pin pinned", "--host-pin"},
      {"bench -p 1 -n 1 --backend cpu --prefetch sometimes", "--prefetch"},
      {"run -p hi -n 1 --backend cpu --cost warp_speed=9", "--cost"},
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
  EXPECT_EQ(greedy_text("--backend cpu -t 2 --spin-us 50000 --no-graph --transit-slots 4 --prompt-cpu"),
            base);
}

#ifdef MOESTREAM_HAVE_CUDA
TEST(TuningFlags, CudaSwitchesKeepTheGreedyTextAndStepTimingReports) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string base = greedy_text("--backend cuda");
  ASSERT_FALSE(base.empty());
  // Graph replay changes scheduling only: the same bits, so the same text.
  EXPECT_EQ(greedy_text("--backend cuda --no-graph"), base);
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
