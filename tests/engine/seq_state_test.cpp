// Sequence state that can be rolled back and forked (DESIGN.md), on the CPU:
// the checkpoint bookkeeping (which positions are kept, which go when room
// is needed), and on tiny qwen35moe (Gated DeltaNet + attention) and
// qwen3moe models: a rollback to every position of a 64-token run, then
// decoding, equals a fresh run (K/V rows and recurrent state bit-equal, the
// logits too); a fork goes on from the same state without touching the
// original; token states kept by one batch give back every position.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/kv_cache.h"
#include "engine/loaded_model.h"
#include "engine/state_checkpoints.h"
#include "engine/synthetic_model.h"
#include "tiny_gguf.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- bookkeeping

TEST(StateCheckpoints, ReserveFindAndAtOrBelow) {
  StateCheckpoints c({3, 4});
  EXPECT_EQ(c.capacity(), 3);
  EXPECT_EQ(c.find(5), -1);
  EXPECT_EQ(c.at_or_below(100), -1);
  EXPECT_EQ(c.reserve(0), -1) << "position 0 is the zero state, never stored";
  const int a = c.reserve(5), b = c.reserve(9);
  EXPECT_GE(a, 0);
  EXPECT_GE(b, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(c.reserve(5), a) << "a position already held keeps its entry";
  EXPECT_EQ(c.find(9), b);
  EXPECT_EQ(c.at_or_below(8), 5);
  EXPECT_EQ(c.at_or_below(9), 9);
  EXPECT_EQ(c.at_or_below(4), -1);
  c.drop_after(6);
  EXPECT_EQ(c.positions(), (std::vector<int64_t>{5}));
  c.clear();
  EXPECT_TRUE(c.positions().empty());
  EXPECT_THROW(StateCheckpoints({-1, 4}), Error);
  EXPECT_THROW(StateCheckpoints({2, 0}), Error);
}

TEST(StateCheckpoints, EvictionKeepsPositionsSpreadAndSparesTheCurrentForward) {
  StateCheckpoints c({4, 1});
  // A prompt's end, then decode steps one by one.
  for (int64_t p : {100, 101, 102, 103}) {
    c.begin_forward();
    ASSERT_GE(c.reserve(p), 0);
  }
  c.begin_forward();
  ASSERT_GE(c.reserve(104), 0);
  // The dense run of decode positions gives one up; the prompt's end stays.
  const auto kept = c.positions();
  EXPECT_EQ(kept.front(), 100);
  EXPECT_EQ(kept.back(), 104);
  EXPECT_EQ(kept.size(), 4u);
  // Entries taken by the current forward are never evicted for it.
  StateCheckpoints v({3, 1});
  v.begin_forward();
  EXPECT_GE(v.reserve(1), 0);
  EXPECT_GE(v.reserve(2), 0);
  EXPECT_GE(v.reserve(3), 0);
  EXPECT_EQ(v.reserve(4), -1) << "every entry belongs to this forward";
  EXPECT_EQ(v.positions(), (std::vector<int64_t>{1, 2, 3}));
}

TEST(StateCheckpoints, DueAfterPromptsAlwaysAndAfterDecodeBySpacing) {
  StateCheckpoints c({2, 8});
  EXPECT_TRUE(c.due(20, 20)) << "a prompt's end";
  c.reserve(20);
  EXPECT_FALSE(c.due(21, 1));
  EXPECT_FALSE(c.due(27, 1));
  EXPECT_TRUE(c.due(28, 1));
  StateCheckpoints none({0, 8});
  EXPECT_FALSE(none.due(20, 20)) << "no capacity, no checkpoint";
}

// ---------------------------------------------------------------- on the models

// Tiny models generated once per run.


// The first n positions' K/V rows of every attention layer, and the live
// recurrent state, as bytes: what "the same sequence state" means.
std::vector<uint8_t> state_bytes(KvCache& kv, const ModelConfig& c, int64_t n) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + bytes);
  };
  const size_t row = static_cast<size_t>(kv_row_bytes(kv.type(), c.head_dim));
  for (int il = 0; il < c.n_layer; ++il) {
    if (kv.is_recurrent(il)) {
      put(kv.conv_state(il), sizeof(float) * static_cast<size_t>(kv.conv_elems()));
      put(kv.delta_state(il), sizeof(float) * static_cast<size_t>(kv.state_elems()));
      continue;
    }
    const auto* k = reinterpret_cast<const uint8_t*>(kv.k_f16(il));
    const auto* v = reinterpret_cast<const uint8_t*>(kv.v_f16(il));
    for (int h = 0; h < c.n_head_kv; ++h) {
      const size_t off = static_cast<size_t>(h) * static_cast<size_t>(kv.ctx()) * row;
      put(k + off, row * static_cast<size_t>(n));
      put(v + off, row * static_cast<size_t>(n));
    }
  }
  return out;
}

