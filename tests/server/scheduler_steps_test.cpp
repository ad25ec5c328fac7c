// The scheduler's steps through Backend::forward_seqs (continuous batching
// with chunked prefill, issue #31): on the tiny model, batched decode gives
// each request the tokens it gets alone, requests join and leave between
// steps, a long prompt's chunks share steps with another slot's decode, and
// one slot's bad input fails only its request; with a fake backend, the exact
// shape of each step (decodes + prompt chunks within the budget) and the cap
// of the slots by max_sequences().
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "engine/synthetic_vocab.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "tiny_model_util.h"

namespace ms::server {
namespace {

namespace fs = std::filesystem;

// One entry of a recorded forward_seqs call.
struct EntryShape {
  const KvCache* kv;
  size_t n;
  bool want_logits;
};
using StepShape = std::vector<EntryShape>;

// Records every forward_seqs call (and counts forward calls) of the backend
// it wraps; optionally holds the first forward_seqs call until release().
class RecordingBackend final : public Backend {
 public:
  RecordingBackend(Backend& inner, int max_seq = 0) : be_(inner), max_seq_(max_seq) {}
  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool all) override {
    ++forward_calls_;
    be_.forward(kv, tokens, logits, all);
  }
  void forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) override {
    {
      std::unique_lock lk(m_);
      StepShape shape;
      for (const SeqTokens& s : seqs) shape.push_back({s.kv, s.tokens.size(), s.want_logits});
      steps_.push_back(std::move(shape));
      cv_.notify_all();
      cv_.wait(lk, [&] { return !hold_first_ || released_ || steps_.size() > 1; });
    }
    be_.forward_seqs(seqs, logits);
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return be_.make_cache(ctx, type); }
  const ModelConfig& config() const override { return be_.config(); }
  int max_sequences() const override { return max_seq_; }
  std::string name() const override { return "recording"; }
  void set_route_hook(RouteHook hook, bool want_hidden = false) override {
    be_.set_route_hook(std::move(hook), want_hidden);
  }

  void hold_first() { hold_first_ = true; }
  void wait_steps(size_t n) {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return steps_.size() >= n; });
  }
  void release() {
    std::lock_guard lk(m_);
    released_ = true;
    cv_.notify_all();
  }
  std::vector<StepShape> steps() const {
    std::lock_guard lk(m_);
    return steps_;
  }
  int forward_calls() const { return forward_calls_; }

 private:
  Backend& be_;
  int max_seq_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<StepShape> steps_;
  bool hold_first_ = false, released_ = false;
  std::atomic<int> forward_calls_{0};
};

// Logits that always pick token 5 of 300, and a cache that only counts
// positions: a backend for the step shapes alone.
class FakeBackend final : public Backend {
 public:
  FakeBackend() { cfg_.n_vocab = 300; }
  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool) override {
    kv.check_room(static_cast<int64_t>(tokens.size()));
    kv.advance(static_cast<int64_t>(tokens.size()));
    logits.assign(300, 0.0f);
    logits[5] = 1.0f;
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return KvCache(1, 1, 8, ctx, type); }
  const ModelConfig& config() const override { return cfg_; }
  std::string name() const override { return "fake"; }
  void set_route_hook(RouteHook, bool = false) override {}

 private:
  ModelConfig cfg_;
};

struct Tiny : test::TinyCpuModel {
  Tiny() : TinyCpuModel("sched_steps_") {}
  std::vector<int32_t> encode(const std::string& s) const { return tok().encode(s, true, true); }
};

Job greedy_job(std::vector<int32_t> prompt, int n) {
  Job j;
  j.prompt = std::move(prompt);
  j.sampling.temperature = 0;
  j.gen.n_predict = n;
  j.gen.stop_at_eog = false;  // every request runs its full length: the steps are predictable
  return j;
}

Update wait(const std::shared_ptr<Request>& r, std::string* text = nullptr) {
  for (;;) {
    Update u = r->take(std::chrono::milliseconds(100));
    if (text) *text += u.content;
    if (u.done) return u;
  }
}

// The request alone: generate() on a fresh cache (greedy, through end-of-text
// tokens as the jobs run).
std::string reference_no_eog(Tiny& t, const std::vector<int32_t>& prompt, int n) {
  KvCache kv = t.be->make_cache(512);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler s(sp);
  GenerateParams gp;
  gp.n_predict = n;
  gp.stop_at_eog = false;
  StreamDecoder dec(t.tok());
  std::string out;
  generate(*t.be, kv, s, &t.tok(), prompt, gp, [&](int32_t id) {
    out += dec.push(id);
    return true;
  });
  return out + dec.flush();
}

