// Speculative decoding in the scheduler (`serve --spec`, issue #42): on the
// tiny models (CPU backend), the answers of several requests decoding
// together are plain decoding's -- text, usage, finish reason, logprobs --
// with the n-gram, oracle, MTP, draft-model and DFlash drafters, greedy and
// seeded, with a grammar (a sampling draft model's drafts go through the
// rejection rule: its runs are reproducible with a seed, and a model
// drafting for itself has every judged draft kept); max_tokens and stop
// strings hold exactly, and a slot's cache is left as plain decoding leaves
// it (the next request's prompt cache reads it); verifies of several slots
// share steps within the step's token budget; /metrics counts them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "grammar/json_schema.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "engine/speculative_mtp.h"
#include "engine/synthetic_dflash.h"
#include "format/gguf.h"
#include "model/dflash_weights.h"
#include "server/spec_drafters.h"
#include "tiny_model_util.h"

namespace ms::server {
namespace {

// Counts what each forward_seqs call carried: its tokens, and its verify
// entries (all_logits).
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Backend& inner) : be_(inner) {}
  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool all) override {
    be_.forward(kv, tokens, logits, all);
  }
  void forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) override {
    size_t tokens = 0, verifies = 0;
    for (const SeqTokens& s : seqs) {
      tokens += s.tokens.size();
      verifies += s.all_logits ? 1 : 0;
    }
    {
      std::lock_guard lk(m_);
      max_tokens_ = std::max(max_tokens_, tokens);
      max_verifies_ = std::max(max_verifies_, verifies);
      max_entries_ = std::max(max_entries_, seqs.size());
    }
    be_.forward_seqs(seqs, logits);
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return be_.make_cache(ctx, type); }
  bool paged_kv() const override { return be_.paged_kv(); }
  std::shared_ptr<KvPages> make_kv_pages(int64_t total, KvType type, int32_t page_tokens) const override {
    return be_.make_kv_pages(total, type, page_tokens);
  }
  KvCache make_paged_cache(std::shared_ptr<KvPages> pages, int64_t ctx, KvType type) const override {
    return be_.make_paged_cache(std::move(pages), ctx, type);
  }
  const ModelConfig& config() const override { return be_.config(); }
  std::string name() const override { return "counting"; }
  void set_route_hook(RouteHook hook, bool want_hidden = false) override {
    be_.set_route_hook(std::move(hook), want_hidden);
  }
  size_t max_tokens() const {
    std::lock_guard lk(m_);
    return max_tokens_;
  }
  size_t max_verifies() const {
    std::lock_guard lk(m_);
    return max_verifies_;
  }
  size_t max_entries() const {
    std::lock_guard lk(m_);
    return max_entries_;
  }

 private:
  Backend& be_;
  mutable std::mutex m_;
  size_t max_tokens_ = 0, max_verifies_ = 0, max_entries_ = 0;
};

struct Answer {
  std::string text, finish;
  int n_completion = 0, n_cached = 0;
  std::vector<LogprobEntry> logprobs;
};

Answer wait(const std::shared_ptr<Request>& r) {
  Answer a;
  for (;;) {
    Update u = r->take(std::chrono::milliseconds(100));
    a.text += u.content;
    for (LogprobEntry& e : u.logprobs) a.logprobs.push_back(std::move(e));
    if (u.done) {
      EXPECT_TRUE(u.error.empty()) << u.error;
      a.finish = u.finish_reason;
      a.n_completion = u.n_completion;
      a.n_cached = u.n_cached;
      return a;
    }
  }
}

// The jobs submitted together to one scheduler; their answers in order.
std::vector<Answer> serve(Backend& be, const Tokenizer& tok, const std::vector<Job>& jobs, Scheduler::Options o,
                          Metrics* metrics = nullptr) {
  Scheduler sched(be, tok, o, metrics);
  std::vector<std::shared_ptr<Request>> rs;
  for (const Job& j : jobs) rs.push_back(sched.submit(j));
  std::vector<Answer> out;
  for (auto& r : rs) out.push_back(wait(r));
  return out;
}

