// Tiered experts (CudaBackend with a VRAM budget below the model): a plan
// never changes results. Every budget from the minimum to just below the
// whole model, every cache policy, each tier on its own (CPU only, PCIe only,
// staging ring), gives the all-resident run's greedy tokens; logits stay
// within the backends' tolerance; a budget below the minimum is a clear error.
//
// Identity: experts computed on the GPU (resident or streamed) give the
// all-resident run's bits, so with f16 weights and on every GPU-only plan the
// greedy tokens must be identical, full stop. An expert computed on the CPU
// rounds its activations as the GPU does (ActRounding::Gpu) but sums in
// another order, so its output differs in the last bits; on random models,
// whose logits are flat, that can flip a near-tie. Those runs go in lockstep:
// both are fed the reference's token and must pick the same one unless the
// reference's two candidates are within kTieTol x rms(logits) of each other.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "tiny_models.h"
#include "experts/policy.h"
#include "format/gguf.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "util/error.h"

namespace ms::cuda::test {
namespace {

constexpr double kRelTol = 0.05;
// A near-tie, for lockstep: the reference's best two logits this close.
constexpr double kTieTol = 0.02;
constexpr int kCtx = 128;

VramPlan needs(const LoadedModel& m) {
  return vram_needs(split_weights(*m.file), inspect_hparams(*m.file), kCtx);
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return v.empty() ? 0 : std::sqrt(s / double(v.size()));
}

CudaBackend::Options all_resident_options() {
  CudaBackend::Options o;
  o.ctx = kCtx;
  o.vram_full = true;
  return o;
}

CudaBackend::Options budget_options(uint64_t budget, const std::string& policy = "default") {
  CudaBackend::Options o;
  o.ctx = kCtx;
  o.vram_budget = budget;
  o.tiered.policy = policy;
  o.tiered.pool = &pool();
  return o;
}

// Lockstep greedy against the reference (see the header comment); returns
// the number of identical picks.
int lockstep(Backend& ref, Backend& got, const std::vector<int32_t>& prompt, int steps, const std::string& what,
             double tie_tol = kTieTol) {
  KvCache kr = ref.make_cache(kCtx), kg = got.make_cache(kCtx);
  std::vector<float> lr, lg;
  ref.forward(kr, prompt, lr);
  got.forward(kg, prompt, lg);
  const auto V = static_cast<int32_t>(ref.config().n_vocab);
  int same = 0;
  for (int i = 0; i < steps; ++i) {
    const int32_t a = argmax(lr.data(), V), b = argmax(lg.data(), V);
    if (a == b) {
      ++same;
    } else {
      const double margin = (lr[a] - lr[b]) / rms(lr);
      std::printf("[ %s ] step %d: picks %d not %d, reference margin %.5f x rms\n", what.c_str(), i, b, a, margin);
      EXPECT_LE(margin, tie_tol) << what << ": step " << i << " picks " << b << " not " << a
                                 << " with a clear margin";
    }
    ref.forward(kr, std::span<const int32_t>(&a, 1), lr);
    got.forward(kg, std::span<const int32_t>(&a, 1), lg);
  }
  return same;
}

// Budgets from the minimum to one expert short of everything.
std::vector<uint64_t> budgets(const LoadedModel& m) {
  const VramPlan p = needs(m);
  const uint64_t experts = p.everything_bytes - p.minimum_bytes;
  const uint64_t one = split_weights(*m.file).one_expert_bytes;
  return {p.minimum_bytes, p.minimum_bytes + experts / 4, p.minimum_bytes + experts / 2,
          p.everything_bytes - one - 1};
}

struct Case {
  const char* arch;
  const char* quant;
};

class Hybrid : public ::testing::TestWithParam<Case> {};

TEST_P(Hybrid, GreedyMatchesAllResidentAtEveryBudgetAndPolicy) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam().arch, GetParam().quant);
  const bool exact = std::string(GetParam().quant) == "f16";
  CudaBackend ref(m.weights, all_resident_options());
  ASSERT_FALSE(ref.expert_telemetry().hybrid);
  // 20 tokens: the prompt runs the tensor-core (batch) expert path.
  const std::vector<int32_t> prompt = some_tokens(20, m.weights.cfg.n_vocab, 7);
  const std::vector<int32_t> want = greedy(ref, prompt, 64, kCtx);
  std::vector<std::string> policies = policy_names();
  policies.insert(policies.begin(), "default");
  for (uint64_t b : budgets(m))
    for (const std::string& pol : policies) {
      const std::string what = std::string(GetParam().arch) + " " + GetParam().quant + " budget " +
                               std::to_string(b >> 10) + " KiB policy " + pol;
      CudaBackend be(m.weights, budget_options(b, pol));
      if (exact) {
        EXPECT_EQ(greedy(be, prompt, 64, kCtx), want) << what;
      } else {
        const int same = lockstep(ref, be, prompt, 64, what);
        EXPECT_GE(same, 56) << what;
      }
      const ExpertTelemetry t = be.expert_telemetry();
      EXPECT_TRUE(t.hybrid) << what;
      EXPECT_GT(t.all().total(), 0u) << what;
      EXPECT_LE(t.cache_slots, t.experts_total) << what;
    }
}

