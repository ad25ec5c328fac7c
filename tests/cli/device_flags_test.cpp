// --devices and the per-device --vram (issue #45, src/cli/device_flags.h):
// good forms give the typed values, bad ones are errors naming the flag;
// more than one device is refused by the commands that run a model (multi-
// GPU execution is not built), in process and in the binary; inspect and
// sim take several and print the plan.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/cli_run.h"
#include "cli/device_flags.h"
#include "util/error.h"

namespace ms {
namespace {

using test::run_moestream;

// The message of the ms::Error `f` throws ("" when none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& what, const std::vector<std::string>& want, const std::string& context) {
  ASSERT_FALSE(what.empty()) << context << ": no error";
  for (const std::string& w : want) EXPECT_NE(what.find(w), std::string::npos) << context << ": " << what;
}

TEST(DeviceFlags, DevicesParse) {
  EXPECT_EQ(cli::parse_devices("0"), std::vector<int>{0});
  EXPECT_EQ(cli::parse_devices("0,1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(cli::parse_devices("3,1,7"), (std::vector<int>{3, 1, 7}));  // the order given
  std::string all;
  for (size_t i = 0; i < cli::kMaxDevices; ++i) all += (i ? "," : "") + std::to_string(i);
  EXPECT_EQ(cli::parse_devices(all).size(), cli::kMaxDevices);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "give device numbers"}, {"0,,1", "''"},     {"a", "'a'"},       {"-1", "'-1'"},
      {"1.5", "'1.5'"},            {"64", "'64'"},     {"0,1,0", "twice"}, {"0, 1", "' 1'"},
      {all + ",16", "at most"},
  };
  for (const auto& [text, want] : bad)
    expect_error(error_of([&] { cli::parse_devices(text); }), {"--devices", want}, "--devices " + text);
}

TEST(DeviceFlags, PerDeviceVramParses) {
  const std::vector<int> two = {0, 1};
  EXPECT_EQ(cli::parse_device_vram("12G", two), (std::vector<uint64_t>{12ull << 30, 12ull << 30}));
  EXPECT_EQ(cli::parse_device_vram("0:12G,1:20G", two), (std::vector<uint64_t>{12ull << 30, 20ull << 30}));
  // In the order of --devices, whatever the order of the items.
  EXPECT_EQ(cli::parse_device_vram("1:20G,0:12G", two), (std::vector<uint64_t>{12ull << 30, 20ull << 30}));
  EXPECT_EQ(cli::parse_device_vram("3:1G,2:512M", {2, 3}), (std::vector<uint64_t>{512ull << 20, 1ull << 30}));
  EXPECT_TRUE(cli::is_per_device_vram("0:1G"));
  EXPECT_FALSE(cli::is_per_device_vram("1G"));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"lots", "'lots'"},         {"0:12G", "no budget for device 1"}, {"0:12G,2:1G", "device 2 is not in --devices"},
      {"0:1G,0:2G,1:1G", "twice"}, {"0:12G,20G", "names no device"},   {"full", "not 'full'"},
      {"0:full,1:1G", "'full'"},  {"", "not ''"},                      {"0:0,1:1G", "positive"},
      {"x:1G,1:1G", "'x'"},       {"0:-1G,1:1G", "'-1G'"},
  };
  for (const auto& [text, want] : bad)
    expect_error(error_of([&] { cli::parse_device_vram(text, two); }), {"--vram", want}, "--vram " + text);
}