Job job(const Tokenizer& tok, const std::string& text, int n, float temperature = 0, uint64_t seed = 1) {
  Job j;
  j.prompt = tok.encode(text, true, true);
  j.sampling.temperature = temperature;
  j.sampling.seed = seed;
  j.gen.n_predict = n;
  j.gen.stop_at_eog = false;  // every request runs to max_tokens or its stop: long enough to speculate
  return j;
}

Scheduler::Options base_options() {
  Scheduler::Options o;
  o.parallel = 3;
  o.ctx = 256;
  o.prefill_chunk = 32;
  return o;
}

// Fixed K: every step with drafts verifies them (the adaptive controller
// would be timing-dependent; the answers must not depend on K anyway).
Scheduler::Options with_spec(Scheduler::Options o, DrafterFactory f, int k = 4) {
  o.spec.make_drafter = std::move(f);
  o.spec.control.draft_max = k;
  o.spec.control.draft_min = 1;
  o.spec.control.adaptive = false;
  return o;
}

void expect_same(const std::vector<Answer>& plain, const std::vector<Answer>& spec, const std::string& what) {
  ASSERT_EQ(plain.size(), spec.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(spec[i].text, plain[i].text) << what << ", request " << i;
    EXPECT_EQ(spec[i].finish, plain[i].finish) << what << ", request " << i;
    EXPECT_EQ(spec[i].n_completion, plain[i].n_completion) << what << ", request " << i;
    ASSERT_EQ(spec[i].logprobs.size(), plain[i].logprobs.size()) << what << ", request " << i;
    for (size_t j = 0; j < plain[i].logprobs.size(); ++j) {
      EXPECT_EQ(spec[i].logprobs[j].token, plain[i].logprobs[j].token) << what << ", request " << i << " token " << j;
      EXPECT_NEAR(spec[i].logprobs[j].logprob, plain[i].logprobs[j].logprob, 1e-4) << what << ", request " << i;
    }
  }
}

// A counter's value in the /metrics text (-1: absent).
double metric(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

std::vector<Job> three_jobs(const Tokenizer& tok, float temperature = 0) {
  std::vector<Job> jobs = {job(tok, "Once upon a time", 40, temperature, 7),
                           job(tok, "The experts of the", 33, temperature, 8),
                           job(tok, "In a small village there lived", 27, temperature, 9)};
  jobs[1].top_logprobs = 3;  // logprobs go through the same per-token path
  return jobs;
}

// --spec oracle:ALPHA's drafters, references in a 256-token cache.
DrafterFactory oracle(test::TinyCpuModel& t, double alpha) {
  return oracle_drafters(*t.be, t.tok(), 256, KvType::F16, alpha);
}

struct Tiny : test::TinyCpuModel {
  Tiny() : TinyCpuModel("sched_spec_") {}
};

TEST(SchedulerSpec, GreedyAnswersOfThreeSlotsAreThePlainOnes) {
  Tiny t;
  const std::vector<Job> jobs = three_jobs(t.tok());
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, base_options());
  for (const Answer& a : plain) ASSERT_EQ(a.finish, "length");
  struct Case {
    std::string name;
    DrafterFactory f;
  };
  const std::vector<Case> cases = {
      {"ngram", ngram_drafters()},
      {"oracle:1", oracle(t, 1.0)},
      {"oracle:0.5", oracle(t, 0.5)},
  };
  for (const Case& c : cases) {
    CountingBackend counting(*t.be);
    Metrics m;
    expect_same(plain, serve(counting, t.tok(), jobs, with_spec(base_options(), c.f), &m), c.name);
    const std::string text = m.render();
    EXPECT_GT(metric(text, "moestream_spec_verifies_total"), 0) << c.name;
    EXPECT_GT(metric(text, "moestream_spec_drafted_tokens_total"), 0) << c.name;
    // Several slots verified in the same step (the oracle drafts at every
    // step; the n-gram drafter only where the text repeats itself).
    EXPECT_GE(counting.max_verifies(), c.name == "ngram" ? 1u : 3u) << c.name;
    if (c.name == "oracle:1") {
      // Every draft is the model's own token: all kept, each verify emits K + 1
      // (but the last ones, cut by max_tokens).
      EXPECT_EQ(metric(text, "moestream_spec_accepted_tokens_total"),
                metric(text, "moestream_spec_drafted_tokens_total"));
      EXPECT_GT(metric(text, "moestream_spec_verify_emitted_tokens_total"),
                2 * metric(text, "moestream_spec_verifies_total"));
      EXPECT_NE(text.find("moestream_spec_position_accepted_total{pos=\"3\"}"), std::string::npos);
    }
    if (c.name == "oracle:0.5") {
      // Rejections happened (each rolls the cache back) and still the answers match.
      EXPECT_LT(metric(text, "moestream_spec_accepted_tokens_total"),
                metric(text, "moestream_spec_drafted_tokens_total"));
      EXPECT_GT(metric(text, "moestream_spec_accepted_tokens_total"), 0);
    }
  }
}