// Each tier alone at the minimum budget, by making the other one look
// hopeless to the cost model; and the staging ring instead of registration.
TEST_P(Hybrid, EachTierAloneGivesTheSameTokens) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam().arch, GetParam().quant);
  const bool exact = std::string(GetParam().quant) == "f16";
  CudaBackend ref(m.weights, all_resident_options());
  const std::vector<int32_t> prompt = some_tokens(20, m.weights.cfg.n_vocab, 11);
  const std::vector<int32_t> want = greedy(ref, prompt, 64, kCtx);
  const uint64_t min_budget = needs(m).minimum_bytes;
  struct Mode {
    const char* name;
    const char* cost;
    const char* pin;
  };
  for (const Mode& mode : {Mode{"cpu only", "pcie_gbps=0.0001", "auto"}, Mode{"pcie only", "cpu_gbps=0.0001", "auto"},
                           Mode{"staging ring", "cpu_gbps=0.0001", "staging"}}) {
    CudaBackend::Options o = budget_options(min_budget);
    o.tiered.step.cost = CostOverrides::parse(mode.cost);
    o.tiered.host_pin = cuda::parse_host_pin(mode.pin);
    CudaBackend be(m.weights, o);
    const std::string what = std::string(GetParam().arch) + " " + GetParam().quant + " " + mode.name;
    if (exact) EXPECT_EQ(greedy(be, prompt, 64, kCtx), want) << what;
    else EXPECT_GE(lockstep(ref, be, prompt, 64, what), 56) << what;
    const ExpertTelemetry t = be.expert_telemetry();
    const TierCounts c = t.all();
    if (std::string(mode.name) == "cpu only") {
      EXPECT_GT(c.host, 0u) << what;
      EXPECT_EQ(c.streamed, t.admitted) << what;  // only what the cache admitted crossed PCIe
    } else {
      EXPECT_EQ(c.host, 0u) << what;
      EXPECT_GT(c.streamed, 0u) << what;
      EXPECT_GT(t.h2d_bytes, 0u) << what;
    }
    if (std::string(mode.pin) == "staging") EXPECT_EQ(t.host_pin, "pinned staging ring");
  }
}