struct TinyRun {
  std::unique_ptr<LoadedModel> m;
  ThreadPool pool{2};
  std::unique_ptr<CpuBackend> be;
  explicit TinyRun(const std::string& arch, const std::string& quant = "q8_0")
      : m(LoadedModel::open(test::tiny_gguf(arch, quant, 23))) {
    be = std::make_unique<CpuBackend>(m->weights, pool);
  }
  const ModelConfig& cfg() const { return m->weights.cfg; }
  // One decode step per token; the logits of the last.
  std::vector<float> decode(KvCache& kv, std::span<const int32_t> toks) {
    std::vector<float> logits;
    for (int32_t t : toks) be->forward(kv, std::span<const int32_t>(&t, 1), logits);
    return logits;
  }
};

constexpr int kRun = 64;

class RollbackEveryPosition : public ::testing::TestWithParam<const char*> {};

TEST_P(RollbackEveryPosition, ThenDecodingEqualsAFreshRun) {
  TinyRun r(GetParam());
  const auto toks = test::random_tokens(kRun + 3, 7);
  // The long run: 64 decode steps, a checkpoint after each (spacing 1).
  KvCache run = r.be->make_cache(128);
  run.set_checkpoints({kRun, 1});
  r.decode(run, std::span<const int32_t>(toks.data(), kRun));
  ASSERT_EQ(run.n_past(), kRun);
  KvCache back = r.be->make_cache(128);
  back.set_checkpoints({kRun, 1});
  for (int p = 1; p < kRun; ++p) {
    ASSERT_TRUE(run.can_truncate_to(p)) << p;
    r.be->fork(run, back);
    back.truncate(p);
    EXPECT_EQ(back.n_past(), p);
    KvCache fresh = r.be->make_cache(128);
    r.decode(fresh, std::span<const int32_t>(toks.data(), static_cast<size_t>(p)));
    ASSERT_EQ(state_bytes(back, r.cfg(), p), state_bytes(fresh, r.cfg(), p)) << "the state at position " << p;
    // Decoding on from there: other tokens than the run had next.
    const auto next = test::random_tokens(3, 100 + static_cast<uint32_t>(p));
    EXPECT_EQ(r.decode(back, next), r.decode(fresh, next)) << "decoding after a rollback to " << p;
  }
  // The run itself is untouched by the forks.
  KvCache fresh = r.be->make_cache(128);
  r.decode(fresh, std::span<const int32_t>(toks.data(), kRun));
  EXPECT_EQ(state_bytes(run, r.cfg(), kRun), state_bytes(fresh, r.cfg(), kRun));
  // In place: the run goes back to 10, and on.
  run.truncate(10);
  KvCache ten = r.be->make_cache(128);
  r.decode(ten, std::span<const int32_t>(toks.data(), 10));
  EXPECT_EQ(r.decode(run, std::span<const int32_t>(toks.data() + 10, 3)),
            r.decode(ten, std::span<const int32_t>(toks.data() + 10, 3)));
}

INSTANTIATE_TEST_SUITE_P(Archs, RollbackEveryPosition, ::testing::Values("qwen35moe", "qwen3moe"));

