// Subcommands of the `moestream` command. Each lives in its own cmd_*.cpp and
// registers itself here, so adding one never touches main.cpp.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace ms::cli {

// Adds a subcommand to `app`; the returned function runs it (after parsing)
// and gives the process exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct CommandRegistry {
  static std::vector<std::pair<std::string, CommandSetup>>& all() {
    static std::vector<std::pair<std::string, CommandSetup>> commands;
    return commands;
  }
};

struct RegisterCommand {
  RegisterCommand(std::string name, CommandSetup setup) {
    CommandRegistry::all().emplace_back(std::move(name), std::move(setup));
  }
};

}  // namespace ms::cli