// Prefetch (the next tiered layer's predicted experts copied into staging
// slots ahead) changes where bytes come from, never the tokens: off, next and
// auto give the all-resident run's tokens at the minimum budget (every expert
// cold) and at half the experts, with the default and the adaptive policy.
// At half, the adaptive policy admits staged experts: they go into their
// cache slots from the staging slots (a device copy), and the tokens must
// still be the all-resident ones.
TEST_P(Hybrid, PrefetchOnAndOffGiveTheSameTokens) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam().arch, GetParam().quant);
  const bool exact = std::string(GetParam().quant) == "f16";
  CudaBackend ref(m.weights, all_resident_options());
  const std::vector<int32_t> prompt = some_tokens(9, m.weights.cfg.n_vocab, 5);
  const std::vector<int32_t> want = greedy(ref, prompt, 48, kCtx);
  const std::vector<uint64_t> bs = budgets(m);
  for (uint64_t b : {bs[0], bs[2]})
    for (const char* pol : {"default", "adaptive"})
      for (const char* mode : {"off", "next", "auto"}) {
        const std::string what = std::string(GetParam().arch) + " " + GetParam().quant + " budget " +
                                 std::to_string(b >> 10) + " KiB policy " + pol + " prefetch " + mode;
        CudaBackend::Options o = budget_options(b, pol);
        o.tiered.step.prefetch = parse_decode_prefetch(mode);
        o.tiered.step.cost = CostOverrides::parse("cpu_gbps=0.0001");  // cold experts stream (the CPU tier has its own tests)
        CudaBackend be(m.weights, o);
        if (exact) EXPECT_EQ(greedy(be, prompt, 48, kCtx), want) << what;
        else EXPECT_GE(lockstep(ref, be, prompt, 48, what), 42) << what;
        const ExpertTelemetry t = be.expert_telemetry();
        EXPECT_EQ(t.prefetch_mode, mode) << what;
        if (std::string(mode) == "off") {
          EXPECT_EQ(t.prefetch.layer_steps, 0u) << what;
          EXPECT_EQ(t.stage_bytes, 0u) << what;
        } else if (b == bs[0]) {  // nothing resident: every prediction is staged
          EXPECT_GT(t.prefetch.layer_steps, 0u) << what;
          EXPECT_GT(t.prefetch.staged, 0u) << what;
          EXPECT_GT(t.prefetch.correct, 0u) << what;
          EXPECT_GT(t.prefetch.staged_used, 0u) << what;
          EXPECT_LE(t.prefetch.staged_used, t.prefetch.staged) << what;
          EXPECT_GT(t.stage_bytes, 0u) << what;
          EXPECT_LE(t.stage_bytes, t.h2d_bytes) << what;
        } else if (std::string(pol) == "adaptive") {
          EXPECT_GT(t.prefetch.staged_admitted, 0u) << what;
          EXPECT_LE(t.prefetch.staged_admitted, t.prefetch.staged_used) << what;
        }
      }
}

// The gated decode step (residency checked on the GPU, the host waited for
// only on a miss) and the round-trip step both give the all-resident tokens.
// The gated one counts its layer steps; one expert short of everything, some
// of them have every routed expert resident and run with no round trip.
TEST_P(Hybrid, GatedAndRoundTripDecodeGiveTheSameTokens) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam().arch, GetParam().quant);
  const bool exact = std::string(GetParam().quant) == "f16";
  CudaBackend ref(m.weights, all_resident_options());
  const std::vector<int32_t> prompt = some_tokens(9, m.weights.cfg.n_vocab, 13);
  const std::vector<int32_t> want = greedy(ref, prompt, 48, kCtx);
  const std::vector<uint64_t> bs = budgets(m);
  for (uint64_t b : {bs[0], bs[2], bs[3]})
    for (const char* pol : {"default", "adaptive"})
      for (bool gated : {false, true}) {
        const std::string what = std::string(GetParam().arch) + " " + GetParam().quant + " budget " +
                                 std::to_string(b >> 10) + " KiB policy " + pol + (gated ? " gated" : " round trip");
        CudaBackend::Options o = budget_options(b, pol);
        o.tiered.gated = gated;
        CudaBackend be(m.weights, o);
        if (exact) EXPECT_EQ(greedy(be, prompt, 48, kCtx), want) << what;
        else EXPECT_GE(lockstep(ref, be, prompt, 48, what), 42) << what;
        const ExpertTelemetry t = be.expert_telemetry();
        if (!gated) {
          EXPECT_EQ(t.gated_hits + t.gated_misses, 0u) << what;
          continue;
        }
        EXPECT_GT(t.gated_hits + t.gated_misses, 0u) << what;
        if (b == bs[0]) EXPECT_GT(t.gated_misses, 0u) << what;
        if (b == bs[3]) EXPECT_GT(t.gated_hits, 0u) << what;
      }
}