// Paged KV (the CPU backend's): a pool too small for the three answers at
// once. A verify's tokens take their pages together; a job that gives its
// pages back (preempted) drops its drafts and re-reads its text, and every
// answer is still the plain one.
TEST(SchedulerSpec, SpeculatingJobsInAShortPagePoolKeepThePlainAnswers) {
  Tiny t;
  const std::vector<Job> jobs = three_jobs(t.tok());
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, base_options());
  Scheduler::Options o = with_spec(base_options(), oracle(t, 1.0));
  o.ctx = 96;  // 12 pages of 8 tokens: the three prompts and answers need more
  o.kv_page_tokens = 8;
  size_t need = 0;
  for (const Job& j : jobs) need += j.prompt.size() + static_cast<size_t>(j.gen.n_predict);
  ASSERT_GT(need, 96u);
  Scheduler sched(*t.be, t.tok(), o);
  ASSERT_NE(sched.kv_pages(), nullptr) << "the CPU backend's KV is paged";
  std::vector<std::shared_ptr<Request>> rs;
  for (const Job& j : jobs) rs.push_back(sched.submit(j));
  std::vector<Answer> got;
  for (auto& r : rs) got.push_back(wait(r));
  expect_same(plain, got, "oracle:1 in a 96-token pool");
  EXPECT_GE(sched.preemptions(), 1) << "the three answers could not be held at once";
  EXPECT_LE(sched.kv_pages()->used_pages(), 12);
}

TEST(SchedulerSpec, SeededSamplingIsThePlainOneWithPointMassDrafts) {
  Tiny t;
  const std::vector<Job> jobs = three_jobs(t.tok(), 0.9f);
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, base_options());
  Metrics m;
  expect_same(plain, serve(*t.be, t.tok(), jobs, with_spec(base_options(), oracle(t, 0.8)), &m),
              "oracle:0.8 at temperature 0.9");
  EXPECT_GT(metric(m.render(), "moestream_spec_accepted_tokens_total"), 0);
  expect_same(plain, serve(*t.be, t.tok(), jobs, with_spec(base_options(), ngram_drafters())),
              "ngram at temperature 0.9");
  // `n` choices: one prefill forked into the other slots, each choice then
  // speculating with its own seed.
  auto choices = [&](Scheduler::Options o) {
    Scheduler sched(*t.be, t.tok(), o);
    std::vector<Answer> out;
    for (auto& r : sched.submit_choices(jobs[0], 3)) out.push_back(wait(r));
    return out;
  };
  const std::vector<Answer> plain_choices = choices(base_options());
  EXPECT_NE(plain_choices[0].text, plain_choices[1].text);  // the seeds differ
  expect_same(plain_choices, choices(with_spec(base_options(), oracle(t, 0.8))),
              "3 choices, oracle:0.8");
}

