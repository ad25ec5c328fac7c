// The CUDA backend on qwen35moe (Qwen3.5/3.6-MoE: Gated DeltaNet layers,
// output-gated attention with partial RoPE and q/k norm, routed experts plus
// a sigmoid-gated shared expert) against the CPU backend on the tiny preset
// (3 Gated DeltaNet layers, 1 attention layer, 16 experts top 4):
//  - logits of every position of prompts of 1, 63, 64, 65 tokens (the CPU's
//    chunk edges: its prompts run the chunked delta rule, the GPU's the
//    token-by-token recurrence) and of decode steps after them, within the
//    tolerance of backend_forward_test.cpp (5% of the logits' RMS), and at
//    f32 weights with the f32 KV cache much closer;
//  - greedy 32 tokens identical at f16;
//  - the recurrent state: batched prefill = token by token, graph replay =
//    direct launches (and a graph is captured), a new sequence starts from a
//    zero state, the cache cannot rewind;
//  - tiered experts (--vram) at the minimum budget, in lockstep with the
//    all-resident run (as tests/cuda/hybrid_test.cpp does).
// Every comparison prints its numbers, so a failure says by how much.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/cpu_backend.h"
#include "engine/sampler.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "tiny_models.h"

namespace ms::cuda::test {
namespace {

constexpr double kRelTol = 0.05;  // backend_forward_test.cpp's CPU-vs-GPU bound
// Quantized weights: the CPU rounds K-quant activations per 256 elements,
// the GPU per 32, and the Gated DeltaNet state carries each position's
// difference into every later one (attention-only models do not add it up
// like this). Measured on the H100: up to 8.3e-2 past position 57 of a
// 63-65 token prompt, 1.2-2.6e-2 before and in decode.
constexpr double kQuantRecurrentTol = 0.12;
// f32 weights and an f32 KV cache: nothing rounds on either side, the two
// differ by float reassociation (and the CPU's chunked vs the GPU's
// token-by-token delta rule); a wrong formula is off by far more.
constexpr double kF32Tol = 1e-3;
constexpr int kCtx = 256;

struct Diff {
  double max_abs = 0, rms_ref = 0;
  size_t worst = 0;  // index of the largest difference
  double rel() const { return rms_ref > 0 ? max_abs / rms_ref : max_abs; }
};

Diff compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  EXPECT_EQ(got.size(), ref.size());
  double ss = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(e <= d.max_abs)) {
      d.max_abs = std::isnan(e) ? INFINITY : e;
      d.worst = i;
    }
    ss += static_cast<double>(ref[i]) * ref[i];
  }
  d.rms_ref = ref.empty() ? 0 : std::sqrt(ss / ref.size());
  return d;
}

std::string describe(const Diff& d, int64_t n_vocab) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "max |gpu-cpu| %.6f (position %lld, token %lld), rms(cpu) %.4f, rel %.2e", d.max_abs,
                static_cast<long long>(d.worst / n_vocab), static_cast<long long>(d.worst % n_vocab), d.rms_ref,
                d.rel());
  return buf;
}

const LoadedModel& q35(const std::string& quant) { return tiny_model("qwen35moe", quant); }

struct Case {
  const char* quant;
  bool kv_f32;
  double tol;
};

class Qwen35CudaVsCpu : public ::testing::TestWithParam<Case> {};

// Each prompt length in a fresh sequence (all positions' logits), then 4
// decode steps (the captured graph), every one compared with the CPU's.
TEST_P(Qwen35CudaVsCpu, PromptsAtTheChunkEdgesThenDecode) {
  MS_REQUIRE_GPU();
  const Case& tc = GetParam();
  const LoadedModel& m = q35(tc.quant);
  const int64_t V = m.weights.cfg.n_vocab;
  const KvType kt = tc.kv_f32 ? KvType::F32 : KvType::F16;
  CpuBackend cpu(m.weights, pool());
  CudaBackend gpu(m.weights, CudaBackend::Options{.ctx = kCtx, .kv_f32 = tc.kv_f32});
  for (int n : {1, 63, 64, 65}) {
    KvCache kc = cpu.make_cache(kCtx, kt), kg = gpu.make_cache(kCtx, kt);
    const std::vector<int32_t> prompt = some_tokens(n, V, 1000 + n);
    std::vector<float> lc, lg;
    cpu.forward(kc, prompt, lc, true);
    gpu.forward(kg, prompt, lg, true);
    const Diff d = compare(lg, lc);
    std::printf("[ qwen35moe %s kv %s ] prompt %2d: %s\n", tc.quant, kv_type_name(kt), n, describe(d, V).c_str());
    EXPECT_LE(d.rel(), tc.tol) << tc.quant << " prompt of " << n << ": " << describe(d, V);
    for (int step = 0; step < 4; ++step) {
      const int32_t next = argmax(lc.data() + (lc.size() - V), static_cast<int32_t>(V));
      cpu.forward(kc, std::span<const int32_t>(&next, 1), lc);
      gpu.forward(kg, std::span<const int32_t>(&next, 1), lg);
      const Diff s = compare(lg, lc);
      std::printf("[ qwen35moe %s kv %s ] prompt %2d, decode step %d: %s\n", tc.quant, kv_type_name(kt), n, step,
                  describe(s, V).c_str());
      EXPECT_LE(s.rel(), tc.tol) << tc.quant << " prompt of " << n << ", decode step " << step << ": "
                                 << describe(s, V);
    }
    EXPECT_EQ(kg.n_past(), n + 4);
  }
  EXPECT_GE(gpu.graph_captures(), 1) << "decode should replay a captured graph for qwen35moe";
}