// Prompt staging (a long pass copies each tiered layer's cold experts into
// transit slots before its routes are known, while earlier layers compute)
// changes when bytes arrive, never the tokens: on and off give the
// all-resident tokens after a 40-token prompt, at the minimum budget and at
// half the experts, with the default and the adaptive policy, with the
// default transit slots and with 4 (every stage wraps around the slots, so
// copies must wait for the computes that read them).
TEST_P(Hybrid, PromptStagingOnAndOffGiveTheSameTokens) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam().arch, GetParam().quant);
  const bool exact = std::string(GetParam().quant) == "f16";
  CudaBackend ref(m.weights, all_resident_options());
  const std::vector<int32_t> prompt = some_tokens(40, m.weights.cfg.n_vocab, 21);
  const std::vector<int32_t> want = greedy(ref, prompt, 24, kCtx);
  const std::vector<uint64_t> bs = budgets(m);
  for (uint64_t b : {bs[0], bs[2]})
    for (const char* pol : {"default", "adaptive"})
      for (uint32_t transit : {0u, 4u})
        for (bool stage : {false, true}) {
          const std::string what = std::string(GetParam().arch) + " " + GetParam().quant + " budget " +
                                   std::to_string(b >> 10) + " KiB policy " + pol + " transit " +
                                   std::to_string(transit) + (stage ? " staged" : " not staged");
          CudaBackend::Options o = budget_options(b, pol);
          o.tiered.step.prompt_stage = stage;
          o.tiered.transit_slots = transit;
          o.tiered.step.prefetch = DecodePrefetch::Off;                    // stage_bytes: the prompt's alone
          o.tiered.step.cost = CostOverrides::parse("cpu_gbps=0.0001");  // cold experts stream
          CudaBackend be(m.weights, o);
          if (exact) EXPECT_EQ(greedy(be, prompt, 24, kCtx), want) << what;
          else EXPECT_GE(lockstep(ref, be, prompt, 24, what), 20) << what;
          const ExpertTelemetry t = be.expert_telemetry();
          if (!stage) EXPECT_EQ(t.stage_bytes, 0u) << what;
          if (stage && b == bs[0]) EXPECT_GT(t.stage_bytes, 0u) << what;  // every expert cold
          EXPECT_LE(t.stage_bytes, t.h2d_bytes) << what;
        }
}

// Where the link copies a cold expert faster than the CPU computes it, a
// staged prompt pass streams them all (HybridMoeOptions::prompt_cpu). With
// 4 transit slots only 4 experts are staged; the costs here would give the
// CPU about a third of the others (twice as slow per expert as the link).
TEST_P(Hybrid, StagedPromptsGiveTheCpuNoShareUnlessAsked) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam().arch, GetParam().quant);
  const bool exact = std::string(GetParam().quant) == "f16";
  CudaBackend ref(m.weights, all_resident_options());
  const std::vector<int32_t> prompt = some_tokens(40, m.weights.cfg.n_vocab, 23);
  const std::vector<int32_t> want = greedy(ref, prompt, 16, kCtx);
  uint64_t host_pairs[2] = {0, 0};
  for (bool cpu : {false, true}) {
    const std::string what = std::string(GetParam().arch) + " " + GetParam().quant + (cpu ? " prompt_cpu" : "");
    CudaBackend::Options o = budget_options(budgets(m)[0]);
    o.tiered.step.prompt_cpu = cpu;
    o.tiered.transit_slots = 4;
    o.tiered.step.prefetch = DecodePrefetch::Off;
    o.tiered.step.cost = CostOverrides::parse("pcie_gbps=50,cpu_gbps=50,cpu_gflops=1000,copy_overhead_us=10,cpu_overhead_us=20");
    CudaBackend be(m.weights, o);
    {
      KvCache kv = be.make_cache(kCtx);
      std::vector<float> logits;
      be.forward(kv, prompt, logits);
      host_pairs[cpu] = be.expert_telemetry().all().host;
    }
    if (exact) EXPECT_EQ(greedy(be, prompt, 16, kCtx), want) << what;
    else EXPECT_GE(lockstep(ref, be, prompt, 16, what), 13) << what;
  }
  EXPECT_EQ(host_pairs[0], 0u) << "the prompt gave the CPU a share";
  EXPECT_GT(host_pairs[1], 0u) << "these costs should give the CPU a share when asked (prompt_cpu)";
}