// Drafts past max_tokens or a stop string are never emitted, and the slot's
// cache keeps exactly what was emitted: the next request, which extends the
// conversation, reads the cache (prompt cache) and answers as a fresh plain
// run of its whole prompt does.
TEST(SchedulerSpec, MaxTokensAndStopStringsHoldAndTheCacheIsLeftAsPlainLeavesIt) {
  Tiny t;
  Scheduler::Options one = base_options();
  one.parallel = 1;
  const Job long_job = job(t.tok(), "Once upon a time", 30);
  const std::string full = serve(*t.be, t.tok(), {long_job}, one)[0].text;
  ASSERT_GE(full.size(), 12u);
  std::vector<Job> firsts = {job(t.tok(), "Once upon a time", 5), long_job};
  firsts[1].stop = {full.substr(full.size() / 2, 3)};
  for (const Job& first : firsts) {
    Job second = job(t.tok(), "", 12);
    const std::vector<Answer> plain1 = serve(*t.be, t.tok(), {first}, one);
    // The conversation so far: the prompt, the tokens emitted (greedy, as
    // generate() gives them), and a new turn.
    second.prompt = first.prompt;
    {
      KvCache kv = t.be->make_cache(256);
      Sampler greedy(first.sampling);
      GenerateParams gp;
      gp.n_predict = plain1[0].n_completion;
      gp.stop_at_eog = false;
      generate(*t.be, kv, greedy, &t.tok(), first.prompt, gp, [&](int32_t id) {
        second.prompt.push_back(id);
        return true;
      });
    }
    for (int32_t id : t.tok().encode(" and then", false, true)) second.prompt.push_back(id);
    const std::vector<Answer> plain2 = serve(*t.be, t.tok(), {second}, one);
    // With spec, both on one slot: the second reuses the first's cache.
    Scheduler sched(*t.be, t.tok(), with_spec(one, oracle(t, 1.0), 8));
    const Answer a1 = wait(sched.submit(first));
    const Answer a2 = wait(sched.submit(second));
    expect_same(plain1, {a1}, "first");
    expect_same(plain2, {a2}, "second");
    // Every emitted token but the last is in the slot's cache, and reused.
    EXPECT_EQ(a2.n_cached, static_cast<int>(first.prompt.size()) + a1.n_completion - 1);
    if (first.stop.empty()) {
      EXPECT_EQ(a1.n_completion, 5);
      EXPECT_EQ(a1.finish, "length");
    } else {
      EXPECT_EQ(a1.finish, "stop");
      EXPECT_EQ(a1.text, full.substr(0, full.find(first.stop[0])));
    }
  }
}

// response_format: rows after a kept draft are sampled under the grammar as
// it stands after that draft (each token advances it before the next row),
// so sampled JSON answers are the plain ones too.
TEST(SchedulerSpec, GrammarJobsAreThePlainOnes) {
  Tiny t;
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
      "id":{"type":"integer"},"name":{"type":"string","maxLength":8},"tags":{"type":"array","items":{"enum":["a","b"]},
      "maxItems":4}},"required":["id","name","tags"],"additionalProperties":false})");
  auto g = std::make_shared<const grammar::Grammar>(grammar::compile_json_schema(schema));
  std::vector<Job> jobs = three_jobs(t.tok(), 1.0f);
  for (Job& j : jobs) {
    j.grammar = g;
    j.gen.n_predict = 60;
  }
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, base_options());
  // oracle_drafters' reference runs without the grammar: here the drafts
  // come from the plain answers' text, tokenized again.
  std::map<std::vector<int32_t>, std::vector<int32_t>> refs;
  for (size_t i = 0; i < jobs.size(); ++i) refs[jobs[i].prompt] = t.tok().encode(plain[i].text, false, true);
  const int64_t V = t.be->config().n_vocab;
  DrafterFactory from_answers = [&](const Job& j, const KvCache&) -> std::unique_ptr<Drafter> {
    return std::make_unique<OracleDrafter>(refs.at(j.prompt), j.prompt.size(), 0.8, V, j.sampling.seed);
  };
  Metrics m;
  expect_same(plain, serve(*t.be, t.tok(), jobs, with_spec(base_options(), from_answers), &m), "grammar, oracle");
  EXPECT_GT(metric(m.render(), "moestream_spec_accepted_tokens_total"), 0);
  expect_same(plain, serve(*t.be, t.tok(), jobs, with_spec(base_options(), ngram_drafters())), "grammar, ngram");
}

