// Tiny generated models for the engine tests, written once per test process
// into a temporary folder that goes when the process ends, and shared by the
// tests that ask for the same (arch, quant, seed). Random token prompts too.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"

namespace ms::test {

// n_layer > 0: that many layers instead of the preset's (a draft model: the
// same vocabulary, fewer layers).
inline const std::string& tiny_gguf(const std::string& arch, const std::string& quant, uint64_t seed,
                                    int n_layer = 0) {
  namespace fs = std::filesystem;
  static std::map<std::string, std::string> paths;
  static const fs::path dir = fs::temp_directory_path() / ("moestream_tiny_" + std::to_string(::getpid()));
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup;
  const std::string key =
      arch + "-" + quant + "-" + std::to_string(seed) + (n_layer > 0 ? "-l" + std::to_string(n_layer) : "");
  if (auto it = paths.find(key); it != paths.end()) return it->second;
  fs::create_directories(dir);
  ThreadPool pool(2);
  GenOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.quant = quant;
  o.seed = seed;
  o.n_layer = n_layer;
  const std::string p = (dir / (key + ".gguf")).string();
  generate_model(o, p, pool);
  return paths[key] = p;
}

// n token ids below 500 (inside every tiny vocabulary), from `seed`.
inline std::vector<int32_t> random_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % 500));
  return p;
}

}  // namespace ms::test