size_t count_kv(const StepShape& s, const KvCache* kv) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [&](const EntryShape& e) { return e.kv == kv; }));
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

// CpuBackend::forward_seqs with small batches: entries split across them,
// prompt chunks beside decode tokens, logits only where asked and in entry
// order; each entry gets what forward() gives it alone.
TEST(CpuForwardSeqs, ChunksAndDecodesAcrossBatchesEqualEachAlone) {
  Tiny t;
  CpuBackend::Options small;
  small.max_batch = 5;
  CpuBackend be(t.model->weights, t.pool, small);
  const int64_t V = be.config().n_vocab;
  const auto pa = t.encode("Once upon a time"), pb = t.encode("The experts of the first layer were busy"),
             pc = t.encode("In a");
  ASSERT_GT(pb.size(), 6u);
  std::vector<float> alone_logits, logits;
  KvCache a = be.make_cache(64), b = be.make_cache(64), c = be.make_cache(64);
  KvCache ra = t.be->make_cache(64), rb = t.be->make_cache(64), rc = t.be->make_cache(64);
  be.forward(a, pa, logits);
  t.be->forward(ra, pa, logits);
  be.forward(c, std::span<const int32_t>(pc.data(), 1), logits);
  t.be->forward(rc, std::span<const int32_t>(pc.data(), 1), logits);
  const int32_t next_a[1] = {17};
  const std::vector<SeqTokens> step1 = {{&a, next_a, true},
                                        {&b, std::span<const int32_t>(pb), false},
                                        {&c, std::span<const int32_t>(pc.data() + 1, pc.size() - 1), true}};
  be.forward_seqs(step1, logits);
  ASSERT_EQ(logits.size(), static_cast<size_t>(2 * V));  // a's and c's
  t.be->forward(ra, next_a, alone_logits);
  EXPECT_LT(max_abs_diff(logits.data(), alone_logits.data(), static_cast<size_t>(V)), 1e-4);
  t.be->forward(rc, std::span<const int32_t>(pc.data() + 1, pc.size() - 1), alone_logits);
  EXPECT_LT(max_abs_diff(logits.data() + V, alone_logits.data(), static_cast<size_t>(V)), 1e-4);
  t.be->forward(rb, pb, alone_logits);
  EXPECT_EQ(a.n_past(), ra.n_past());
  EXPECT_EQ(b.n_past(), static_cast<int64_t>(pb.size()));
  EXPECT_EQ(c.n_past(), rc.n_past());
  // b's cache holds what its prompt alone leaves: its next token agrees.
  const int32_t next_b[1] = {42};
  const std::vector<SeqTokens> step2 = {{&b, next_b, true}, {&a, next_a, true}};
  be.forward_seqs(step2, logits);
  ASSERT_EQ(logits.size(), static_cast<size_t>(2 * V));
  t.be->forward(rb, next_b, alone_logits);
  EXPECT_LT(max_abs_diff(logits.data(), alone_logits.data(), static_cast<size_t>(V)), 1e-4);
  t.be->forward(ra, next_a, alone_logits);
  EXPECT_LT(max_abs_diff(logits.data() + V, alone_logits.data(), static_cast<size_t>(V)), 1e-4);
  // The checks come before anything is computed: a cache twice, a bad id.
  const int64_t before = a.n_past();
  const int32_t bad[1] = {static_cast<int32_t>(V)};
  EXPECT_THROW(be.forward_seqs(std::vector<SeqTokens>{{&a, next_a, true}, {&a, next_a, true}}, logits), Error);
  EXPECT_THROW(be.forward_seqs(std::vector<SeqTokens>{{&a, next_a, true}, {&c, bad, true}}, logits), Error);
  EXPECT_EQ(a.n_past(), before);
}

TEST(StepPromptBudget, DecodesFirstThenPromptsNeverBelowAQuarter) {
  EXPECT_EQ(step_prompt_budget(8, 0), 8u);
  EXPECT_EQ(step_prompt_budget(8, 1), 7u);
  EXPECT_EQ(step_prompt_budget(8, 6), 2u);
  EXPECT_EQ(step_prompt_budget(8, 100), 2u);  // a quarter of the chunk, however many decode
  EXPECT_EQ(step_prompt_budget(512, 16), 496u);
  EXPECT_EQ(step_prompt_budget(1, 5), 1u);
  EXPECT_EQ(step_prompt_budget(0, 0), 1u);  // a chunk of 0 is taken as 1
}

