// The CUDA backend on gpt-oss (attention with q/k/v/o biases, learned sinks,
// a sliding window of 8 on the even layers, YaRN; a biased router, top-k
// softmax; biased experts with the clamped SwiGLU) against the CPU backend
// (itself checked against a plain reference in tests/engine/gpt_oss_forward_test.cpp)
// on the tiny preset: every position of a 20-token prompt (past the window)
// and decode steps after it (the captured graph), f32 weights + f32 cache
// closely, the published mix (mxfp4_moe) within the backends' usual bound;
// greedy tokens equal at f32. Tiered (a --vram budget below the model: the
// slot tables carry the biases, the waves add them, the CPU tier computes its
// experts with them): every budget and cache policy, each tier alone, the
// gated decode on and off, against the all-resident run in lockstep with the
// project's near-tie rule (hybrid_test.cpp), logits within the bound of the
// weights' type. Skips without a device; prints its numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/cpu_backend.h"
#include "experts/policy.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "tiny_models.h"

namespace ms::cuda::test {
namespace {

constexpr int kCtx = 128;

CudaBackend::Options options(bool kv_f32 = false, uint64_t vram_budget = 0) {
  CudaBackend::Options o;
  o.ctx = kCtx;
  o.kv_f32 = kv_f32;
  o.vram_budget = vram_budget;
  return o;
}

double max_rel(const std::vector<float>& got, const std::vector<float>& ref) {
  double mx = 0, ss = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    mx = std::isnan(e) ? INFINITY : std::max(mx, e);
    ss += static_cast<double>(ref[i]) * ref[i];
  }
  return mx / std::sqrt(ss / static_cast<double>(ref.size()));
}

// max_batch > 0: passes of exactly that many tokens (the prompt fills one).
void compare_backends(const std::string& quant, bool kv_f32, double tol, int max_batch = 0) {
  const LoadedModel& m = tiny_model("gpt-oss", quant);
  const int64_t V = m.weights.cfg.n_vocab;
  const KvType kt = kv_f32 ? KvType::F32 : KvType::F16;
  CpuBackend cpu(m.weights, pool());
  CudaBackend::Options o = options(kv_f32);
  o.max_batch = max_batch;
  CudaBackend gpu(m.weights, o);
  KvCache kc = cpu.make_cache(kCtx, kt), kg = gpu.make_cache(kCtx, kt);
  const std::vector<int32_t> prompt = some_tokens(20, V, 42);
  std::vector<float> lc, lg;
  cpu.forward(kc, prompt, lc, true);
  gpu.forward(kg, prompt, lg, true);
  ASSERT_EQ(lg.size(), lc.size());
  const double d = max_rel(lg, lc);
  std::printf("[ gpt-oss %s kv %s ] prompt of 20: max |gpu-cpu| / rms(cpu) %.2e\n", quant.c_str(),
              kv_type_name(kt), d);
  EXPECT_LE(d, tol) << quant;
  for (int step = 0; step < 6; ++step) {
    int32_t next = 0;
    for (int64_t i = 1; i < V; ++i)
      if (lc[lc.size() - V + i] > lc[lc.size() - V + next]) next = static_cast<int32_t>(i);
    cpu.forward(kc, std::span<const int32_t>(&next, 1), lc);
    gpu.forward(kg, std::span<const int32_t>(&next, 1), lg);
    const double s = max_rel(lg, lc);
    std::printf("[ gpt-oss %s kv %s ] decode step %d: %.2e\n", quant.c_str(), kv_type_name(kt), step, s);
    EXPECT_LE(s, tol) << quant << " decode step " << step;
  }
}

TEST(GptOssCuda, F32MatchesCpuClosely) {
  MS_REQUIRE_GPU();
  compare_backends("f32", true, 1e-3);
}

// The expert scratch sized for a pass of exactly the prompt's tokens: it must
// hold gate and up apart (biases, clamped SwiGLU) even for f32 experts, which
// have no int8 GEMM that would otherwise reserve it.
TEST(GptOssCuda, PromptFillingThePassMatchesCpu) {
  MS_REQUIRE_GPU();
  compare_backends("f32", true, 1e-3, 20);
}

TEST(GptOssCuda, PublishedMixMatchesCpu) {
  MS_REQUIRE_GPU();
  compare_backends("mxfp4_moe", false, 0.05);  // backend_forward_test.cpp's CPU-vs-GPU bound
}

TEST(GptOssCuda, GreedyF32TokensEqualCpu) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("gpt-oss", "f32");
  CpuBackend cpu(m.weights, pool());
  CudaBackend gpu(m.weights, options());
  const std::vector<int32_t> prompt = some_tokens(12, m.weights.cfg.n_vocab, 7);
  EXPECT_EQ(greedy(gpu, prompt, 24), greedy(cpu, prompt, 24));
}

// ---- tiered experts
// A near-tie (hybrid_test.cpp's rule): the reference's best two logits
// within this many rms of each other may pick either.
constexpr double kTieTol = 0.02;

VramPlan needs(const LoadedModel& m) { return vram_needs(split_weights(*m.file), inspect_hparams(*m.file), kCtx); }

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return v.empty() ? 0 : std::sqrt(s / static_cast<double>(v.size()));
}

CudaBackend::Options tiered_options(uint64_t budget, const std::string& policy = "default") {
  CudaBackend::Options o = options(false, budget);
  o.tiered.policy = policy;
  o.tiered.pool = &pool();
  return o;
}

