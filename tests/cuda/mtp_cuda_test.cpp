// --spec mtp on the CUDA backend (tiny qwen35moe, which carries an MTP block):
// the hidden rows forward() hands the hook (copied back from the device and
// normed on the host) against the CPU backend's, a prompt batch and decode
// steps alike; greedy generation through MtpDrafter gives plain decoding's
// tokens at full residency and at a tiered budget (token-state rollback: a
// hybrid's verify runs through the decode step on CUDA, so it is exact; replay
// batches the verify, whose rounding may part from decode's at a near-tie); the block's logits (its layer on the host, its head on the device:
// cuda_backend.h) against the CPU backend's; forward_seqs' hidden rows (the
// server's batched steps) against forward()'s.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/speculative_mtp.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "tiny_models.h"

namespace ms::cuda::test {
namespace {

// The hook's rows for a prompt of 9 tokens and 3 decode steps after it.
std::vector<float> hidden_rows(Backend& be, const std::vector<int32_t>& toks) {
  KvCache kv = be.make_cache(64);
  std::vector<float> rows, logits;
  be.set_hidden_hook([&](const HiddenEvent& e) {
    EXPECT_EQ(e.kv, &kv);
    EXPECT_EQ(e.pos0 * be.config().n_embd, static_cast<int64_t>(rows.size()));
    rows.insert(rows.end(), e.rows, e.rows + e.n * be.config().n_embd);
  });
  be.forward(kv, std::span<const int32_t>(toks.data(), 9), logits);
  for (size_t i = 9; i < toks.size(); ++i) be.forward(kv, std::span<const int32_t>(&toks[i], 1), logits);
  be.set_hidden_hook(nullptr);
  return rows;
}

TEST(CudaMtp, HiddenRowsAreTheCpus) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen35moe", "f32");
  CudaBackend gpu(m.weights, CudaBackend::Options{.ctx = 64, .kv_f32 = true});
  ThreadPool pool(2);
  CpuBackend cpu(m.weights, pool);
  ASSERT_TRUE(gpu.supports_mtp());
  const auto toks = some_tokens(12, m.weights.cfg.n_vocab, 3);
  const auto a = hidden_rows(gpu, toks), b = hidden_rows(cpu, toks);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), toks.size() * static_cast<size_t>(m.weights.cfg.n_embd));
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  EXPECT_LT(worst / scale, 1e-3);
}

// forward_seqs hands the hook every entry's rows (issue #42: `serve --spec
// mtp` on CUDA): two sequences' prompt chunks, decode tokens and a verify-
// shaped entry in multi-sequence passes, against forward() of the same
// tokens in the same chunks into caches of their own. The batched pass and
// forward()'s passes round differently (different kernels), hence the
// tolerance; a row handed to the wrong sequence or position is off by far
// more.
TEST(CudaMtp, ForwardSeqsHiddenRowsAreForwards) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen35moe", "f32");
  CudaBackend::Options o{.ctx = 64, .n_seq = 2, .kv_f32 = true};
  CudaBackend gpu(m.weights, o);
  const int64_t D = m.weights.cfg.n_embd;
  const auto ta = some_tokens(12, m.weights.cfg.n_vocab, 5), tb = some_tokens(11, m.weights.cfg.n_vocab, 6);
  // Each step's (first token, count) per sequence: a's 9 + 1 + 2, b's 7 + 3 (all logits) + 1.
  const std::vector<std::pair<size_t, size_t>> steps_a = {{0, 9}, {9, 1}, {10, 2}};
  const std::vector<std::pair<size_t, size_t>> steps_b = {{0, 7}, {7, 3}, {10, 1}};
  std::map<const KvCache*, std::vector<float>> got;
  int events = 0;
  gpu.set_hidden_hook([&](const HiddenEvent& e) {
    std::vector<float>& rows = got[e.kv];
    EXPECT_EQ(e.pos0 * D, static_cast<int64_t>(rows.size())) << "events in position order, none missing";
    rows.insert(rows.end(), e.rows, e.rows + e.n * D);
    ++events;
  });
  std::vector<float> rows_a, rows_b;
  {
    KvCache a = gpu.make_cache(64, KvType::F32), b = gpu.make_cache(64, KvType::F32);
    std::vector<float> logits;
    for (size_t i = 0; i < steps_a.size(); ++i) {
      const std::vector<SeqTokens> step = {
          {&a, std::span<const int32_t>(ta.data() + steps_a[i].first, steps_a[i].second), true},
          {&b, std::span<const int32_t>(tb.data() + steps_b[i].first, steps_b[i].second), true, i == 1}};
      gpu.forward_seqs(step, logits);
    }
    EXPECT_GE(events, 6) << "an event per entry and pass";
    rows_a = got[&a];
    rows_b = got[&b];
  }
  // forward() of the same chunks, each sequence alone.
  auto alone = [&](const std::vector<int32_t>& t, const std::vector<std::pair<size_t, size_t>>& steps) {
    got.clear();
    KvCache kv = gpu.make_cache(64, KvType::F32);
    std::vector<float> logits;
    for (const auto& [first, n] : steps) gpu.forward(kv, std::span<const int32_t>(t.data() + first, n), logits, n > 1);
    return got[&kv];
  };
  const std::vector<float> want_a = alone(ta, steps_a), want_b = alone(tb, steps_b);
  gpu.set_hidden_hook(nullptr);
  auto rel = [](const std::vector<float>& x, const std::vector<float>& y) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(x[i] - y[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
    }
    return x.size() == y.size() && scale > 0 ? worst / scale : 1e30;
  };
  ASSERT_EQ(rows_a.size(), ta.size() * static_cast<size_t>(D));
  ASSERT_EQ(rows_b.size(), tb.size() * static_cast<size_t>(D));
  EXPECT_LT(rel(rows_a, want_a), 1e-3) << "sequence a";
  EXPECT_LT(rel(rows_b, want_b), 1e-3) << "sequence b";
  // The test can tell a mix-up: the two sequences' rows are far apart.
  EXPECT_GT(rel(std::vector<float>(rows_a.begin(), rows_a.begin() + 9 * D),
                std::vector<float>(want_b.begin(), want_b.begin() + 9 * D)),
            1e-2);
}

