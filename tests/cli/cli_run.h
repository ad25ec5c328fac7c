// Running the moestream binary from a test (tests/cli): the command line
// under a time limit (a hang fails the test instead of hanging it), its exit
// status and output. A header so each test file need not carry its own copy.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ms::test {

// Returns the exit status of `moestream args` (124: timed out, 128: killed);
// *output gets stdout, and stderr too unless `stdout_only`.
inline int run_moestream(const std::string& args, std::string* output, int timeout_s = 120,
                         bool stdout_only = false) {
  static int calls = 0;
  const std::string log = (std::filesystem::temp_directory_path() /
                           ("cli_run_" + std::to_string(::getpid()) + "_" + std::to_string(calls++) + ".log"))
                              .string();
  const std::string cmd = "timeout " + std::to_string(timeout_s) + " \"" + std::string(MS_MOESTREAM_BIN) + "\" " +
                          args + " >\"" + log + "\"" + (stdout_only ? " 2>/dev/null" : " 2>&1") + " </dev/null";
  const int status = std::system(cmd.c_str());
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  *output = ss.str();
  std::filesystem::remove(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace ms::test
