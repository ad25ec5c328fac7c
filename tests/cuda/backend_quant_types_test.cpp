// The whole forward pass on the GPU against the CPU backend for each weight
// type read through the sub-block decoders (Q4_1 ... IQ1_M): the tiny q8_0
// qwen3moe model with every routed expert matrix re-quantized to that type
// in memory (dequantize_row_ref, then the reference quantizer), logits of a
// batched prompt (int8 GEMM path), a short prompt (matvec path) and decode
// steps (fused MoE decode kernels); all experts resident, and tiered under a
// VRAM budget (slot table, PCIe streaming, CPU experts).
//
// Tolerance: both backends quantize activations to int8 (CPU per 32 or 256,
// GPU per 32), so logits differ by rounding; and the odd token differs by
// 10-20% of its logits' RMS (taken for a routing flip at a near-tie of the
// tiny random router; on the H100: 0-3 of the 47 positions per type, median
// 0.8-1.2%). So per position p, rel_p = max |gpu - cpu| / RMS of
// the CPU's logits; the median of rel_p must be under 2.5% and 85% of the
// positions under 5%. A wrong decoder puts every position at the order of
// the logits themselves (rel_p ~ 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/cpu_backend.h"
#include "experts/telemetry.h"
#include "format/gguf.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "quant/quant.h"
#include "tiny_models.h"

namespace ms::cuda::test {
namespace {

constexpr double kRelTol = 0.05, kMedianTol = 0.025;

// rel_p of each of the n positions of two [n][V] logit blocks.
std::vector<double> position_rel(const std::vector<float>& got, const std::vector<float>& ref, int n) {
  EXPECT_EQ(got.size(), ref.size());
  std::vector<double> rel;
  const size_t V = ref.size() / static_cast<size_t>(n);
  for (int p = 0; p < n && got.size() == ref.size(); ++p) {
    double max_abs = 0, ss = 0;
    for (size_t i = p * V; i < (p + 1) * V; ++i) {
      const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
      if (!(e <= max_abs)) max_abs = std::isnan(e) ? INFINITY : e;
      ss += static_cast<double>(ref[i]) * ref[i];
    }
    const double rms = std::sqrt(ss / static_cast<double>(V));
    rel.push_back(rms > 0 ? max_abs / rms : max_abs);
  }
  return rel;
}

// `src` with its routed experts re-quantized to t; owns the new matrices.
struct RequantizedModel {
  ModelWeights w;
  std::vector<std::vector<uint8_t>> mats;
};
std::unique_ptr<RequantizedModel> requantize_experts(const ModelWeights& src, DType t) {
  auto m = std::make_unique<RequantizedModel>();
  m->w = src;
  auto convert = [&](std::vector<const uint8_t*>& mats, DType& type, int64_t rows, int64_t cols) {
    const DType from = type;
    const int64_t rb_from = row_bytes(from, cols), rb_to = row_bytes(t, cols);
    for (const uint8_t*& p : mats) {
      std::vector<uint8_t> out(static_cast<size_t>(rb_to * rows));
      const uint8_t* in = p;
      pool().parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        std::vector<float> f(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
          dequantize_row_ref(from, in + r * rb_from, f.data(), cols);
          quantize_row_ref(t, f.data(), out.data() + r * rb_to, cols);
        }
      });
      m->mats.push_back(std::move(out));
      p = m->mats.back().data();
    }
    type = t;
  };
  for (LayerWeights& L : m->w.layers) {
    ExpertWeights& e = L.experts;
    if (e.n_expert == 0) continue;
    convert(e.gate_, e.gate_type, e.n_ff, e.n_embd);
    convert(e.up_, e.up_type, e.n_ff, e.n_embd);
    convert(e.down_, e.down_type, e.n_embd, e.n_ff);
  }
  return m;
}