// A hybrid (qwen35moe): the rejected drafts' recurrent state goes back
// through the verify's token states; its MTP block drafts too.
TEST(SchedulerSpec, HybridGreedyAnswersAreThePlainOnesWithOracleNgramAndMtp) {
  test::TinyCpuModel t("sched_spec35_", "qwen35moe");
  const std::vector<Job> jobs = three_jobs(t.tok());
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, base_options());
  Metrics m;
  expect_same(plain, serve(*t.be, t.tok(), jobs, with_spec(base_options(), oracle(t, 0.6)), &m),
              "qwen35moe oracle:0.6");
  const std::string text = m.render();
  EXPECT_LT(metric(text, "moestream_spec_accepted_tokens_total"), metric(text, "moestream_spec_drafted_tokens_total"));
  expect_same(plain, serve(*t.be, t.tok(), jobs, with_spec(base_options(), ngram_drafters())), "qwen35moe ngram");
  // The model's MTP block: a drafter per slot, fed its own sequence's hidden
  // states out of the steps' shared forwards.
  Metrics mm;
  expect_same(plain, serve(*t.be, t.tok(), jobs, with_spec(base_options(), mtp_drafters(*t.be, KvType::F16), 3), &mm),
              "qwen35moe mtp");
  EXPECT_GT(metric(mm.render(), "moestream_spec_verifies_total"), 0);
}

// The tiny MTP block has random weights (its drafts are seldom right), so
// the routing of the hidden states is checked directly: two slots' drafters
// over one backend, their sequences run in one forward_seqs, each propose
// what a lone drafter of its sequence proposes.
TEST(SchedulerSpec, MtpDraftersOfSlotsEachReadTheirOwnSequence) {
  test::TinyCpuModel t("sched_spec_mtp_", "qwen35moe");
  const std::vector<std::vector<int32_t>> prompts = {t.tok().encode("Once upon a time there", true, true),
                                                     t.tok().encode("The experts of the village", true, true)};
  auto head = [](const std::vector<int32_t>& p) { return std::span<const int32_t>(p.data(), p.size() - 1); };
  std::vector<std::vector<int32_t>> alone(2);
  for (size_t i = 0; i < 2; ++i) {
    KvCache kv = t.be->make_cache(128);
    MtpDrafter d(*t.be, kv);
    std::vector<float> logits;
    t.be->forward(kv, head(prompts[i]), logits);
    d.propose(prompts[i], 3, alone[i]);
    ASSERT_EQ(alone[i].size(), 3u);
  }
  const DrafterFactory f = mtp_drafters(*t.be, KvType::F16);
  KvCache a = t.be->make_cache(128), b = t.be->make_cache(128);
  std::unique_ptr<Drafter> da = f(Job{}, a), db = f(Job{}, b);
  const std::vector<SeqTokens> step = {{&a, head(prompts[0]), true}, {&b, head(prompts[1]), true}};
  std::vector<float> logits;
  t.be->forward_seqs(step, logits);
  std::vector<int32_t> out;
  da->propose(prompts[0], 3, out);
  EXPECT_EQ(out, alone[0]);
  db->propose(prompts[1], 3, out);
  EXPECT_EQ(out, alone[1]);
}