// run, serve, bench and logits take one device: its number reaches the CUDA
// backend's options; several are refused on every build, saying why.
TEST(DeviceFlags, CommandsThatRunTakeOneDevice) {
  auto parse = [](const std::string& args) {
    CLI::App app{"devices"};
    cli::BackendSetup s;
    cli::add_vram_options(app, &s.vram, true);
    app.parse(args, false);
    return s;
  };
  cli::BackendSetup s = parse("--devices 2 --vram 2:8G");
  EXPECT_EQ(cli::cuda_options(s).device, 2);
  EXPECT_EQ(cli::cuda_options(s).vram_budget, 8ull << 30);
  EXPECT_EQ(cli::cuda_options(parse("--vram 8G")).device, 0);
  cli::check_vram_options(s.vram);

  s = parse("--devices 0,1 --vram 12G");
  expect_error(error_of([&] { cli::check_vram_options(s.vram); }), {"--devices", "not built yet", "inspect", "sim"},
               "--devices 0,1");
  expect_error(error_of([&] { cli::cuda_options(s); }), {"not built yet"}, "cuda_options, --devices 0,1");
  expect_error(error_of([&] { cli::check_vram_options(parse("--devices 1 --vram 0:8G").vram); }),
               {"--vram 0:8G", "device 0 is not in --devices"}, "--vram of another device");
  expect_error(error_of([&] { cli::check_vram_options(parse("--vram 1:8G").vram); }), {"--vram 1:8G", "--devices"},
               "--vram 1:8G without --devices");
  EXPECT_THROW(parse("--devices 0,a"), Error);
}

TEST(DeviceFlags, TheBinaryRefusesSeveralDevicesToRun) {
  std::string out;
  // No model is opened: the flags are checked first (a missing file would say so instead).
  EXPECT_NE(run_moestream("run -m /nonexistent.gguf -p hi -n 1 --backend cpu --devices 0,1 --vram 12G", &out), 0);
  EXPECT_NE(out.find("multi-GPU execution is not built yet"), std::string::npos) << out;
  EXPECT_NE(run_moestream("run -m /nonexistent.gguf -p hi --devices 0,zero", &out), 0);
  EXPECT_NE(out.find("--devices"), std::string::npos) << out;
}

// inspect --devices prints the plan per device; sim --devices replays a
// trace over it (the numbers are tested in tests/experts and tests/engine).
TEST(DeviceFlags, InspectAndSimPrintThePlan) {
  const auto dir = std::filesystem::temp_directory_path() / ("device_flags_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "tiny.gguf").string(), trace = (dir / "t.trace").string();
  std::string out;
  ASSERT_EQ(run_moestream("gen -q -o " + model, &out), 0) << out;
  ASSERT_EQ(run_moestream("inspect " + model + " --no-tensors --ctx 256 --devices 0,1 --vram 0:386M,1:388M", &out), 0)
      << out;
  EXPECT_NE(out.find("not built yet"), std::string::npos) << out;
  EXPECT_NE(out.find("device 0:"), std::string::npos) << out;
  EXPECT_NE(out.find("device 1:"), std::string::npos) << out;
  EXPECT_NE(out.find("predicted per decode token"), std::string::npos) << out;
  // A budget below the dense part is an error saying what each device needs.
  EXPECT_NE(run_moestream("inspect " + model + " --no-tensors --devices 0,1 --vram 8M", &out), 0);
  EXPECT_NE(out.find("does not fit"), std::string::npos) << out;
  EXPECT_NE(out.find("device 1"), std::string::npos) << out;
  EXPECT_NE(run_moestream("inspect " + model + " --no-tensors --devices 0,1 --vram 0:400M", &out), 0);
  EXPECT_NE(out.find("no budget for device 1"), std::string::npos) << out;

  ASSERT_EQ(run_moestream("trace synth -o " + trace + " --layers 4 --experts 16 --k 2 --tokens 200", &out), 0) << out;
  ASSERT_EQ(run_moestream("sim --trace " + trace + " --devices 2 --vram 0:6M,1:9M --dense-bytes 2M", &out), 0) << out;
  EXPECT_NE(out.find("cost per decode token"), std::string::npos) << out;
  EXPECT_NE(run_moestream("sim --trace " + trace + " --devices 2 --vram 0:6M", &out), 0);
  EXPECT_NE(out.find("no budget for device 1"), std::string::npos) << out;
  EXPECT_NE(run_moestream("sim --trace " + trace + " --devices 0 --vram 6M", &out), 0);
  EXPECT_NE(out.find("--devices 0"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ms