// Logits of a 40-token prompt (the int8 GEMM), 5 tokens (grouped matvec)
// and two decode steps (fused MoE decode kernels) of `gpu` against `cpu`,
// judged per position (see the header comment).
void expect_logits_close(Backend& cpu, Backend& gpu, int64_t n_vocab, const std::string& what) {
  KvCache kv_c = cpu.make_cache(128), kv_g = gpu.make_cache(128);
  std::vector<double> rel;
  int step = 0;
  for (int n : {40, 5, 1, 1}) {
    const std::vector<int32_t> toks = some_tokens(n, n_vocab, 300 + step++);
    std::vector<float> lc, lg;
    cpu.forward(kv_c, toks, lc, true);
    gpu.forward(kv_g, toks, lg, true);
    const auto r = position_rel(lg, lc, n);
    rel.insert(rel.end(), r.begin(), r.end());
  }
  ASSERT_EQ(rel.size(), 47u);
  std::vector<double> sorted = rel;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const auto within = std::count_if(rel.begin(), rel.end(), [](double r) { return r <= kRelTol; });
  std::printf("[ %s ] rel per position: median %.4f, worst %.4f, %d/%zu within %.2f\n", what.c_str(), median,
              sorted.back(), static_cast<int>(within), rel.size(), kRelTol);
  EXPECT_LE(median, kMedianTol) << what;
  EXPECT_GE(static_cast<double>(within), 0.85 * static_cast<double>(rel.size())) << what;
}

class CudaBackendQuantType : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaBackendQuantType, LogitsMatchCpu) {
  MS_REQUIRE_GPU();
  const std::string quant = GetParam();
  const DType t = parse_type(quant);
  const auto m = requantize_experts(tiny_model("qwen3moe", "q8_0").weights, t);
  ASSERT_FALSE(m->w.layers.empty());
  ASSERT_EQ(m->w.layers[0].experts.gate_type, t);
  CpuBackend cpu(m->w, pool());
  CudaBackend::Options o;
  o.ctx = 128;
  o.vram_full = true;
  CudaBackend gpu(m->w, o);
  expect_logits_close(cpu, gpu, m->w.cfg.n_vocab, "experts " + quant + ", all resident");
}

// Tiered experts (the VRAM budget of the dense weights alone, as the file's
// q8_0 sizes count them): cold experts either all on the CPU (which rounds
// activations as the GPU does) or all streamed over PCIe into slots and read
// through the slot table by the same kernels; the cost figures force the tier,
// the telemetry shows it was taken (as hybrid_test.cpp's tier modes).
TEST_P(CudaBackendQuantType, TieredExpertsMatchCpu) {
  MS_REQUIRE_GPU();
  const std::string quant = GetParam();
  const LoadedModel& base = tiny_model("qwen3moe", "q8_0");
  const auto m = requantize_experts(base.weights, parse_type(quant));
  const VramPlan p = vram_needs(split_weights(*base.file), inspect_hparams(*base.file), 128);
  CpuBackend cpu(m->w, pool());
  for (const bool on_cpu : {true, false}) {
    CudaBackend::Options o;
    o.ctx = 128;
    o.vram_budget = p.minimum_bytes;
    o.tiered.pool = &pool();
    o.tiered.step.cost = CostOverrides::parse(on_cpu ? "pcie_gbps=0.0001" : "cpu_gbps=0.0001");
    CudaBackend gpu(m->w, o);
    const std::string what = "experts " + quant + (on_cpu ? ", tiered, cold on the CPU" : ", tiered, cold streamed");
    expect_logits_close(cpu, gpu, m->w.cfg.n_vocab, what);
    const ExpertTelemetry t = gpu.expert_telemetry();
    EXPECT_TRUE(t.hybrid) << what;
    if (on_cpu) EXPECT_GT(t.all().host, 0u) << what;
    else EXPECT_GT(t.all().streamed, 0u) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaBackendQuantType,
                         ::testing::Values("q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "tq1_0", "tq2_0", "iq4_nl",
                                           "iq4_xs", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s",
                                           "iq1_m"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace
}  // namespace ms::cuda::test