TEST(SchedulerSteps, BatchedDecodeGivesEachRequestItsTokensAlone) {
  Tiny t;
  RecordingBackend rec(*t.be);
  Scheduler::Options o;
  o.parallel = 4;
  o.ctx = 256;
  o.prefill_chunk = 16;
  const std::vector<std::string> texts = {"Once upon a time", "The experts of the", "In a small village there lived",
                                          "A"};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> refs;
  for (size_t i = 0; i < texts.size(); ++i) {
    prompts.push_back(t.encode(texts[i]));
    refs.push_back(reference_no_eog(t, prompts.back(), 10 + static_cast<int>(i)));
  }
  Scheduler sched(rec, t.tok(), o);
  std::vector<std::shared_ptr<Request>> rs;
  for (size_t i = 0; i < prompts.size(); ++i) rs.push_back(sched.submit(greedy_job(prompts[i], 10 + static_cast<int>(i))));
  for (size_t i = 0; i < rs.size(); ++i) {
    std::string text;
    const Update u = wait(rs[i], &text);
    EXPECT_EQ(u.finish_reason, "length") << u.error;
    EXPECT_EQ(u.n_completion, 10 + static_cast<int>(i));
    EXPECT_EQ(text, refs[i]) << "request " << i;
  }
  // Every pass went through forward_seqs, and decodes did share steps.
  EXPECT_EQ(rec.forward_calls(), 0);
  size_t widest = 0;
  for (const StepShape& s : rec.steps()) {
    size_t decodes = 0;
    for (const EntryShape& e : s) decodes += e.n == 1 && e.want_logits ? 1 : 0;
    widest = std::max(widest, decodes);
  }
  EXPECT_GE(widest, 3u);
}

TEST(SchedulerSteps, RequestsJoinAndLeaveBetweenSteps) {
  Tiny t;
  RecordingBackend rec(*t.be);
  Scheduler::Options o;
  o.parallel = 3;
  o.ctx = 512;
  o.prefill_chunk = 16;
  const auto pa = t.encode("Once upon a time there was"), pb = t.encode("The experts"),
             pc = t.encode("In a small village"), pd = t.encode("A dragon");
  // A runs until the others are done and it has stepped alone (then it is
  // cancelled): however late this thread submits D on a busy machine, A
  // outlives it. Its text is a prefix of its long reference.
  const std::string ra = reference_no_eog(t, pa, 480), rb = reference_no_eog(t, pb, 4),
                    rc = reference_no_eog(t, pc, 20), rd = reference_no_eog(t, pd, 8);
  Scheduler sched(rec, t.tok(), o);
  auto a = sched.submit(greedy_job(pa, 480));
  rec.wait_steps(4);  // A is decoding when B and C join
  auto b = sched.submit(greedy_job(pb, 4));
  auto c = sched.submit(greedy_job(pc, 20));
  std::string tb, tc, td, ta;
  EXPECT_EQ(wait(b, &tb).finish_reason, "length");
  auto d = sched.submit(greedy_job(pd, 8));  // into the slot B left, while A (and C) go on
  EXPECT_EQ(wait(d, &td).finish_reason, "length");
  EXPECT_EQ(wait(c, &tc).finish_reason, "length");
  rec.wait_steps(rec.steps().size() + 3);  // A alone for a few steps
  a->cancel();
  const Update ua = wait(a, &ta);
  ASSERT_EQ(ua.finish_reason, "cancelled") << "A ran out before the others were done";
  EXPECT_EQ(ra.rfind(ta, 0), 0u) << ta;
  EXPECT_EQ(tb, rb);
  EXPECT_EQ(tc, rc);
  EXPECT_EQ(td, rd);
  // The step sizes changed as requests came and went: 1 entry at the start,
  // then more, and A alone again at the end (A runs longest).
  const auto steps = rec.steps();
  ASSERT_FALSE(steps.empty());
  size_t widest = 0;
  for (const StepShape& s : steps) widest = std::max(widest, s.size());
  EXPECT_EQ(steps.front().size(), 1u);
  EXPECT_GE(widest, 3u);
  EXPECT_EQ(steps.back().size(), 1u);
  EXPECT_EQ(sched.active_slots(), 0);
}

