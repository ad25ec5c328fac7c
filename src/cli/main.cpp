// moestream: run Mixture-of-Experts models larger than the GPU's memory.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "cli/llama_flags.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"moestream — MoE inference with experts streamed between VRAM, RAM and CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moestream 0.1.0");
  auto& commands = ms::cli::CommandRegistry::all();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (auto& [name, setup] : commands) {
    std::function<int()> run = setup(app);
    runners.emplace_back(app.get_subcommand(name), std::move(run));
  }
  // llama.cpp's spellings of the same flags (cli/llama_flags.h).
  const ms::cli::LlamaFlags llama = ms::cli::translate_llama_flags(
      std::vector<std::string>(argv, argv + argc), [&app](const std::string& command, const std::string& name) {
        CLI::App* sub = nullptr;
        try {
          sub = app.get_subcommand(command);
        } catch (const CLI::Error&) {
          return false;
        }
        return sub != nullptr && sub->get_option_no_throw(name) != nullptr;
      });
  if (!llama.error.empty()) {
    std::fprintf(stderr, "moestream: %s\n", llama.error.c_str());
    return 1;
  }
  for (const std::string& n : llama.notices) std::fprintf(stderr, "moestream: %s\n", n.c_str());
  // CLI11 takes the arguments in reverse order, the last one first.
  std::vector<std::string> args(llama.args.rbegin(), llama.args.rend() - 1);
  app.name(argv[0]);
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ms::Error& e) {  // a value parsed into its type as the flag is read (--cost)
    std::fprintf(stderr, "moestream: error: %s\n", e.what());
    return 1;
  }
  try {
    for (auto& [sub, run] : runners)
      if (sub && sub->parsed()) return run();
  } catch (const ms::Error& e) {
    std::fprintf(stderr, "moestream: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moestream: internal error: %s\n", e.what());
    return 2;
  }
  return 1;
}
