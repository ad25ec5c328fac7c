// The CPU backend on Q8_0 weights against the same model with its weights
// dequantized to f32 (ref_model.h: the "twin", exact arithmetic in double on
// the same effective weights), issue 41. The metric is hf_parity.py's: max_i
// |a_i - b_i| / max_i |b_i| over one position's logits.
//
// A quantized run differs from its twin by the rounding of every matmul input
// to 8 bits. The CUDA backend rounds each block of 32 with an f32 scale (the
// GPU Q8 form, quant/gpu_q8.h); the twin can apply that same rounding
// (InputRounding::Q8F32), and then only float summation order separates it
// from a backend that rounds that way. The CPU used Q8_0's own activation
// block, whose scale is rounded to f16: an extra rounding the GPU does not
// make, which these tiny random models (the reference's own spread under a
// 1e-6 jitter is a few percent: bench/results/parity.md) amplify to 1.5-3%
// of the logits at every position. So the checks are
//   - against the GPU-rounded twin: summation order only (1e-3 on the
//     median position, 1e-2 on the worst; the f16 scale gave 0.015-0.03 at
//     every position), on prompts (chunked delta rule) and token by token;
//   - against the exact twin: the CPU's mean error is the GPU-rounded twin's
//     (the CUDA figure), not more.
// Fixture: tests/fixtures/llamacpp/qwen35moe-nomtp-q8_0.gguf (llama.cpp's
// converter, --outtype q8_0); plus `gen --quant q8_0 --pure` models of every
// architecture the reference knows. F32 K/V on both sides: the twin keeps
// K/V unrounded, and f16 K/V would add its own rounding to the comparison.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "ref_model.h"

namespace ms {
namespace {

using testref::InputRounding;
namespace fs = std::filesystem;

const std::string kFixture = std::string(MS_SOURCE_DIR) + "/tests/fixtures/llamacpp/qwen35moe-nomtp-q8_0.gguf";
// The fixture's Hugging Face prompt (llamacpp_files_test.cpp).
const std::vector<int32_t> kTokens = {298, 221, 81, 85, 73, 67, 75, 221, 66, 281, 87, 78, 258, 79, 88, 221};

// max_i |a_i - b_i| / max_i |b_i| (hf_parity.py's relative error).
double rel_err(const float* a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

std::vector<int32_t> prompt(int n, uint32_t seed, int64_t vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p.push_back(static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(vocab)));
  }
  return p;
}

// The CPU's logits at every position: the whole prompt at once, or token by
// token (decode's kernels and the recurrent delta rule).
std::vector<float> cpu_logits(const LoadedModel& m, const std::vector<int32_t>& tokens, bool by_token) {
  ThreadPool pool(2);
  CpuBackend be(m.weights, pool);
  KvCache kv = be.make_cache(static_cast<int64_t>(tokens.size()) + 1, KvType::F32);
  std::vector<float> all;
  if (!by_token) {
    be.forward(kv, tokens, all, /*all_logits=*/true);
    return all;
  }
  std::vector<float> one;
  for (int32_t t : tokens) {
    be.forward(kv, std::span<const int32_t>(&t, 1), one);
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

// Per position: the CPU's error against the twin with `rounding`; and, if
// given, that twin's own error against the exact twin.
std::vector<double> errors(const LoadedModel& m, const std::vector<int32_t>& tokens, const std::vector<float>& cpu,
                           InputRounding rounding, std::vector<double>* twin_vs_exact = nullptr) {
  testref::RefModel twin(*m.file), exact(*m.file);
  twin.round_inputs(rounding);
  const size_t V = static_cast<size_t>(m.weights.cfg.n_vocab);
  std::vector<double> err;
  for (size_t p = 0; p < tokens.size(); ++p) {
    const std::vector<double> t = twin.step(tokens[p]);
    err.push_back(rel_err(cpu.data() + p * V, t));
    if (twin_vs_exact) {
      const std::vector<float> tf(t.begin(), t.end());
      twin_vs_exact->push_back(rel_err(tf.data(), exact.step(tokens[p])));
    }
  }
  return err;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double worst(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

TEST(QuantTwin, Q8_0FixtureRoundsAsTheGpuDoes) {
  auto m = LoadedModel::open(kFixture);
  for (bool by_token : {false, true}) {
    const std::vector<float> cpu = cpu_logits(*m, kTokens, by_token);
    const std::vector<double> err = errors(*m, kTokens, cpu, InputRounding::Q8F32);
    std::printf("  %s: vs the GPU-rounded twin, median %.2e, worst %.2e\n", by_token ? "token by token" : "prompt",
                median(err), worst(err));
    EXPECT_LT(median(err), 1e-3) << (by_token ? "token by token" : "prompt");
    EXPECT_LT(worst(err), 1e-2) << (by_token ? "token by token" : "prompt");
  }
}

// The CUDA figure: the error the GPU's rounding itself makes against the
// exact twin, averaged over positions of 8 prompts (one position's figure is
// a draw from the spread; the f16 scale raised the mean from 0.065 to 0.086).
TEST(QuantTwin, Q8_0FixtureErrorIsTheGpuRoundingsOwn) {
  auto m = LoadedModel::open(kFixture);
  std::vector<double> cpu_err, gpu_err;
  for (uint32_t s = 0; s < 8; ++s) {
    const std::vector<int32_t> p = prompt(16, 1234 + 77 * s, m->weights.cfg.n_vocab);
    const std::vector<float> cpu = cpu_logits(*m, p, false);
    const std::vector<double> e = errors(*m, p, cpu, InputRounding::None, nullptr);
    cpu_err.insert(cpu_err.end(), e.begin(), e.end());
    std::vector<double> g;
    errors(*m, p, cpu, InputRounding::Q8F32, &g);
    gpu_err.insert(gpu_err.end(), g.begin(), g.end());
  }
  std::printf("  vs the exact twin, mean / worst over %zu positions: CPU %.4f / %.4f, GPU-rounded twin %.4f / %.4f\n",
              cpu_err.size(), mean(cpu_err), worst(cpu_err), mean(gpu_err), worst(gpu_err));
  EXPECT_LE(mean(cpu_err), 1.05 * mean(gpu_err)) << "the CUDA figure (GPU-rounded twin vs exact): " << mean(gpu_err);
  EXPECT_LE(worst(cpu_err), 1.05 * worst(gpu_err));
}

// Generated q8_0 models (every tensor Q8_0 but norms and routers) of each
// architecture the twin knows: attention, experts (stacked), shared expert.
TEST(QuantTwin, Q8_0GeneratedModelsRoundAsTheGpuDoes) {
  const fs::path dir = fs::temp_directory_path() / ("moestream_twin_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* arch : {"qwen3moe", "mixtral", "qwen35moe"}) {
    ThreadPool pool(2);
    GenOptions o;
    o.arch = arch;
    o.preset = "tiny";
    o.quant = "q8_0";
    o.pure = true;
    o.seed = 5;
    const std::string path = (dir / (std::string(arch) + ".gguf")).string();
    generate_model(o, path, pool);
    auto m = LoadedModel::open(path);
    const std::vector<int32_t> p = prompt(12, 99, m->weights.cfg.n_vocab);
    const std::vector<double> err = errors(*m, p, cpu_logits(*m, p, false), InputRounding::Q8F32);
    EXPECT_LT(median(err), 1e-3) << arch;
    EXPECT_LT(worst(err), 1e-2) << arch;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace ms