TEST(SchedulerSteps, ALongPromptsChunksShareStepsWithADecodingSlot) {
  Tiny t;
  RecordingBackend rec(*t.be);
  Scheduler::Options o;
  o.parallel = 2;
  o.ctx = 512;
  o.prefill_chunk = 8;
  const auto pa = t.encode("Once upon a time");
  std::string long_text;
  for (int i = 0; i < 12; ++i) long_text += "the experts of layer " + std::to_string(i) + " were busy; ";
  const auto pb = t.encode(long_text);
  ASSERT_GT(pb.size(), 40u);
  const int na = 150;
  const std::string ra = reference_no_eog(t, pa, na), rb = reference_no_eog(t, pb, 6);
  rec.hold_first();
  Scheduler sched(rec, t.tok(), o);
  auto a = sched.submit(greedy_job(pa, na));
  rec.wait_steps(1);  // A's prompt is in the (held) first step
  auto b = sched.submit(greedy_job(pb, 6));
  rec.release();
  std::string ta, tb;
  EXPECT_EQ(wait(b, &tb).finish_reason, "length");
  EXPECT_EQ(wait(a, &ta).finish_reason, "length");
  EXPECT_EQ(ta, ra);
  EXPECT_EQ(tb, rb);

  const auto steps = rec.steps();
  ASSERT_FALSE(steps.empty());
  const KvCache* kv_a = steps.front().front().kv;
  size_t b_prompt_done = 0, b_chunks = 0;
  for (size_t i = 1; i < steps.size() && b_prompt_done < pb.size(); ++i) {
    const StepShape& s = steps[i];
    for (const EntryShape& e : s) {
      if (e.kv == kv_a) continue;
      // B's prompt chunk: within the budget left by A's decode token, with
      // logits only for the chunk that ends the prompt.
      ++b_chunks;
      EXPECT_LE(e.n, step_prompt_budget(o.prefill_chunk, 1)) << "step " << i;
      b_prompt_done += e.n;
      EXPECT_EQ(e.want_logits, b_prompt_done == pb.size()) << "step " << i;
      // A decodes one token in every step B's prompt takes.
      EXPECT_EQ(count_kv(s, kv_a), 1u) << "step " << i;
    }
  }
  EXPECT_EQ(b_prompt_done, pb.size());
  EXPECT_GE(b_chunks, pb.size() / 7);
}

TEST(SchedulerSteps, OneSlotsBadInputFailsOnlyThatRequest) {
  Tiny t;
  RecordingBackend rec(*t.be);
  Scheduler::Options o;
  o.parallel = 3;
  o.ctx = 64;
  o.prefill_chunk = 8;
  const auto good = t.encode("Once upon a time");
  const std::string ref = reference_no_eog(t, good, 30);
  std::vector<int32_t> bad_id = t.encode("The experts");
  bad_id.push_back(static_cast<int32_t>(t.be->config().n_vocab) + 3);
  std::vector<int32_t> too_long;
  while (too_long.size() < 100) too_long.push_back(static_cast<int32_t>(10 + too_long.size() % 50));
  rec.hold_first();
  Scheduler sched(rec, t.tok(), o);
  auto g = sched.submit(greedy_job(good, 30));
  rec.wait_steps(1);
  auto b1 = sched.submit(greedy_job(bad_id, 5));
  auto b2 = sched.submit(greedy_job(too_long, 5));
  rec.release();
  const Update u1 = wait(b1), u2 = wait(b2);
  EXPECT_EQ(u1.finish_reason, "error");
  EXPECT_NE(u1.error.find("outside the vocabulary"), std::string::npos) << u1.error;
  EXPECT_EQ(u2.finish_reason, "error");
  EXPECT_NE(u2.error.find("more than the context of 64 tokens"), std::string::npos) << u2.error;
  std::string text;
  const Update ug = wait(g, &text);
  EXPECT_EQ(ug.finish_reason, "length") << ug.error;
  EXPECT_EQ(text, ref);
  // The slots of the failed requests serve again.
  const auto again = t.encode("A dragon");
  const std::string ref2 = reference_no_eog(t, again, 5);
  std::string t2;
  EXPECT_EQ(wait(sched.submit(greedy_job(again, 5)), &t2).finish_reason, "length");
  EXPECT_EQ(t2, ref2);
}

