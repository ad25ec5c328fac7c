// Shared by the CUDA backend tests: tiny generated models of each
// architecture (written once per process, then mapped), random prompts and
// greedy decoding through any Backend.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/backend.h"
#include "engine/synthetic_model.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"

namespace ms::cuda::test {

inline ThreadPool& pool() {
  static ThreadPool p(0);
  return p;
}

// The tiny preset of `arch` in `quant` (router skew 0.5), generated once per
// process in a temp dir; the file is removed at once, the mapping stays valid.
inline const LoadedModel& tiny_model(const std::string& arch, const std::string& quant) {
  static std::map<std::string, std::unique_ptr<LoadedModel>> cache;
  const std::string key = arch + "-" + quant;
  if (auto it = cache.find(key); it != cache.end()) return *it->second;
  const auto dir = std::filesystem::temp_directory_path() / ("ms_cuda_tiny_models_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / (key + ".gguf")).string();
  GenOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.quant = quant;
  o.router_skew = 0.5;
  generate_model(o, path, pool());
  auto m = LoadedModel::open(path);
  std::filesystem::remove(path);
  return *(cache[key] = std::move(m));
}

inline std::vector<int32_t> some_tokens(int n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab - 3));
  return t;
}

// Greedy decoding of `steps` tokens after `prompt`, in a fresh cache of ctx
// positions (0: just enough).
inline std::vector<int32_t> greedy(Backend& be, const std::vector<int32_t>& prompt, int steps, int64_t ctx = 0) {
  KvCache kv = be.make_cache(ctx > 0 ? ctx : static_cast<int64_t>(prompt.size()) + steps + 1);
  std::vector<float> logits;
  be.forward(kv, prompt, logits);
  std::vector<int32_t> out;
  const auto V = static_cast<int32_t>(be.config().n_vocab);
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmax(logits.data(), V);
    out.push_back(next);
    be.forward(kv, std::span<const int32_t>(&next, 1), logits);
  }
  return out;
}

// Two backends that must agree bit for bit (graph replay against direct
// launches, ...): the same prompt, then `steps` greedy tokens (b's picks) fed
// to both, logits equal after the prompt and after every step.
inline void expect_identical_decode(Backend& a, Backend& b, const std::vector<int32_t>& prompt, int steps,
                                    int64_t ctx) {
  KvCache ka = a.make_cache(ctx), kb = b.make_cache(ctx);
  std::vector<float> la, lb;
  a.forward(ka, prompt, la);
  b.forward(kb, prompt, lb);
  ASSERT_EQ(la, lb) << "after the prompt";
  const auto V = static_cast<int32_t>(a.config().n_vocab);
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmax(lb.data(), V);
    a.forward(ka, std::span<const int32_t>(&next, 1), la);
    b.forward(kb, std::span<const int32_t>(&next, 1), lb);
    ASSERT_EQ(la, lb) << "step " << i;
  }
}

}  // namespace ms::cuda::test