TEST_P(Hybrid, LogitsOfEveryPromptPositionWithinTolerance) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam().arch, GetParam().quant);
  CudaBackend ref(m.weights, all_resident_options());
  CudaBackend be(m.weights, budget_options(needs(m).minimum_bytes));
  KvCache kr = ref.make_cache(kCtx), kb = be.make_cache(kCtx);
  int step = 0;
  for (int n : {40, 5, 1, 1}) {
    const std::vector<int32_t> toks = some_tokens(n, m.weights.cfg.n_vocab, 100 + step++);
    std::vector<float> lr, lb;
    ref.forward(kr, toks, lr, true);
    be.forward(kb, toks, lb, true);
    ASSERT_EQ(lr.size(), lb.size());
    double max_abs = 0;
    for (size_t i = 0; i < lr.size(); ++i) {
      const double e = std::fabs(double(lb[i]) - lr[i]);
      max_abs = std::isnan(e) ? INFINITY : std::max(max_abs, e);
    }
    std::printf("[ %s %s ] hybrid batch %2d: max |hybrid-full| %.5f, rms %.4f\n", GetParam().arch, GetParam().quant,
                n, max_abs, rms(lr));
    EXPECT_LE(max_abs, kRelTol * rms(lr)) << "batch " << n;
  }
}

TEST_P(Hybrid, BudgetBelowTheMinimumIsAClearError) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model(GetParam().arch, GetParam().quant);
  const uint64_t min_budget = needs(m).minimum_bytes;
  try {
    CudaBackend be(m.weights, budget_options(min_budget - 1));
    FAIL() << "a budget one byte below the minimum was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs at least"), std::string::npos) << e.what();
  }
  // Nothing half-allocated is left behind: the whole model still fits afterwards.
  EXPECT_NO_THROW(CudaBackend(m.weights, all_resident_options()));
}

// The Qwen3-30B-A3B shape (2048 wide, 128 experts of 768, top-8, Q4_K
// experts) in 4 layers: every budget and policy against the all-resident run,
// in lockstep (the CPU tier is used at the small budgets).
TEST(HybridQwen30bShape, GreedyMatchesAllResidentAtEveryBudgetAndPolicy) {
  MS_REQUIRE_GPU();
  const auto dir = std::filesystem::temp_directory_path() / ("ms_hybrid_30b_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "q30b_4l.gguf").string();
  GenOptions g;
  g.arch = "qwen3moe";
  g.preset = "qwen3-30b-a3b";
  g.quant = "q4_k";
  g.n_layer = 4;
  g.n_ctx = kCtx;
  generate_model(g, path, pool());
  auto m = LoadedModel::open(path);
  std::filesystem::remove_all(dir);
  CudaBackend ref(m->weights, all_resident_options());
  const std::vector<int32_t> prompt = some_tokens(20, m->weights.cfg.n_vocab, 31);
  std::vector<std::string> policies = policy_names();
  policies.insert(policies.begin(), "default");
  uint64_t cpu_pairs = 0;
  for (uint64_t b : budgets(*m))
    for (const std::string& pol : policies) {
      const std::string what = "qwen3-30b-a3b shape budget " + std::to_string(b >> 20) + " MiB policy " + pol;
      CudaBackend be(m->weights, budget_options(b, pol));
      EXPECT_GE(lockstep(ref, be, prompt, 64, what), 60) << what;
      const ExpertTelemetry t = be.expert_telemetry();
      EXPECT_TRUE(t.hybrid) << what;
      cpu_pairs += t.all().host;
    }
  // And every cold expert on the CPU, at the minimum budget.
  CudaBackend::Options o = budget_options(needs(*m).minimum_bytes);
  o.tiered.step.cost = CostOverrides::parse("pcie_gbps=0.0001");
  CudaBackend be(m->weights, o);
  EXPECT_GE(lockstep(ref, be, prompt, 64, "qwen3-30b-a3b shape, cpu only"), 60);
  EXPECT_GT(be.expert_telemetry().all().host, 0u);
  std::printf("[ qwen3-30b-a3b shape ] pairs computed on the CPU over the budgets and policies: %llu\n",
              static_cast<unsigned long long>(cpu_pairs));
}

INSTANTIATE_TEST_SUITE_P(Archs, Hybrid,
                         ::testing::Values(Case{"qwen3moe", "f16"}, Case{"qwen3moe", "q4_k_m"},
                                           Case{"mixtral", "f16"}, Case{"mixtral", "q4_k_m"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.arch) + "_" + i.param.quant;
                         });

}  // namespace
}  // namespace ms::cuda::test
