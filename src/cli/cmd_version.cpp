// `moestream info`: what this build can do on this machine.
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "util/cpu_features.h"

namespace ms::cli {
namespace {

RegisterCommand reg("info", [](CLI::App& app) {
  app.add_subcommand("info", "Show the build and the CPU/GPU features moestream will use");
  return []() {
    std::printf("moestream 0.1.0\n");
#ifdef MOESTREAM_HAVE_CUDA
    std::printf("cuda backend: built\n");
#else
    std::printf("cuda backend: not built\n");
#endif
    std::printf("cpu: %s, %u hardware threads\n", cpu_features_string().c_str(),
                std::thread::hardware_concurrency());
    return 0;
  };
});

}  // namespace
}  // namespace ms::cli
