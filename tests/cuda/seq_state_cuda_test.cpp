// Sequence state rollback and fork on the CUDA backend (the device keeps the
// K/V and the Gated DeltaNet state; checkpoints are pinned host copies of a
// slot's recurrent state): on the tiny qwen35moe and qwen3moe models, a
// rollback to every position of a 40-token decode run, then decoding, gives
// the logits a fresh run gives (the same kernels on the same inputs: equal),
// at full residency and with tiered experts; a fork onto a second sequence
// state goes on like the source; token states kept by one batch give back
// each of its positions; the CPU backend's rollback agrees with the GPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/cpu_backend.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "tiny_models.h"

namespace ms::cuda::test {
namespace {

constexpr int kRun = 40;

std::vector<float> decode(Backend& be, KvCache& kv, std::span<const int32_t> toks) {
  std::vector<float> logits;
  for (int32_t t : toks) be.forward(kv, std::span<const int32_t>(&t, 1), logits);
  return logits;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

struct Case {
  const char* arch;
  bool tiered;
};

class CudaRollback : public ::testing::TestWithParam<Case> {};

TEST_P(CudaRollback, EveryPositionThenDecodingEqualsAFreshRun) {
  MS_REQUIRE_GPU();
  const Case cs = GetParam();
  const LoadedModel& m = tiny_model(cs.arch, "q8_0");
  const int64_t V = m.weights.cfg.n_vocab;
  CudaBackend::Options o{.ctx = 128};
  o.n_seq = 3;
  ThreadPool pool(2);
  if (cs.tiered) {  // the minimum budget: every routed expert tiered (slots, PCIe, CPU)
    const ModelHParams hp = inspect_hparams(*m.file);
    o.vram_budget = vram_needs(split_weights(*m.file), hp, 128 * o.n_seq).minimum_bytes +
                    hp.recurrent_state_bytes() * static_cast<uint64_t>(o.n_seq);
    o.tiered.pool = &pool;
  } else {
    o.vram_full = true;
  }
  CudaBackend gpu(m.weights, o);
  ASSERT_EQ(gpu.expert_telemetry().hybrid, cs.tiered);
  const auto toks = some_tokens(kRun, V, 61);
  KvCache run = gpu.make_cache(128);
  run.set_checkpoints({kRun, 1});
  decode(gpu, run, toks);
  KvCache back = gpu.make_cache(128);
  KvCache fresh = gpu.make_cache(128);
  for (int p = 1; p < kRun; p += 3) {
    ASSERT_TRUE(run.can_truncate_to(p)) << p;
    gpu.fork(run, back);
    back.truncate(p);
    fresh.clear();
    decode(gpu, fresh, std::span<const int32_t>(toks.data(), static_cast<size_t>(p)));
    const auto next = some_tokens(3, V, 200 + static_cast<uint32_t>(p));
    const auto a = decode(gpu, back, next), b = decode(gpu, fresh, next);
    EXPECT_EQ(a, b) << "after a rollback to " << p << ": rel " << max_rel(a, b);
  }
  // The run itself was not touched by the forks: back to 7 in place.
  run.truncate(7);
  fresh.clear();
  decode(gpu, fresh, std::span<const int32_t>(toks.data(), 7));
  const auto next = some_tokens(4, V, 77);
  const auto a = decode(gpu, run, next), b = decode(gpu, fresh, next);
  EXPECT_EQ(a, b) << "rel " << max_rel(a, b);
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaRollback,
                         ::testing::Values(Case{"qwen35moe", false}, Case{"qwen3moe", false}, Case{"qwen35moe", true}),
                         [](const auto& i) { return std::string(i.param.arch) + (i.param.tiered ? "_tiered" : ""); });

TEST(CudaSeqState, TokenStatesOfOneBatchAndTheCpuAgree) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen35moe", "f32");
  const int64_t V = m.weights.cfg.n_vocab;
  CudaBackend::Options o{.ctx = 64};
  o.n_seq = 2;
  CudaBackend gpu(m.weights, o);
  ThreadPool pool(2);
  CpuBackend cpu(m.weights, pool);
  const auto toks = some_tokens(20, V, 5);
  KvCache kv = gpu.make_cache(64), ref = cpu.make_cache(64, KvType::F32);
  kv.set_checkpoints({16, 256});
  ref.set_checkpoints({16, 256});
  std::vector<float> lg, lc;
  gpu.forward(kv, std::span<const int32_t>(toks.data(), 8), lg);
  cpu.forward(ref, std::span<const int32_t>(toks.data(), 8), lc);
  kv.keep_token_states();
  ref.keep_token_states();
  gpu.forward(kv, std::span<const int32_t>(toks.data() + 8, 12), lg, true);
  cpu.forward(ref, std::span<const int32_t>(toks.data() + 8, 12), lc, true);
  for (int p : {9, 13, 19}) {
    ASSERT_TRUE(kv.can_truncate_to(p));
    KvCache g2 = gpu.make_cache(64);
    gpu.fork(kv, g2);
    g2.truncate(p);
    KvCache c2 = cpu.make_cache(64, KvType::F32);
    cpu.fork(ref, c2);
    c2.truncate(p);
    const std::vector<int32_t> next = {17, 4};
    const auto a = decode(gpu, g2, next), b = decode(cpu, c2, next);
    EXPECT_LT(max_rel(a, b), 1e-3) << "GPU against CPU after a rollback to " << p;
  }
  // A fork needs two device states.
  CudaBackend one(m.weights, CudaBackend::Options{.ctx = 64});
  KvCache x = one.make_cache(64), y = one.make_cache(64);
  EXPECT_THROW(one.fork(x, y), Error);
}

// A prompt chunk, three decode steps and a verify of four tokens (logits of
// each) in one forward_seqs, against each run alone on the same backend:
// f32 weights and cache, so the batch path (tensor-core projections) and the
// decode path differ by float reassociation only (backend_multi_seq_test's
// f32 bound); then the verify rolls back to two accepted tokens and goes on.
TEST(CudaSeqState, MixedBatchGivesEachSequenceWhatItGetsAlone) {
  MS_REQUIRE_GPU();
  for (const char* arch : {"qwen35moe", "qwen3moe"}) {
    const LoadedModel& m = tiny_model(arch, "f32");
    const int64_t V = m.weights.cfg.n_vocab;
    CudaBackend::Options o{.ctx = 64};
    o.n_seq = 6;  // five sequences and a scratch one for the references
    o.kv_type = KvType::F32;
    CudaBackend gpu(m.weights, o);
    const std::vector<int> history = {0, 5, 11, 17, 9};
    std::vector<KvCache> together, alone;
    std::vector<float> lg;
    for (size_t i = 0; i < history.size(); ++i) together.push_back(gpu.make_cache(32, KvType::F32));
    for (size_t i = 0; i < history.size(); ++i) {
      // alone: the same backend, one sequence state after another (fork's
      // target is a fresh cache per entry, made when needed below).
      together[i].set_checkpoints({8, 256});
      if (history[i] == 0) continue;
      gpu.forward(together[i], some_tokens(history[i], V, 10 + static_cast<uint32_t>(i)), lg);
    }
    const auto chunk = some_tokens(9, V, 1), verify = some_tokens(4, V, 2);
    const std::vector<int32_t> d1 = {7}, d2 = {8}, d3 = {9};
    // The references first: each entry's state forked to a scratch cache and
    // run there alone (the scratch state is then given back).
    const std::vector<std::vector<int32_t>> input = {chunk, d1, d2, d3, verify};
    std::vector<std::vector<float>> want(5);
    for (size_t i = 0; i < 5; ++i) {
      KvCache scratch = gpu.make_cache(32, KvType::F32);
      gpu.fork(together[i], scratch);
      gpu.forward(scratch, input[i], want[i], /*all_logits=*/i == 4);
    }
    together[4].keep_token_states();
    std::vector<SeqTokens> step;
    for (size_t i = 0; i < 5; ++i) step.push_back({&together[i], input[i], true, i == 4});
    std::vector<float> batch;
    gpu.forward_seqs(step, batch);
    ASSERT_EQ(batch.size(), static_cast<size_t>(8 * V));
    double worst = 0;
    for (size_t i = 0; i < 4; ++i) worst = std::max(worst, max_rel(std::vector<float>(batch.begin() + i * V, batch.begin() + (i + 1) * V), want[i]));
    worst = std::max(worst, max_rel(std::vector<float>(batch.begin() + 4 * V, batch.end()), want[4]));
    std::printf("[ %s ] mixed batch against alone: max rel %.3g\n", arch, worst);
    EXPECT_LT(worst, 1e-3);
    // Two drafts accepted.
    together[4].truncate(history[4] + 2);
    auto prefix = some_tokens(history[4], V, 14);
    prefix.insert(prefix.end(), verify.begin(), verify.begin() + 2);
    KvCache fresh = gpu.make_cache(32, KvType::F32);
    gpu.forward(fresh, prefix, lg);
    const std::vector<int32_t> next = {33};
    const auto a = decode(gpu, together[4], next), b = decode(gpu, fresh, next);
    std::printf("[ %s ] after the rollback: rel %.3g\n", arch, max_rel(a, b));
    EXPECT_LT(max_rel(a, b), 1e-3);
  }
}

}  // namespace
}  // namespace ms::cuda::test