TEST(SeqState, TokenStatesOfOneBatchGiveBackEveryPosition) {
  // A verify-like batch: 12 tokens in one forward, the state after each kept.
  // Its recurrence runs token by token as decode does; only the batched
  // projections round differently, so the check is a tight tolerance.
  TinyRun r("qwen35moe", "f32");
  const auto toks = test::random_tokens(20, 9);
  KvCache kv = r.be->make_cache(64);
  kv.set_checkpoints({16, 256});
  std::vector<float> logits;
  r.be->forward(kv, std::span<const int32_t>(toks.data(), 8), logits);
  kv.keep_token_states();
  r.be->forward(kv, std::span<const int32_t>(toks.data() + 8, 12), logits);
  EXPECT_FALSE(kv.token_states_wanted()) << "cleared after the forward";
  for (int p = 9; p <= 20; ++p) EXPECT_TRUE(kv.can_truncate_to(p)) << p;
  for (int p : {9, 14, 19}) {
    KvCache back = r.be->make_cache(64);
    back.set_checkpoints({16, 256});
    r.be->fork(kv, back);
    back.truncate(p);
    KvCache fresh = r.be->make_cache(64);
    r.decode(fresh, std::span<const int32_t>(toks.data(), static_cast<size_t>(p)));
    const int32_t next = 42;
    const auto a = r.decode(back, std::span<const int32_t>(&next, 1));
    const auto b = r.decode(fresh, std::span<const int32_t>(&next, 1));
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    }
    EXPECT_LT(worst, 1e-4 * scale) << "rolled back to " << p;
  }
}

TEST(SeqState, ForkThenDivergeLeavesTheSourceAlone) {
  TinyRun r("qwen35moe");
  const auto toks = test::random_tokens(30, 5);
  KvCache a = r.be->make_cache(64);
  r.decode(a, std::span<const int32_t>(toks.data(), 20));
  KvCache b = r.be->make_cache(64);
  r.be->fork(a, b);
  EXPECT_EQ(b.n_past(), 20);
  EXPECT_EQ(state_bytes(a, r.cfg(), 20), state_bytes(b, r.cfg(), 20));
  // b goes its own way; a then decodes as if b never existed.
  r.decode(b, std::span<const int32_t>(toks.data() + 20, 5));
  KvCache ref = r.be->make_cache(64);
  r.decode(ref, std::span<const int32_t>(toks.data(), 20));
  const std::vector<int32_t> next = {3, 1, 4};
  EXPECT_EQ(r.decode(a, next), r.decode(ref, next));
  // A fork across contexts is refused.
  KvCache small = r.be->make_cache(32);
  EXPECT_THROW(r.be->fork(a, small), Error);
}

TEST(SeqState, RecurrentCacheRefusesPositionsWithoutACheckpoint) {
  TinyRun r("qwen35moe");
  const auto toks = test::random_tokens(40, 3);
  KvCache kv = r.be->make_cache(64);
  kv.set_checkpoints({2, 8});
  std::vector<float> logits;
  r.be->forward(kv, std::span<const int32_t>(toks.data(), 16), logits);  // a prompt: checkpoint at 16
  r.decode(kv, std::span<const int32_t>(toks.data() + 16, 10));           // decode: one at 24 (spacing 8)
  EXPECT_EQ(kv.checkpoints().positions(), (std::vector<int64_t>{16, 24}));
  EXPECT_TRUE(kv.can_truncate_to(16));
  EXPECT_FALSE(kv.can_truncate_to(20));
  EXPECT_EQ(kv.restorable_at_or_below(20), 16);
  EXPECT_EQ(kv.restorable_at_or_below(100), 26);
  EXPECT_THROW(kv.truncate(20), Error);
  kv.truncate(16);
  EXPECT_EQ(kv.checkpoints().positions(), (std::vector<int64_t>{16})) << "checkpoints past 16 are stale";
  KvCache fresh = r.be->make_cache(64);
  r.be->forward(fresh, std::span<const int32_t>(toks.data(), 16), logits);
  EXPECT_EQ(state_bytes(kv, r.cfg(), 16), state_bytes(fresh, r.cfg(), 16));
}

}  // namespace
}  // namespace ms