// Budgets from the minimum (every expert tiered) to one expert short of all.
std::vector<uint64_t> budgets(const LoadedModel& m) {
  const VramPlan p = needs(m);
  const uint64_t experts = p.everything_bytes - p.minimum_bytes;
  const uint64_t one = split_weights(*m.file).one_expert_bytes;
  return {p.minimum_bytes, p.minimum_bytes + experts / 4, p.minimum_bytes + experts / 2,
          p.everything_bytes - one - 1};
}

// Both fed the reference's greedy token: logits within tol x rms after the
// prompt and every step, the same pick unless the reference's two candidates
// are a near-tie. Returns the number of identical picks.
int lockstep(Backend& ref, Backend& got, const std::vector<int32_t>& prompt, int steps, double tol,
             const std::string& what) {
  KvCache kr = ref.make_cache(kCtx), kg = got.make_cache(kCtx);
  std::vector<float> lr, lg;
  ref.forward(kr, prompt, lr);
  got.forward(kg, prompt, lg);
  const auto V = static_cast<int32_t>(ref.config().n_vocab);
  double worst = max_rel(lg, lr);
  EXPECT_LE(worst, tol) << what << ": after the prompt";
  int same = 0;
  for (int i = 0; i < steps; ++i) {
    const int32_t a = argmax(lr.data(), V), b = argmax(lg.data(), V);
    if (a == b) {
      ++same;
    } else {
      const double margin = (lr[static_cast<size_t>(a)] - lr[static_cast<size_t>(b)]) / rms(lr);
      std::printf("[ %s ] step %d: picks %d not %d, reference margin %.5f x rms\n", what.c_str(), i, b, a, margin);
      EXPECT_LE(margin, kTieTol) << what << ": step " << i << " picks " << b << " not " << a << " with a clear margin";
    }
    ref.forward(kr, std::span<const int32_t>(&a, 1), lr);
    got.forward(kg, std::span<const int32_t>(&a, 1), lg);
    const double d = max_rel(lg, lr);
    worst = std::max(worst, d);
    EXPECT_LE(d, tol) << what << ": step " << i;
  }
  std::printf("[ %s ] %d/%d picks identical, worst logits %.2e x rms\n", what.c_str(), same, steps, worst);
  return same;
}

struct TieredCase {
  const char* quant;
  double tol;  // logits against the all-resident run (x rms)
};

class GptOssTiered : public ::testing::TestWithParam<TieredCase> {};

TEST_P(GptOssTiered, MatchesAllResidentAtEveryBudgetAndPolicy) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("gpt-oss", GetParam().quant);
  CudaBackend::Options full = options();
  full.vram_full = true;
  CudaBackend ref(m.weights, full);
  ASSERT_FALSE(ref.expert_telemetry().hybrid);
  // 20 tokens: the waves take the batch (matmul) path; decode the gated step
  // or the waves' matvec path where the CPU tier has experts.
  const std::vector<int32_t> prompt = some_tokens(20, m.weights.cfg.n_vocab, 7);
  std::vector<std::string> policies = policy_names();
  policies.insert(policies.begin(), "default");
  for (uint64_t b : budgets(m))
    for (const std::string& pol : policies) {
      const std::string what = std::string("gpt-oss ") + GetParam().quant + " budget " + std::to_string(b >> 10) +
                               " KiB policy " + pol;
      CudaBackend be(m.weights, tiered_options(b, pol));
      EXPECT_GE(lockstep(ref, be, prompt, 48, GetParam().tol, what), 42) << what;
      const ExpertTelemetry t = be.expert_telemetry();
      EXPECT_TRUE(t.hybrid) << what;
      EXPECT_GT(t.all().total(), 0u) << what;
    }
}

// Each tier alone at the minimum budget (the other made to look hopeless to
// the cost model), a short prompt (the waves' matvec path for several
// tokens), and the decode without the gate (the planned step every token).
TEST_P(GptOssTiered, EachTierAloneAndTheUngatedDecodeMatch) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("gpt-oss", GetParam().quant);
  CudaBackend::Options full = options();
  full.vram_full = true;
  CudaBackend ref(m.weights, full);
  const std::vector<int32_t> prompt = some_tokens(5, m.weights.cfg.n_vocab, 11);
  const uint64_t min_budget = needs(m).minimum_bytes;
  struct Mode {
    const char* name;
    const char* cost;
    bool gated;
  };
  for (const Mode& mode : {Mode{"cpu only", "pcie_gbps=0.0001", true}, Mode{"pcie only", "cpu_gbps=0.0001", true},
                           Mode{"pcie only, ungated", "cpu_gbps=0.0001", false}, Mode{"default, ungated", "", false}}) {
    CudaBackend::Options o = tiered_options(min_budget);
    o.tiered.step.cost = CostOverrides::parse(mode.cost);
    o.tiered.gated = mode.gated;
    CudaBackend be(m.weights, o);
    const std::string what = std::string("gpt-oss ") + GetParam().quant + " " + mode.name;
    EXPECT_GE(lockstep(ref, be, prompt, 32, GetParam().tol, what), 28) << what;
    const TierCounts c = be.expert_telemetry().all();
    if (std::string(mode.name) == "cpu only") EXPECT_GT(c.host, 0u) << what;
    if (std::string(mode.name).rfind("pcie only", 0) == 0) {
      EXPECT_EQ(c.host, 0u) << what;
      EXPECT_GT(c.streamed, 0u) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Quants, GptOssTiered,
                         ::testing::Values(TieredCase{"f32", 1e-3}, TieredCase{"mxfp4_moe", 0.05}),
                         [](const ::testing::TestParamInfo<TieredCase>& i) { return std::string(i.param.quant); });

}  // namespace
}  // namespace ms::cuda::test
