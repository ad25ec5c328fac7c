// One step over a mixed batch (DESIGN.md: one step, any batch of tokens), on
// the CPU: a prompt chunk, decode steps of three sequences and a verify of
// four draft tokens (logits of every one of them) in ONE forward_seqs give
// every sequence the logits it gets alone; then a rollback of the verify to
// its first accepted token goes on like a sequence that never saw the rest.
// qwen35moe (recurrent state per sequence) and qwen3moe.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "tiny_gguf.h"

namespace ms {
namespace {

namespace fs = std::filesystem;



// |a - b| / max|b| over one row of logits.
double rel(const float* a, const float* b, int64_t n) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

class MixedBatch : public ::testing::TestWithParam<const char*> {};

TEST_P(MixedBatch, EverySequenceGetsWhatItGetsAlone) {
  auto m = LoadedModel::open(test::tiny_gguf(GetParam(), "q8_0", 31));
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  const int64_t V = m->weights.cfg.n_vocab;
  // Histories: the prompt's sequence starts empty; three decoders and the
  // verifier have some context already. Each twice: batched and alone.
  const std::vector<int> history = {0, 5, 11, 17, 9};
  std::vector<KvCache> together, alone;
  std::vector<float> lg;
  for (size_t i = 0; i < history.size(); ++i) {
    together.push_back(be.make_cache(64));
    alone.push_back(be.make_cache(64));
    together.back().set_checkpoints({8, 256});
    alone.back().set_checkpoints({8, 256});
    if (history[i] == 0) continue;
    const auto h = test::random_tokens(history[i], 10 + static_cast<uint32_t>(i));
    be.forward(together.back(), h, lg);
    be.forward(alone.back(), h, lg);
  }
  const auto chunk = test::random_tokens(9, 1), verify = test::random_tokens(4, 2);
  const std::vector<int32_t> d1 = {7}, d2 = {8}, d3 = {9};
  together[4].keep_token_states();
  std::vector<SeqTokens> step = {{&together[0], chunk, true, false},
                                 {&together[1], d1, true, false},
                                 {&together[2], d2, true, false},
                                 {&together[3], d3, true, false},
                                 {&together[4], verify, true, true}};
  std::vector<float> batch;
  be.forward_seqs(step, batch);
  ASSERT_EQ(batch.size(), static_cast<size_t>((4 + 4) * V));
  // Alone, one by one.
  std::vector<std::vector<float>> want(4);
  be.forward(alone[0], chunk, want[0]);
  be.forward(alone[1], d1, want[1]);
  be.forward(alone[2], d2, want[2]);
  be.forward(alone[3], d3, want[3]);
  std::vector<float> verify_alone;
  alone[4].keep_token_states();
  be.forward(alone[4], verify, verify_alone, /*all_logits=*/true);
  // The projections run over 16 rows batched and 1-9 alone; each row's
  // products are computed alike, so the bound is float noise.
  constexpr double kTol = 1e-5;
  double worst = 0;
  for (int i = 0; i < 4; ++i) {
    const double r = rel(batch.data() + i * V, want[static_cast<size_t>(i)].data(), V);
    worst = std::max(worst, r);
    EXPECT_LT(r, kTol) << "entry " << i;
  }
  for (int t = 0; t < 4; ++t) {
    const double r = rel(batch.data() + (4 + t) * V, verify_alone.data() + t * V, V);
    worst = std::max(worst, r);
    EXPECT_LT(r, kTol) << "verify token " << t;
  }
  std::printf("[ %s ] mixed batch against alone: max rel %.3g\n", GetParam(), worst);
  // Two of the four drafts accepted: the verifier goes back to them and on.
  const int64_t keep = history[4] + 2;
  together[4].truncate(keep);
  // The oracle replays the accepted tokens (decode steps, as the verify's
  // token states ran its recurrence token by token).
  KvCache fresh = be.make_cache(64);
  be.forward(fresh, test::random_tokens(history[4], 14), lg);
  for (int i = 0; i < 2; ++i) be.forward(fresh, std::span<const int32_t>(&verify[static_cast<size_t>(i)], 1), lg);
  const std::vector<int32_t> next = {33};
  std::vector<float> a, b;
  be.forward(together[4], next, a);
  be.forward(fresh, next, b);
  const double r = rel(a.data(), b.data(), V);
  std::printf("[ %s ] after the rollback: rel %.3g\n", GetParam(), r);
  EXPECT_LT(r, kTol) << "after the rollback of the rejected drafts";
}

INSTANTIATE_TEST_SUITE_P(Archs, MixedBatch, ::testing::Values("qwen35moe", "qwen3moe"));

}  // namespace
}  // namespace ms