// --spec draft's model: a one-layer model of the tiny model's vocabulary
// (another seed: its drafts are often wrong), on a CPU backend of its own.
struct TinyDraft {
  ThreadPool pool{2};
  std::string path;
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<CpuBackend> be;
  explicit TinyDraft(const std::string& prefix) {
    path = (std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()) + ".gguf")).string();
    GenOptions g;
    g.n_layer = 1;
    g.seed = 9;
    generate_model(g, path, pool);
    model = LoadedModel::open(path);
    be = std::make_unique<CpuBackend>(model->weights, pool);
  }
  ~TinyDraft() { std::filesystem::remove(path); }
};

// The draft pool serve sizes for these options: the model's, and room for
// each slot's drafts.
int64_t draft_pool(const Scheduler::Options& o) {
  return o.ctx + int64_t{o.parallel} * (o.spec.control.draft_max + 2 * o.kv_page_tokens);
}

TEST(SchedulerSpec, DraftModelGreedyAnswersAreThePlainOnes) {
  Tiny t;
  TinyDraft d("sched_spec_draft_");
  const std::vector<Job> jobs = three_jobs(t.tok());
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, base_options());
  Scheduler::Options o = with_spec(base_options(), nullptr);
  std::shared_ptr<const KvPages> pages;
  CountingBackend draft_counting(*d.be);
  o.spec.make_drafter = model_drafters(draft_counting, 0, draft_pool(o), &pages);
  CountingBackend counting(*t.be);
  Metrics m;
  expect_same(plain, serve(counting, t.tok(), jobs, o, &m), "draft model");
  const std::string text = m.render();
  EXPECT_GT(metric(text, "moestream_spec_drafted_tokens_total"), 0);
  EXPECT_GE(counting.max_verifies(), 3u) << "the slots' verifies in one step";
  EXPECT_GE(draft_counting.max_entries(), 3u) << "the slots' draft passes in one forward_seqs of the draft";
  ASSERT_NE(pages, nullptr) << "the CPU draft backend's caches are paged";
  EXPECT_EQ(pages->used_pages(), 0) << "every job's draft cache gave its pages back";
  // The model drafting for itself: its greedy drafts are its own tokens.
  Scheduler::Options self = with_spec(base_options(), nullptr);
  self.spec.make_drafter = model_drafters(*t.be, 0, draft_pool(self));
  Metrics ms;
  expect_same(plain, serve(*t.be, t.tok(), jobs, self, &ms), "the model drafting for itself");
  const std::string st = ms.render();
  EXPECT_GT(metric(st, "moestream_spec_accepted_tokens_total"), 0.9 * metric(st, "moestream_spec_drafted_tokens_total"));
}

// A pool too short for the three answers at once: jobs are preempted (their
// draft caches give their pages back with them) and re-read their text; the
// answers are the plain ones. A draft pool of one page: most draft passes
// find it short and cost their step's drafts only.
TEST(SchedulerSpec, DraftModelInAShortPagePoolKeepsThePlainAnswers) {
  Tiny t;
  TinyDraft d("sched_spec_draft_pool_");
  const std::vector<Job> jobs = three_jobs(t.tok());
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, base_options());
  Scheduler::Options o = with_spec(base_options(), nullptr);
  o.ctx = 96;  // 12 pages of 8 tokens: the three prompts and answers need more
  o.kv_page_tokens = 8;
  std::shared_ptr<const KvPages> pages;
  o.spec.make_drafter = model_drafters(*d.be, 0, draft_pool(o), &pages);
  {
    Scheduler sched(*t.be, t.tok(), o);
    std::vector<std::shared_ptr<Request>> rs;
    for (const Job& j : jobs) rs.push_back(sched.submit(j));
    std::vector<Answer> got;
    for (auto& r : rs) got.push_back(wait(r));
    expect_same(plain, got, "draft model in a 96-token pool");
    EXPECT_GE(sched.preemptions(), 1) << "the three answers could not be held at once";
  }
  EXPECT_EQ(pages->used_pages(), 0);
  Scheduler::Options tight = with_spec(base_options(), nullptr);
  tight.spec.make_drafter = model_drafters(*d.be, 0, 64, &pages);
  Metrics m;
  expect_same(plain, serve(*t.be, t.tok(), jobs, tight, &m), "a draft pool of one page");
  EXPECT_EQ(pages->n_pages(), 1);
  EXPECT_EQ(pages->used_pages(), 0);
}

