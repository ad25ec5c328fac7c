// The F32 KV cache (--kv-type f32) through whole tiny models: with F32
// weights it takes the engine much closer to the double-precision reference
// than the F16 cache (half-rounded K/V are then the main error), it stays
// close to the F16 cache's logits, and batched prefill matches token by token
// for both cache types.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "kv_test_util.h"
#include "ref_model.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

// Tiny models generated on first use into a per-process temp directory.
class KvF32 : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir(), ec);
  }
  static fs::path dir() { return fs::temp_directory_path() / ("moestream_kv_f32_test_" + std::to_string(::getpid())); }
  static std::string model(const std::string& arch, const std::string& quant) {
    static std::map<std::string, std::string> paths;
    const std::string key = arch + "-" + quant;
    if (auto it = paths.find(key); it != paths.end()) return it->second;
    fs::create_directories(dir());
    GenOptions o;
    o.arch = arch;
    o.quant = quant;
    o.seed = 11;
    const std::string p = (dir() / (key + ".gguf")).string();
    ThreadPool pool(2);
    generate_model(o, p, pool);
    return paths[key] = p;
  }
};

using kvtest::kPrompt;
using kvtest::rel_rms;

// Worst relative RMS logit error over the prompt, fed token by token, against
// the reference (double arithmetic, K/V unrounded).
double worst_vs_reference(const std::string& path, KvType type) {
  auto m = LoadedModel::open(path);
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  KvCache kv = be.make_cache(64, type);
  EXPECT_EQ(kv.type(), type);
  testref::RefModel ref(*m->file);
  ref.renorm = m->weights.cfg.router_renorm;
  std::vector<float> logits;
  double worst = 0;
  for (int32_t t : kPrompt) {
    be.forward(kv, std::span<const int32_t>(&t, 1), logits);
    const std::vector<double> r = ref.step(t);
    const std::vector<float> rf(r.begin(), r.end());
    worst = std::max(worst, rel_rms(logits.data(), rf.data(), rf.size()));
  }
  return worst;
}

TEST_F(KvF32, F32WeightsMatchTheReferenceFarMoreClosely) {
  for (const char* arch : {"qwen3moe", "llama"}) {
    const std::string path = model(arch, "f32");
    const double f16 = worst_vs_reference(path, KvType::F16), f32 = worst_vs_reference(path, KvType::F32);
    std::printf("%s: worst relative RMS logit error vs reference: F16 cache %.3g, F32 cache %.3g\n", arch, f16, f32);
    EXPECT_LT(f32, 1e-5) << arch;
    EXPECT_LT(f32 * 20, f16) << arch;  // the half rounding was the dominant error
  }
}

TEST_F(KvF32, LogitsStayCloseToTheF16Caches) {
  // Every position's logits of one batched prompt, F32 cache against F16.
  for (const char* quant : {"f32", "q4_k_m"}) {
    auto m = LoadedModel::open(model("qwen3moe", quant));
    ThreadPool pool(2);
    CpuBackend be(m->weights, pool);
    KvCache h = be.make_cache(32), f = be.make_cache(32, KvType::F32);
    EXPECT_EQ(f.bytes(), 2 * h.bytes());
    std::vector<float> lh, lf;
    be.forward(h, kPrompt, lh, /*all_logits=*/true);
    be.forward(f, kPrompt, lf, /*all_logits=*/true);
    ASSERT_EQ(lh.size(), lf.size());
    const double d = rel_rms(lf.data(), lh.data(), lf.size());
    // F32 weights: only the half rounding of K/V differs (~5e-5). Quantized
    // weights round activations to 8 bits before each matmul, and a K/V change
    // moves some across a rounding step: differences at that noise (~0.5%).
    EXPECT_LT(d, std::string(quant) == "f32" ? 2e-4 : 2e-2) << quant;
    EXPECT_GT(d, 0.0) << quant << ": identical logits; was the F32 cache used?";
  }
}

TEST_F(KvF32, BatchedPrefillEqualsTokenByToken) {
  for (const char* quant : {"f32", "q4_k_m"})
    for (KvType type : {KvType::F16, KvType::F32}) {
      auto m = LoadedModel::open(model("qwen3moe", quant));
      kvtest::expect_batched_prefill_equals_token_by_token(m->weights, type,
                                                           std::string(quant) + " " + kv_type_name(type));
    }
}

}  // namespace
}  // namespace ms