INSTANTIATE_TEST_SUITE_P(Quants, Qwen35CudaVsCpu,
                         ::testing::Values(Case{"f32", true, kF32Tol}, Case{"f32", false, kRelTol},
                                           Case{"f16", false, kRelTol}, Case{"q4_k_m", false, kQuantRecurrentTol}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.quant) + (i.param.kv_f32 ? "_kvf32" : "_kvf16");
                         });

// Float weights: the two backends pick the same 32 tokens, full stop.
TEST(Qwen35Cuda, GreedyF16TokensEqualCpu) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = q35("f16");
  CpuBackend cpu(m.weights, pool());
  CudaBackend gpu(m.weights, CudaBackend::Options{.ctx = 128});
  for (int n : {8, 65}) {
    const std::vector<int32_t> prompt = some_tokens(n, m.weights.cfg.n_vocab, 7 + n);
    const std::vector<int32_t> a = greedy(cpu, prompt, 32, 128), b = greedy(gpu, prompt, 32, 128);
    size_t first = 0;
    while (first < a.size() && first < b.size() && a[first] == b[first]) ++first;
    EXPECT_EQ(a, b) << "prompt of " << n << ": the sequences part at step " << first;
  }
}

// Batched prefill (conv and recurrence over many tokens per launch, tensor-
// core projections) = the same tokens one decode step at a time, at f32
// weights and KV (float reassociation only); across a batch split too
// (max_batch 40: 65 tokens run as 40 + 25, the state carried between).
TEST(Qwen35Cuda, PrefillMatchesTokenByToken) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = q35("f32");
  const int64_t V = m.weights.cfg.n_vocab;
  const std::vector<int32_t> toks = some_tokens(65, V, 3);
  CudaBackend whole(m.weights, CudaBackend::Options{.ctx = 128, .kv_f32 = true});
  CudaBackend split(m.weights, CudaBackend::Options{.ctx = 128, .max_batch = 40, .kv_f32 = true});
  std::vector<float> batch, halves, one, steps;
  {
    KvCache kv = whole.make_cache(128, KvType::F32);
    whole.forward(kv, toks, batch, true);
  }
  {
    KvCache kv = split.make_cache(128, KvType::F32);
    split.forward(kv, toks, halves, true);
  }
  KvCache kv = whole.make_cache(128, KvType::F32);
  for (int32_t t : toks) {
    whole.forward(kv, std::span<const int32_t>(&t, 1), one);
    steps.insert(steps.end(), one.begin(), one.end());
  }
  const Diff d = compare(batch, steps), h = compare(halves, batch);
  std::printf("qwen35moe prefill vs token by token: %s\n", describe(d, V).c_str());
  std::printf("qwen35moe prefill in 40 + 25 vs one batch: %s\n", describe(h, V).c_str());
  EXPECT_LE(d.rel(), 1e-4) << describe(d, V);
  EXPECT_LE(h.rel(), 1e-4) << describe(h, V);
}

// The decode graph holds the recurrent state's addresses: replaying it gives
// the direct launches' logits bit for bit, step after step.
TEST(Qwen35Cuda, GraphReplayMatchesDirectLaunches) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = q35("q4_k_m");
  CudaBackend with(m.weights, CudaBackend::Options{.ctx = 128});
  CudaBackend without(m.weights, CudaBackend::Options{.ctx = 128, .use_graph = false});
  expect_identical_decode(with, without, some_tokens(20, m.weights.cfg.n_vocab, 5), 40, 128);
  if (HasFatalFailure()) return;
  EXPECT_EQ(with.graph_captures(), 1);
  EXPECT_EQ(without.graph_captures(), 0);
}