// Sampled jobs get drafts drawn from the draft model's distributions, which
// sample_next judges with the rejection rule: the answers are not plain
// decoding's draws (their law is; tests/engine/speculative_sampling_test.cpp),
// but with a fixed K a seed fixes them, and another seed changes them. The model drafting
// for itself draws its drafts from the very distribution the rule compares
// them with, so the rule keeps every draft it judges (comparing each draft
// with an independent draw instead would keep few on this flat tiny model).
TEST(SchedulerSpec, SampledDraftModelRunsAreReproducibleWithASeed) {
  Tiny t;
  TinyDraft d("sched_spec_draft_temp_");
  const std::vector<Job> jobs = three_jobs(t.tok(), 0.9f);  // jobs[1] asks logprobs: point-mass judging
  Scheduler::Options o = with_spec(base_options(), nullptr);
  o.spec.make_drafter = model_drafters(*d.be, 0, draft_pool(o));
  Metrics m;
  const std::vector<Answer> a = serve(*t.be, t.tok(), jobs, o, &m);
  EXPECT_GT(metric(m.render(), "moestream_spec_drafted_tokens_total"), 0);
  const std::vector<Answer> b = serve(*t.be, t.tok(), jobs, o);
  expect_same(a, b, "the same seeds again");
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(a[i].finish, "length");
    EXPECT_EQ(a[i].n_completion, jobs[i].gen.n_predict);
    EXPECT_EQ(a[i].logprobs.size(), i == 1 ? static_cast<size_t>(jobs[1].gen.n_predict) : 0u);
  }
  std::vector<Job> reseeded = jobs;
  for (Job& j : reseeded) j.sampling.seed += 100;
  const std::vector<Answer> c = serve(*t.be, t.tok(), reseeded, o);
  EXPECT_NE(c[0].text + c[2].text, a[0].text + a[2].text) << "another seed, other draws";

  // The model drafting for itself: the share of judged drafts kept, with
  // the rule (no logprobs) and with point-mass judging (logprobs asked).
  auto self_acceptance = [&](int top_logprobs) {
    std::vector<Job> js = jobs;
    for (Job& j : js) j.top_logprobs = top_logprobs;
    Scheduler::Options self = with_spec(base_options(), nullptr);
    self.spec.make_drafter = model_drafters(*t.be, 0, draft_pool(self));
    Metrics ms;
    const std::vector<Answer> got = serve(*t.be, t.tok(), js, self, &ms);
    for (size_t i = 0; i < js.size(); ++i) EXPECT_EQ(got[i].n_completion, js[i].gen.n_predict);
    const std::string text = ms.render();
    double judged = 0;
    for (int pos = 0; pos < 4; ++pos)
      judged += std::max(0.0, metric(text, "moestream_spec_position_judged_total{pos=\"" + std::to_string(pos) + "\"}"));
    EXPECT_GT(judged, 20);
    return metric(text, "moestream_spec_accepted_tokens_total") / std::max(1.0, judged);
  };
  const double rule = self_acceptance(-1), point = self_acceptance(0);
  EXPECT_GE(rule, 0.97) << "q is p: the rule keeps every draft (up to rounding between the two caches' passes)";
  EXPECT_LT(point, rule - 0.2) << "point-mass judging keeps a draft only where an independent draw repeats it";
}

