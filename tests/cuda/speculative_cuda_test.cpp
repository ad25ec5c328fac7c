// Speculative decoding on the CUDA backend (docs/speculative.md): on the tiny
// qwen3moe and qwen35moe models at full residency, greedy text with
// speculation is plain decoding's for the n-gram drafter, the oracle at 0.5,
// 0.8 and 1 (fixed K = 8 and the controller), and a draft model (a 1-layer
// qwen3moe of the same vocabulary) on the GPU and on the CPU. A verify's
// batched rows may round differently from a decode step's (GEMM against
// matvec), so a near-tie could part the texts; on these models none does
// (the message names the first token that differs).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "tiny_models.h"

namespace ms::cuda::test {
namespace {

// A 1-layer tiny qwen3moe (the tiny vocabulary of every architecture).
const LoadedModel& draft_model() {
  static std::unique_ptr<LoadedModel> m;
  if (m) return *m;
  const auto path = std::filesystem::temp_directory_path() /
                    ("ms_cuda_spec_draft_" + std::to_string(getpid()) + ".gguf");
  GenOptions o;
  o.arch = "qwen3moe";
  o.preset = "tiny";
  o.quant = "q8_0";
  o.n_layer = 1;
  o.seed = 7;
  generate_model(o, path.string(), pool());
  m = LoadedModel::open(path.string());
  std::filesystem::remove(path);
  return *m;
}

std::vector<int32_t> generate_greedy(Backend& be, const std::vector<int32_t>& prompt, int n, Drafter* d, int k,
                                     bool fixed, SpecStats* stats = nullptr) {
  KvCache kv = be.make_cache(128);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp);
  GenerateParams gp;
  gp.n_predict = n;
  gp.stop_at_eog = false;
  gp.spec.drafter = d;
  gp.spec.control.draft_max = k;
  gp.spec.control.adaptive = !fixed;
  std::vector<int32_t> out;
  const GenerateStats st = generate(be, kv, sampler, nullptr, prompt, gp, [&](int32_t id) {
    out.push_back(id);
    return true;
  });
  if (stats) *stats = st.spec;
  return out;
}

std::string first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return "first difference at token " + std::to_string(i);
  return a.size() == b.size() ? "equal" : "lengths differ";
}

class CudaSpec : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaSpec, GreedyTextIsPlainDecodings) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam(), "q8_0");
  const int64_t V = m.weights.cfg.n_vocab;
  CudaBackend::Options o{.ctx = 128};
  o.vram_full = true;
  CudaBackend gpu(m.weights, o);
  const auto prompt = some_tokens(8, V, 91);
  constexpr int kN = 48;
  const std::vector<int32_t> want = generate_greedy(gpu, prompt, kN, nullptr, 1, false);
  ASSERT_EQ(want.size(), static_cast<size_t>(kN));
  struct Run {
    std::string name;
    std::unique_ptr<Drafter> d;
    int k;
    bool fixed;
  };
  std::vector<Run> runs;
  runs.push_back({"ngram", std::make_unique<NgramDrafter>(), 8, false});
  for (double a : {0.5, 0.8})
    runs.push_back({"oracle:" + std::to_string(a), std::make_unique<OracleDrafter>(want, prompt.size(), a, V, 3), 8,
                    false});
  runs.push_back({"oracle:1 fixed K 8", std::make_unique<OracleDrafter>(want, prompt.size(), 1.0, V, 3), 8, true});
  runs.push_back({"oracle:0.7 fixed K 3", std::make_unique<OracleDrafter>(want, prompt.size(), 0.7, V, 4), 3, true});
  for (const auto& r : runs) {
    SpecStats st;
    const auto got = generate_greedy(gpu, prompt, kN, r.d.get(), r.k, r.fixed, &st);
    EXPECT_EQ(got, want) << GetParam() << " " << r.name << ": " << first_difference(got, want);
    if (r.fixed) EXPECT_GT(st.verifies, 0) << r.name;
  }
  // A draft model on the GPU (its own backend, every weight resident) and on the CPU.
  const LoadedModel& dm = draft_model();
  ASSERT_EQ(dm.weights.cfg.n_vocab, V);
  CudaBackend::Options dopt{.ctx = 128};
  dopt.vram_full = true;
  CudaBackend draft_gpu(dm.weights, dopt);
  CpuBackend draft_cpu(dm.weights, pool());
  for (Backend* db : {static_cast<Backend*>(&draft_gpu), static_cast<Backend*>(&draft_cpu)}) {
    for (const bool fixed : {true, false}) {
      ModelDrafter d(*db, {.sampling = SamplerParams{.temperature = 0}, .p_min = 0, .ctx = 128});
      SpecStats st;
      const auto got = generate_greedy(gpu, prompt, kN, &d, 4, fixed, &st);
      EXPECT_EQ(got, want) << GetParam() << " draft on " << db->name() << (fixed ? " fixed K 4" : "") << ": "
                           << first_difference(got, want);
      if (fixed) EXPECT_GT(st.verifies, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaSpec, ::testing::Values("qwen3moe", "qwen35moe"));

}  // namespace
}  // namespace ms::cuda::test