// The device holds one sequence: a new one (position 0) starts from a zero
// recurrent state, whatever ran before; the host cache refuses to rewind a
// recurrent state (keep all or none), and truncating to 0 starts over.
TEST(Qwen35Cuda, NewSequenceStartsFromZeroStateAndCannotRewind) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = q35("f16");
  const int64_t V = m.weights.cfg.n_vocab;
  CudaBackend gpu(m.weights, CudaBackend::Options{.ctx = 128});
  const std::vector<int32_t> a = some_tokens(30, V, 41), b = some_tokens(12, V, 42);
  std::vector<float> fresh, after, logits;
  {
    CudaBackend clean(m.weights, CudaBackend::Options{.ctx = 128});
    KvCache kv = clean.make_cache(128);
    clean.forward(kv, b, fresh, true);
  }
  {
    KvCache kv = gpu.make_cache(128);
    gpu.forward(kv, a, logits);
    const int32_t t = 5;
    gpu.forward(kv, std::span<const int32_t>(&t, 1), logits);
  }
  KvCache kv = gpu.make_cache(128);
  gpu.forward(kv, b, after, true);
  EXPECT_EQ(after, fresh) << "a new sequence after another: " << describe(compare(after, fresh), V);
  EXPECT_TRUE(kv.has_recurrent());
  EXPECT_FALSE(kv.can_truncate_to(4));
  EXPECT_THROW(kv.truncate(4), Error);
  EXPECT_EQ(kv.n_past(), 12);
  kv.truncate(0);
  std::vector<float> again;
  gpu.forward(kv, b, again, true);
  EXPECT_EQ(again, fresh) << "truncate(0), then the same prompt: " << describe(compare(again, fresh), V);
}

// --vram at the minimum budget: every routed expert tiered (slots, PCIe,
// CPU), the shared expert and the Gated DeltaNet weights resident. Lockstep
// against the all-resident run (hybrid_test.cpp's rule: a different pick only
// at a near-tie of the reference), and every position's logits of a 65-token
// prompt and 4 decode steps within the backends' tolerance.
TEST(Qwen35Cuda, HybridAtTheMinimumBudgetMatchesAllResident) {
  MS_REQUIRE_GPU();
  constexpr double kTieTol = 0.02;
  for (const char* quant : {"f16", "q4_k_m"}) {
    const LoadedModel& m = q35(quant);
    const int64_t V = m.weights.cfg.n_vocab;
    const VramPlan need = vram_needs(split_weights(*m.file), inspect_hparams(*m.file), kCtx);
    CudaBackend::Options full;
    full.ctx = kCtx;
    full.vram_full = true;
    CudaBackend::Options tight;
    tight.ctx = kCtx;
    tight.vram_budget = need.minimum_bytes;
    tight.tiered.pool = &pool();
    CudaBackend ref(m.weights, full), be(m.weights, tight);
    ASSERT_FALSE(ref.expert_telemetry().hybrid);
    {
      KvCache kr = ref.make_cache(kCtx), kb = be.make_cache(kCtx);
      std::vector<float> lr, lb;
      const std::vector<int32_t> prompt = some_tokens(65, V, 77);
      ref.forward(kr, prompt, lr, true);
      be.forward(kb, prompt, lb, true);
      Diff d = compare(lb, lr);
      std::printf("[ qwen35moe %s ] hybrid at %llu KiB, prompt 65: %s\n", quant,
                  static_cast<unsigned long long>(need.minimum_bytes >> 10), describe(d, V).c_str());
      EXPECT_LE(d.rel(), kRelTol) << quant << " prompt: " << describe(d, V);
      for (int step = 0; step < 4; ++step) {
        const int32_t next = argmax(lr.data() + (lr.size() - V), static_cast<int32_t>(V));
        ref.forward(kr, std::span<const int32_t>(&next, 1), lr);
        be.forward(kb, std::span<const int32_t>(&next, 1), lb);
        d = compare(lb, lr);
        EXPECT_LE(d.rel(), kRelTol) << quant << " decode step " << step << ": " << describe(d, V);
      }
    }
    const std::vector<int32_t> prompt = some_tokens(20, V, 11);
    KvCache kr = ref.make_cache(kCtx), kb = be.make_cache(kCtx);
    std::vector<float> lr, lb;
    ref.forward(kr, prompt, lr);
    be.forward(kb, prompt, lb);
    int same = 0;
    for (int i = 0; i < 32; ++i) {
      const int32_t a = argmax(lr.data(), static_cast<int32_t>(V)), b = argmax(lb.data(), static_cast<int32_t>(V));
      if (a == b) {
        ++same;
      } else {
        const double margin = (lr[a] - lr[b]) / compare(lr, lr).rms_ref;
        std::printf("[ qwen35moe %s ] hybrid step %d: picks %d not %d, reference margin %.5f x rms\n", quant, i, b, a,
                    margin);
        EXPECT_LE(margin, kTieTol) << quant << " step " << i << " picks " << b << " not " << a
                                   << " with a clear margin";
      }
      ref.forward(kr, std::span<const int32_t>(&a, 1), lr);
      be.forward(kb, std::span<const int32_t>(&a, 1), lb);
    }
    std::printf("[ qwen35moe %s ] hybrid lockstep: %d/32 identical\n", quant, same);
    EXPECT_GE(same, 28) << quant;
    const ExpertTelemetry t = be.expert_telemetry();
    EXPECT_TRUE(t.hybrid) << quant;
    EXPECT_GT(t.all().total(), 0u) << quant;
    EXPECT_LE(t.cache_slots, t.experts_total) << quant;
  }
}

}  // namespace
}  // namespace ms::cuda::test
