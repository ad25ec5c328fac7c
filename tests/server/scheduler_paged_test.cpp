// The scheduler on a backend with paged KV (the CPU: Backend::paged_kv): the
// slots share one pool of --ctx tokens; jobs whose answers together outgrow
// it still each get what they get alone (the newest gives its pages back and
// re-reads, without sending text again); idle slots' cached prompts give
// their pages back first; a prompt past the per-request limit
// fails naming it; a backend without paged KV keeps a context per slot.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>

#include "engine/generate.h"
#include "server/scheduler.h"
#include "tokenizer/stream_decoder.h"
#include "util/error.h"
#include "tiny_model_util.h"

namespace ms::server {
namespace {

struct Tiny : test::TinyCpuModel {
  Tiny() : TinyCpuModel("sched_paged_") {}
  std::vector<int32_t> encode(const std::string& s) const { return tok().encode(s, true, true); }
  std::string reference(const std::vector<int32_t>& prompt, int n) {
    KvCache kv = be->make_cache(512);
    SamplerParams sp;
    sp.temperature = 0;
    Sampler s(sp);
    GenerateParams gp;
    gp.n_predict = n;
    gp.stop_at_eog = false;
    StreamDecoder dec(tok());
    std::string out;
    generate(*be, kv, s, &tok(), prompt, gp, [&](int32_t id) {
      out += dec.push(id);
      return true;
    });
    return out + dec.flush();
  }
};

Job greedy_job(std::vector<int32_t> prompt, int n) {
  Job j;
  j.prompt = std::move(prompt);
  j.sampling.temperature = 0;
  j.gen.n_predict = n;
  j.gen.stop_at_eog = false;
  return j;
}

Update wait(const std::shared_ptr<Request>& r, std::string* text = nullptr) {
  for (;;) {
    Update u = r->take(std::chrono::milliseconds(100));
    if (text) *text += u.content;
    if (u.done) return u;
  }
}

// Passes everything to the CPU backend. paged: its paged KV too (else the
// default: none, as the CUDA backend today). The first forward_seqs waits for
// release() when hold_first() was called.
class Wrapped final : public Backend {
 public:
  Wrapped(Backend& inner, bool paged) : be_(inner), paged_(paged) {}
  void forward(KvCache& kv, std::span<const int32_t> t, std::vector<float>& l, bool all) override {
    be_.forward(kv, t, l, all);
  }
  void forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) override {
    {
      std::unique_lock lk(m_);
      ++steps_;
      cv_.notify_all();
      cv_.wait(lk, [&] { return !hold_ || released_; });
    }
    be_.forward_seqs(seqs, logits);
  }
  void fork(const KvCache& src, KvCache& dst) override { be_.fork(src, dst); }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return be_.make_cache(ctx, type); }
  bool paged_kv() const override { return paged_; }
  std::shared_ptr<KvPages> make_kv_pages(int64_t n, KvType type, int32_t page) const override {
    return paged_ ? be_.make_kv_pages(n, type, page) : Backend::make_kv_pages(n, type, page);
  }
  KvCache make_paged_cache(std::shared_ptr<KvPages> p, int64_t ctx, KvType type) const override {
    return paged_ ? be_.make_paged_cache(std::move(p), ctx, type) : Backend::make_paged_cache(std::move(p), ctx, type);
  }
  const ModelConfig& config() const override { return be_.config(); }
  std::string name() const override { return paged_ ? "paged" : "per-slot"; }
  void set_route_hook(RouteHook hook, bool want_hidden = false) override {
    be_.set_route_hook(std::move(hook), want_hidden);
  }
  void hold_first() { hold_ = true; }
  void wait_steps(int n) {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return steps_ >= n; });
  }
  void release() {
    std::lock_guard lk(m_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  Backend& be_;
  bool paged_;
  std::mutex m_;
  std::condition_variable cv_;
  int steps_ = 0;
  bool hold_ = false, released_ = false;
};

TEST(SchedulerPaged, JobsOutgrowingThePoolEachGetWhatTheyGetAlone) {
  Tiny t;
  Wrapped be(*t.be, true);
  Scheduler::Options o;
  o.parallel = 2;
  o.ctx = 64;  // 8 pages of 8: not enough for both answers at once
  o.kv_page_tokens = 8;
  o.prefill_chunk = 16;
  const auto pa = t.encode("Once upon a time"), pb = t.encode("The experts of the");
  const int n = 50;
  ASSERT_LT(static_cast<int>(pa.size() + pb.size()) + 2 * n, 2 * 64);
  ASSERT_GT(static_cast<int>(pa.size() + pb.size()) + 2 * n, 64);
  const std::string ra = t.reference(pa, n), rb = t.reference(pb, n);
  Scheduler sched(be, t.tok(), o);
  ASSERT_NE(sched.kv_pages(), nullptr);
  EXPECT_EQ(sched.ctx(), 64) << "one request may hold the whole pool";
  be.hold_first();
  auto a = sched.submit(greedy_job(pa, n));
  be.wait_steps(1);  // A's prompt is in its first step when B comes
  auto b = sched.submit(greedy_job(pb, n));
  be.release();
  std::string ta, tb;
  const Update ua = wait(a, &ta), ub = wait(b, &tb);
  EXPECT_EQ(ua.finish_reason, "length") << ua.error;
  EXPECT_EQ(ub.finish_reason, "length") << ub.error;
  EXPECT_EQ(ta, ra);
  EXPECT_EQ(tb, rb) << "the preempted job's text is its text alone, nothing sent twice";
  EXPECT_EQ(ua.n_completion, n);
  EXPECT_EQ(ub.n_completion, n);
  EXPECT_EQ(ub.n_prompt, static_cast<int>(pb.size())) << "the re-read is not counted as prompt";
  EXPECT_GE(sched.preemptions(), 1) << "both answers could not be held at once";
  EXPECT_LE(sched.kv_pages()->used_pages(), 8);
}

TEST(SchedulerPaged, IdleSlotsCachedPromptsGiveTheirPagesToANewJob) {
  Tiny t;
  Scheduler::Options o;
  o.parallel = 2;
  o.ctx = 64;  // 8 pages of 8
  o.kv_page_tokens = 8;
  Scheduler sched(*t.be, t.tok(), o);
  // B shares no first token with A (no BOS): it goes to the slot A never
  // used (the least recently used), so A's cached tokens must give way.
  const auto pa = t.encode("Once upon a time"), pb = t.tok().encode("The experts of the", false, true);
  ASSERT_NE(pa[0], pb[0]);
  const int n = 40;
  std::string ta, tb;
  EXPECT_EQ(wait(sched.submit(greedy_job(pa, n)), &ta).finish_reason, "length");
  const int32_t held = sched.kv_pages()->used_pages();
  EXPECT_EQ(held, static_cast<int32_t>((pa.size() + n - 1 + 7) / 8)) << "the idle slot keeps its tokens' pages";
  ASSERT_GT(static_cast<int>(pb.size()) + n, 8 * (8 - held)) << "B does not fit beside A's cached tokens";
  const Update ub = wait(sched.submit(greedy_job(pb, n)), &tb);
  EXPECT_EQ(ub.finish_reason, "length") << ub.error;
  EXPECT_EQ(tb, t.reference(pb, n));
  EXPECT_EQ(ta, t.reference(pa, n));
  EXPECT_EQ(sched.preemptions(), 0) << "an idle cache is given back before a running job";
  EXPECT_EQ(sched.kv_pages()->used_pages(), static_cast<int32_t>((pb.size() + n - 1 + 7) / 8))
      << "A's cached tokens were given back";
}

TEST(SchedulerPaged, APromptPastThePerRequestLimitFailsNamingIt) {
  Tiny t;
  Scheduler::Options o;
  o.parallel = 2;
  o.ctx = 96;
  o.ctx_per_request = 24;
  Scheduler sched(*t.be, t.tok(), o);
  EXPECT_EQ(sched.ctx(), 24);
  EXPECT_EQ(sched.ctx_limit_name(), "--ctx-per-request 24");
  std::vector<int32_t> long_prompt(30, t.encode("a").back());
  const Update u = wait(sched.submit(greedy_job(long_prompt, 4)));
  EXPECT_EQ(u.finish_reason, "error");
  EXPECT_NE(u.error.find("--ctx-per-request 24"), std::string::npos) << u.error;
  // A request within the limit is served, ending at it.
  const auto p = t.encode("Once upon a time");
  const Update ok = wait(sched.submit(greedy_job(p, 100)));
  EXPECT_EQ(ok.finish_reason, "length") << ok.error;
  EXPECT_EQ(static_cast<int>(p.size()) + ok.n_completion, 24 + 1) << "24 held, the last token sampled is not";
  o.ctx_per_request = 200;
  EXPECT_THROW(Scheduler(*t.be, t.tok(), o), Error) << "more per request than the pool holds";
}

TEST(SchedulerPaged, WithoutPagedKvEachSlotReservesItsContext) {
  Tiny t;
  Wrapped be(*t.be, false);
  Scheduler::Options o;
  o.parallel = 2;
  o.ctx = 48;
  o.ctx_per_request = 8;  // ignored: no pages to share
  Scheduler sched(be, t.tok(), o);
  EXPECT_EQ(sched.kv_pages(), nullptr);
  EXPECT_EQ(sched.ctx(), 48);
  EXPECT_EQ(sched.ctx_limit_name(), "--ctx 48 (per slot)");
  const auto p = t.encode("Once upon a time");
  std::string text;
  const Update u = wait(sched.submit(greedy_job(p, 12)), &text);
  EXPECT_EQ(text, t.reference(p, 12));
  EXPECT_EQ(sched.preemptions(), 0);
}

TEST(SchedulerPaged, ThePoolMustFitInMemory) {
  Tiny t;
  Scheduler::Options o;
  o.ctx = 4096;
  o.parallel = 4;
  o.max_kv_bytes = t.be->make_cache(1024).bytes();
  try {
    Scheduler s(*t.be, t.tok(), o);
    FAIL() << "a pool four times the memory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ctx 4096 needs"), std::string::npos) << e.what();
  }
  o.ctx = 1024;
  EXPECT_NO_THROW(Scheduler(*t.be, t.tok(), o)) << "the slots share the pool: --parallel costs nothing more";
}

TEST(SchedulerPaged, PerSlotCachesThatDoNotFitAreRefusedNamingHowManyFit) {
  Tiny t;
  Wrapped be(*t.be, false);
  Scheduler::Options o;
  o.ctx = 128;
  o.parallel = 100000;
  const uint64_t per_slot = t.be->make_cache(o.ctx).bytes();
  o.max_kv_bytes = per_slot * 3 + per_slot / 2;
  try {
    Scheduler s(be, t.tok(), o);
    FAIL() << "100000 slots were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--parallel 100000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 3 slots fit"), std::string::npos) << e.what();
  }
  o.parallel = 3;
  EXPECT_NO_THROW(Scheduler(be, t.tok(), o));
}

}  // namespace
}  // namespace ms::server