// metric_value from /metrics text (0 when absent).
double metric_value(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + name.size() + 2));
}

TEST(SchedulerSteps, StepShapesAreTheDecodesPlusPromptChunksWithinTheBudget) {
  const Tokenizer tok(make_synthetic_vocab(300));
  FakeBackend fake;
  RecordingBackend rec(fake);
  Metrics metrics;
  Scheduler::Options o;
  o.parallel = 3;
  o.ctx = 128;
  o.prefill_chunk = 8;
  auto prompt = [](size_t n) {
    std::vector<int32_t> p;
    for (size_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(6 + i % 20));
    return p;
  };
  rec.hold_first();
  Scheduler sched(rec, tok, o, &metrics);
  auto a = sched.submit(greedy_job(prompt(3), 20));
  rec.wait_steps(1);  // A's prompt is the held first step; B and C queue meanwhile
  auto b = sched.submit(greedy_job(prompt(30), 3));
  auto c = sched.submit(greedy_job(prompt(5), 3));
  rec.release();
  for (auto* r : {&a, &b, &c}) EXPECT_EQ(wait(*r).finish_reason, "length");

  const auto steps = rec.steps();
  // A's 20 tokens: its prompt step and 19 decode steps (the 20th token is
  // sampled and ends the request without a pass).
  ASSERT_EQ(steps.size(), 20u);
  const KvCache* A = steps[0][0].kv;
  ASSERT_EQ(steps[1].size(), 2u);
  const KvCache* B = steps[1][1].kv;
  ASSERT_EQ(steps[5].size(), 3u);
  const KvCache* C = steps[5][2].kv;
  // Decode tokens first (slot order), then prompt chunks (admission order):
  // B's 30 prompt tokens take the 7 of each step's 8 that A's decode leaves,
  // and C's 5 come in the step where B's rest (2) leaves room.
  const std::vector<StepShape> want = {
      {{A, 3, true}},
      {{A, 1, true}, {B, 7, false}},
      {{A, 1, true}, {B, 7, false}},
      {{A, 1, true}, {B, 7, false}},
      {{A, 1, true}, {B, 7, false}},
      {{A, 1, true}, {B, 2, true}, {C, 5, true}},
      {{A, 1, true}, {B, 1, true}, {C, 1, true}},
      {{A, 1, true}, {B, 1, true}, {C, 1, true}},
      {{A, 1, true}},
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepShape& w = i < want.size() ? want[i] : want.back();
    ASSERT_EQ(steps[i].size(), w.size()) << "step " << i;
    for (size_t k = 0; k < w.size(); ++k) {
      EXPECT_EQ(steps[i][k].kv, w[k].kv) << "step " << i << " entry " << k;
      EXPECT_EQ(steps[i][k].n, w[k].n) << "step " << i << " entry " << k;
      EXPECT_EQ(steps[i][k].want_logits, w[k].want_logits) << "step " << i << " entry " << k;
    }
  }
  EXPECT_EQ(rec.forward_calls(), 0);  // FakeBackend's forward ran only inside the default forward_seqs
  const std::string text = metrics.render();
  EXPECT_EQ(metric_value(text, "moestream_steps_total"), 20);
  EXPECT_EQ(metric_value(text, "moestream_steps_with_prompt_total"), 6);
  EXPECT_EQ(metric_value(text, "moestream_step_prompt_tokens_total"), 38);
  EXPECT_EQ(metric_value(text, "moestream_decode_batch_size_count"), 19);
  EXPECT_EQ(metric_value(text, "moestream_decode_batch_size_sum"), 19 + 2 + 2);  // A's, B's and C's decodes
}

TEST(SchedulerSteps, SlotsAreCappedByTheBackendsMaxSequences) {
  const Tokenizer tok(make_synthetic_vocab(300));
  FakeBackend fake;
  RecordingBackend two(fake, 2);
  Scheduler::Options o;
  o.parallel = 5;
  o.ctx = 64;
  Scheduler sched(two, tok, o);
  EXPECT_EQ(sched.parallel(), 2);
  EXPECT_EQ(sched.requested_parallel(), 5);
  RecordingBackend unlimited(fake, 0);
  Scheduler all(unlimited, tok, o);
  EXPECT_EQ(all.parallel(), 5);
  EXPECT_EQ(all.requested_parallel(), 5);
}

}  // namespace
}  // namespace ms::server