// The block's logits with the output head on the device against the CPU's,
// from the same hidden rows: a catch-up pass of 8 pairs, then a chained one.
TEST(CudaMtp, BlockLogitsAreTheCpus) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen35moe", "f32");
  CudaBackend gpu(m.weights, CudaBackend::Options{.ctx = 64, .kv_f32 = true});
  ThreadPool pool(2);
  CpuBackend cpu(m.weights, pool);
  const int64_t D = m.weights.cfg.n_embd;
  const auto toks = some_tokens(12, m.weights.cfg.n_vocab, 8);
  const auto rows = hidden_rows(cpu, toks);
  KvCache kg = gpu.make_mtp_cache(64, KvType::F32), kc = cpu.make_mtp_cache(64, KvType::F32);
  std::vector<float> lg, lc, sg, sc;
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    }
    return a.size() == b.size() && scale > 0 ? worst / scale : 1e30;
  };
  const std::span<const float> h8(rows.data(), static_cast<size_t>(8 * D));
  const std::span<const int32_t> t8(toks.data() + 1, 8);
  gpu.forward_mtp(kg, h8, t8, lg, sg);
  cpu.forward_mtp(kc, h8, t8, lc, sc);
  EXPECT_LT(rel(lg, lc), 1e-3) << "catch-up pass";
  EXPECT_LT(rel(sg, sc), 1e-5) << "the state (on the host on both)";
  const int32_t d = 5;
  const std::vector<float> own = sc;
  gpu.forward_mtp(kg, own, std::span<const int32_t>(&d, 1), lg, sg);
  cpu.forward_mtp(kc, own, std::span<const int32_t>(&d, 1), lc, sc);
  EXPECT_LT(rel(lg, lc), 1e-3) << "chained pass";
}

std::vector<int32_t> generate_greedy(Backend& be, const std::vector<int32_t>& prompt, int n, int k,
                                     SpecDecoding::Rollback rollback, bool mtp, SpecStats* stats = nullptr) {
  KvCache kv = be.make_cache(128);
  std::unique_ptr<MtpDrafter> d;
  if (mtp) d = std::make_unique<MtpDrafter>(be, kv);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp);
  GenerateParams gp;
  gp.n_predict = n;
  gp.stop_at_eog = false;
  gp.spec.drafter = d.get();
  gp.spec.control.draft_max = k;
  gp.spec.control.adaptive = false;
  gp.spec.rollback = rollback;
  std::vector<int32_t> out;
  const GenerateStats st = generate(be, kv, sampler, nullptr, prompt, gp, [&](int32_t id) {
    out.push_back(id);
    return true;
  });
  if (stats) *stats = st.spec;
  return out;
}

void expect_greedy_identical(Backend& gpu, int64_t n_vocab) {
  const auto prompt = some_tokens(10, n_vocab, 21);
  const auto plain = generate_greedy(gpu, prompt, 40, 1, SpecDecoding::Rollback::TokenStates, false);
  for (int k : {1, 3, 8}) {
    SpecStats ss;
    EXPECT_EQ(generate_greedy(gpu, prompt, 40, k, SpecDecoding::Rollback::TokenStates, true, &ss), plain)
        << "K = " << k;
    EXPECT_GT(ss.drafted, 0) << "K = " << k;
  }
}

TEST(CudaMtp, GreedyIsPlainDecodingsAtFullResidency) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen35moe", "q8_0");
  CudaBackend::Options o{.ctx = 128};
  o.vram_full = true;
  CudaBackend gpu(m.weights, o);
  expect_greedy_identical(gpu, m.weights.cfg.n_vocab);
}

TEST(CudaMtp, GreedyIsPlainDecodingsTiered) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen35moe", "q8_0");
  ThreadPool pool(2);
  CudaBackend::Options o{.ctx = 128};
  const ModelHParams hp = inspect_hparams(*m.file);
  o.vram_budget = vram_needs(split_weights(*m.file), hp, 128).minimum_bytes + hp.recurrent_state_bytes();
  o.tiered.pool = &pool;
  CudaBackend gpu(m.weights, o);
  ASSERT_TRUE(gpu.expert_telemetry().hybrid);
  expect_greedy_identical(gpu, m.weights.cfg.n_vocab);
}

}  // namespace
}  // namespace ms::cuda::test