// --spec dflash: a tiny random DFlash drafter for the tiny model (target
// layers 1 and 3), one per slot over the backend's hook. Greedy answers are
// the plain ones; a second round of the same prompts reads them from the
// prompt cache and the drafters still draft (their contexts followed the
// slots' caches).
TEST(SchedulerSpec, DFlashGreedyAnswersAreThePlainOnes) {
  Tiny t;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("sched_spec_dflash_" + std::to_string(::getpid()) + ".gguf")).string();
  GenOptions g;
  g.preset = "tiny";
  generate_dflash(g, path);
  auto file = GgufFile::open(path);
  const DFlashWeights w = bind_dflash(*file);
  const std::vector<Job> jobs = three_jobs(t.tok());
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, base_options());
  {
    Metrics m;
    Scheduler sched(*t.be, t.tok(),
                    with_spec(base_options(), dflash_drafters(*t.be, w, t.model->weights, t.pool, KvType::F16)), &m);
    double drafted = 0;
    for (int round = 0; round < 2; ++round) {
      std::vector<std::shared_ptr<Request>> rs;
      for (const Job& j : jobs) rs.push_back(sched.submit(j));
      std::vector<Answer> got;
      for (auto& r : rs) got.push_back(wait(r));
      expect_same(plain, got, "dflash, round " + std::to_string(round));
      if (round == 1)
        for (const Answer& a : got) EXPECT_GT(a.n_cached, 0) << "the prompt cache was read";
      const double now = metric(m.render(), "moestream_spec_drafted_tokens_total");
      EXPECT_GT(now, drafted) << "round " << round << " drafted";
      drafted = now;
    }
  }
  t.be->set_hidden_hook(nullptr);
  t.be->set_hidden_layers({});
  std::filesystem::remove(path);
}

// A step carries at most prefill_chunk tokens: the decode tokens, a quarter
// kept for prompts while some wait, and the drafts in what is left.
TEST(SchedulerSpec, DraftsStayWithinTheStepsBudget) {
  Tiny t;
  Scheduler::Options o = base_options();
  o.prefill_chunk = 8;
  std::vector<Job> jobs = three_jobs(t.tok());
  jobs.push_back(job(t.tok(), "A long prompt that arrives later and is read in chunks of the budget", 10));
  const std::vector<Answer> plain = serve(*t.be, t.tok(), jobs, o);
  CountingBackend counting(*t.be);
  Metrics m;
  expect_same(plain, serve(counting, t.tok(), jobs, with_spec(o, oracle(t, 1.0), 8), &m),
              "budget 8");
  EXPECT_LE(counting.max_tokens(), 8u);
  EXPECT_GT(metric(m.render(), "moestream_spec_verifies_total"), 0);
}

TEST(SchedulerSpec, MetricsRenderTheSpeculationSeries) {
  Metrics m;
  m.spec_verify(4, 3, 2, 3);  // 4 drafts fed, 3 judged, 2 kept, 3 emitted
  m.spec_verify(2, 1, 0, 1);
  m.spec_step(0, 0.5);
  m.spec_step(6, 0.25);
  const std::string text = m.render();
  EXPECT_EQ(metric(text, "moestream_spec_verifies_total"), 2);
  EXPECT_EQ(metric(text, "moestream_spec_drafted_tokens_total"), 6);
  EXPECT_EQ(metric(text, "moestream_spec_accepted_tokens_total"), 2);
  EXPECT_EQ(metric(text, "moestream_spec_verify_emitted_tokens_total"), 4);
  EXPECT_EQ(metric(text, "moestream_spec_position_judged_total{pos=\"0\"}"), 2);
  EXPECT_EQ(metric(text, "moestream_spec_position_judged_total{pos=\"2\"}"), 1);
  EXPECT_EQ(metric(text, "moestream_spec_position_accepted_total{pos=\"0\"}"), 1);
  EXPECT_EQ(metric(text, "moestream_spec_position_accepted_total{pos=\"1\"}"), 1);
  EXPECT_EQ(metric(text, "moestream_spec_position_accepted_total{pos=\"2\"}"), 0);
  EXPECT_EQ(metric(text, "moestream_spec_steps_total{drafts=\"0\"}"), 1);
  EXPECT_EQ(metric(text, "moestream_spec_steps_total{drafts=\"4\"}"), 1);
  EXPECT_EQ(metric(text, "moestream_spec_step_seconds_total{drafts=\"4\"}"), 0.25);
}

}  // namespace
}  // namespace ms::server
