// Speculative sampling and the draft model (engine/speculative.h):
// - Sampler::distribution is what sample() draws from;
// - speculative_pick() (the rejection rule) leaves the target's distribution
//   whatever the draft's q is (chi-square over 200k draws, fixed seeds);
// - through decode_speculative on a fake model with a drafter that samples,
//   the joint distribution of the first three generated tokens is plain
//   decoding's (chi-square over 20k seeded runs against the exact law,
//   enumerated);
// - ModelDrafter: greedy output identical with and without a draft model for
//   K = 1..8 on tiny models (a 1-layer draft of the same vocabulary, and the
//   model drafting for itself), its cache following rollbacks, --draft-p-min,
//   and the vocabulary check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/speculative.h"
#include "engine/synthetic_vocab.h"
#include "tiny_gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ms {
namespace {

SamplerParams chain(uint64_t seed) {
  SamplerParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 6;
  sp.top_p = 0.97f;
  sp.min_p = 0.02f;
  sp.repeat_penalty = 1.0f;
  sp.seed = seed;
  return sp;
}

// Pearson's chi-square of observed counts against n * p over p's support
// (expected counts below 5 pooled into one cell); `outside` counts draws
// of tokens p gives no probability (a correct sampler has none).
struct ChiSquare {
  double stat = 0;
  int df = 0;
  int64_t outside = 0;
};
ChiSquare chi_square(const std::map<int64_t, int64_t>& counts, const std::map<int64_t, double>& p, int64_t n) {
  ChiSquare c;
  double pooled_obs = 0, pooled_exp = 0;
  int cells = 0;
  for (const auto& [key, prob] : p) {
    const double e = prob * double(n);
    auto it = counts.find(key);
    const double o = it == counts.end() ? 0.0 : double(it->second);
    if (e < 5) {
      pooled_obs += o;
      pooled_exp += e;
      continue;
    }
    c.stat += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_exp > 0) {
    c.stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++cells;
  }
  for (const auto& [key, count] : counts)
    if (!p.count(key)) c.outside += count;
  c.df = std::max(cells - 1, 1);
  return c;
}

// A bound a correct sampler exceeds with probability about 1e-6 or less:
// the chi-square's mean plus 6 standard deviations, plus slack for few
// degrees of freedom (df 7: 45, where P(chi2_7 > 45) < 2e-7).
double chi_bound(int df) { return df + 6.0 * std::sqrt(2.0 * df) + 10.0; }

std::map<int64_t, double> as_map(const std::vector<TokenProb>& d) {
  std::map<int64_t, double> m;
  for (const TokenProb& t : d) m[t.id] += t.p;
  return m;
}

TEST(SamplerDistribution, IsWhatSampleDrawsFrom) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.2f, 0.3f, -0.5f, 0.9f, -3.0f, 0.1f, 1.9f, -0.2f};
  for (const float rep : {1.0f, 1.5f}) {
    SamplerParams sp = chain(3);
    sp.repeat_penalty = rep;
    Sampler s(sp);
    s.accept(0);  // the penalty, when on, lowers token 0
    std::vector<TokenProb> d;
    s.distribution(logits.data(), 10, d);
    ASSERT_FALSE(d.empty());
    double sum = 0;
    for (const TokenProb& t : d) sum += t.p;
    EXPECT_NEAR(sum, 1.0, 1e-12);
    EXPECT_LE(d.size(), 6u) << "top-k 6";
    std::map<int64_t, int64_t> counts;
    constexpr int64_t kN = 100000;
    for (int64_t i = 0; i < kN; ++i) ++counts[s.sample(logits.data(), 10)];
    const ChiSquare c = chi_square(counts, as_map(d), kN);
    EXPECT_EQ(c.outside, 0);
    EXPECT_LT(c.stat, chi_bound(c.df)) << "repeat penalty " << rep;
    if (rep > 1.0f) EXPECT_NE(d[0].id, 0) << "the penalty applied";
  }
  SamplerParams g;
  g.temperature = 0;
  Sampler greedy(g);
  std::vector<TokenProb> d;
  greedy.distribution(logits.data(), 10, d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id, 0);
  EXPECT_EQ(d[0].p, 1.0);
}

TEST(SpeculativePick, OutputIsTheTargetsDistributionWhateverTheDraft) {
  const std::vector<float> target = {2.0f, 1.5f, 1.2f, 0.3f, -0.5f, 0.9f, -3.0f, 0.1f};
  const std::vector<float> draft = {1.0f, 2.2f, 0.1f, 0.8f, 1.5f, -1.0f, 0.5f, 0.0f};
  Sampler ps(chain(1));
  std::vector<TokenProb> p, qmodel, quniform;
  ps.distribution(target.data(), 8, p);
  ASSERT_GE(p.size(), 4u);
  ASSERT_LT(p.size(), 8u) << "some tokens cut (top-k, min-p)";
  ps.distribution(draft.data(), 8, qmodel);
  for (int32_t i = 0; i < 8; ++i) quniform.push_back({i, 1.0 / 8});
  const int32_t cut = 6;  // logit -3: outside p's support
  for (const TokenProb& t : p) ASSERT_NE(t.id, cut);
  struct Case {
    const char* name;
    std::vector<TokenProb> q;  // what the draft is drawn from
    bool point;                // pass q empty (a point-mass drafter)
  };
  const std::vector<Case> cases = {
      {"a draft model's distribution", qmodel, false},
      {"uniform, wider than p", quniform, false},
      {"a point mass on the target's best", {{p[0].id, 1.0}}, true},
      {"a point mass on an unlikely token", {{p.back().id, 1.0}}, true},
      {"a point mass on a token p cuts", {{cut, 1.0}}, true},
  };
  const std::map<int64_t, double> pm = as_map(p);
  constexpr int64_t kN = 200000;
  for (const Case& c : cases) {
    Sampler rng(chain(11)), drafter(chain(12));
    std::map<int64_t, int64_t> counts, drafted;
    int64_t accepted = 0;
    const std::vector<TokenProb> none;
    for (int64_t i = 0; i < kN; ++i) {
      const int32_t x = c.point ? c.q[0].id : drafter.draw_from(c.q);
      ++drafted[x];
      const SpecPick pick = speculative_pick(p, c.point ? none : c.q, x, rng);
      ++counts[pick.token];
      if (pick.accepted) {
        ++accepted;
        EXPECT_EQ(pick.token, x);
      }
    }
    const ChiSquare chi = chi_square(counts, pm, kN);
    EXPECT_EQ(chi.outside, 0) << c.name;
    EXPECT_LT(chi.stat, chi_bound(chi.df)) << c.name;
    // The acceptance rate is the overlap sum_x min(p(x), q(x)) (the most any
    // rule keeping p can accept), within 6 standard deviations.
    std::map<int64_t, double> qm = as_map(c.q);
    double overlap = 0;
    for (const auto& [id, pr] : pm) overlap += std::min(pr, qm.count(id) ? qm[id] : 0.0);
    const double sd = std::sqrt(overlap * (1 - overlap) / double(kN)) + 1e-9;
    EXPECT_NEAR(double(accepted) / double(kN), overlap, 6 * sd + 1e-6) << c.name;
    // The test can tell: the drafts themselves (what accepting every draft
    // would emit) are far from p.
    EXPECT_GT(chi_square(drafted, pm, kN).stat, 10 * chi_bound(chi.df)) << c.name;
  }
}

// ---------------------------------------------------------------- through the verify loop

// A fake model over 6 tokens: the next token's logits are a fixed function of
// the last two tokens of the sequence.
constexpr int32_t kV = 6;
float table_logit(int32_t prev, int32_t last, int32_t v) {
  return 1.6f * std::sin(1.7f * float(v) + 0.9f * float(last) + 0.4f * float(prev) + 0.3f);
}

class TableBackend : public Backend {
 public:
  TableBackend() {
    cfg_.n_vocab = kV;
    cfg_.n_layer = 1;
  }
  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool all_logits) override {
    const int64_t n = static_cast<int64_t>(tokens.size());
    kv.check_room(n);
    std::vector<int32_t>& seq = seqs_[&kv];
    seq.resize(static_cast<size_t>(kv.n_past()));
    logits.assign((all_logits ? static_cast<size_t>(n) : 1) * kV, 0.0f);
    kv.begin_forward();
    for (int64_t i = 0; i < n; ++i) {
      seq.push_back(tokens[static_cast<size_t>(i)]);
      if (!all_logits && i != n - 1) continue;
      float* row = logits.data() + (all_logits ? static_cast<size_t>(i) : 0) * kV;
      const int32_t last = seq.back(), prev = seq.size() > 1 ? seq[seq.size() - 2] : 0;
      for (int32_t v = 0; v < kV; ++v) row[v] = table_logit(prev, last, v);
    }
    kv.advance(n);
    kv.end_forward(n);
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return KvCache(1, 1, 32, ctx, type); }
  const ModelConfig& config() const override { return cfg_; }
  std::string name() const override { return "table"; }
  void set_route_hook(RouteHook, bool) override {}

 private:
  ModelConfig cfg_;
  std::map<const KvCache*, std::vector<int32_t>> seqs_;
};

// Drafts by sampling its own (different) table, with the distributions.
class SamplingDrafter : public Drafter {
 public:
  explicit SamplingDrafter(uint64_t seed) : s_(chain(seed)) {}
  void propose(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) override {
    out.clear();
    dists_.clear();
    std::vector<int32_t> seq(h.begin(), h.end());
    for (int j = 0; j < max_tokens; ++j) {
      float row[kV];
      const int32_t last = seq.back(), prev = seq.size() > 1 ? seq[seq.size() - 2] : 0;
      for (int32_t v = 0; v < kV; ++v) row[v] = table_logit(prev, last, (v + 1) % kV) * 0.7f + 0.2f * float(v);
      std::vector<TokenProb> d;
      s_.distribution(row, kV, d);
      const int32_t x = s_.draw_from(d);
      out.push_back(x);
      seq.push_back(x);
      dists_.push_back(std::move(d));
    }
  }
  std::string name() const override { return "sampling"; }
  const std::vector<std::vector<TokenProb>>& draft_distributions() const override { return dists_; }

 private:
  Sampler s_;
  std::vector<std::vector<TokenProb>> dists_;
};

TEST(SpeculativeSampling, JointDistributionOfTheNextTokensIsPlainDecodings) {
  TableBackend be;
  const std::vector<int32_t> prompt = {1, 2};
  SamplerParams sp = chain(0);
  sp.top_k = 5;
  sp.repeat_penalty = 1.3f;  // the chain must see each row's own history
  // The exact law of three tokens of plain decoding, by enumeration.
  std::map<int64_t, double> law;
  auto dist_after = [&](const std::vector<int32_t>& seq) {
    Sampler s(sp);
    for (int32_t t : seq) s.accept(t);
    float row[kV];
    for (int32_t v = 0; v < kV; ++v) row[v] = table_logit(seq[seq.size() - 2], seq.back(), v);
    std::vector<TokenProb> d;
    s.distribution(row, kV, d);
    return d;
  };
  for (const TokenProb& a : dist_after(prompt))
    for (const TokenProb& b : dist_after({1, 2, a.id}))
      for (const TokenProb& c : dist_after({1, 2, a.id, b.id})) law[(a.id * kV + b.id) * kV + c.id] += a.p * b.p * c.p;
  constexpr int kRuns = 20000;
  std::map<int64_t, int64_t> counts;
  int64_t verifies = 0, accepted = 0, drafted = 0;
  for (int r = 0; r < kRuns; ++r) {
    SamplerParams s = sp;
    s.seed = 1000 + static_cast<uint64_t>(r);
    Sampler sampler(s);
    SamplingDrafter d(500000 + static_cast<uint64_t>(r));
    GenerateParams gp;
    gp.n_predict = 3;
    gp.stop_at_eog = false;
    gp.spec.drafter = &d;
    gp.spec.control.draft_max = 2;
    gp.spec.control.adaptive = false;
    KvCache kv = be.make_cache(16);
    std::vector<int32_t> out;
    const GenerateStats st = generate(be, kv, sampler, nullptr, prompt, gp, [&](int32_t id) {
      out.push_back(id);
      return true;
    });
    ASSERT_EQ(out.size(), 3u);
    ++counts[(out[0] * kV + out[1]) * kV + out[2]];
    verifies += st.spec.verifies;
    accepted += st.spec.accepted;
    drafted += st.spec.drafted;
  }
  const ChiSquare c = chi_square(counts, law, kRuns);
  std::printf("chi-square %.1f on %d degrees of freedom (bound %.1f); %lld verifies, %lld of %lld drafts kept\n",
              c.stat, c.df, chi_bound(c.df), static_cast<long long>(verifies), static_cast<long long>(accepted),
              static_cast<long long>(drafted));
  EXPECT_EQ(c.outside, 0);
  EXPECT_LT(c.stat, chi_bound(c.df));
  EXPECT_GT(c.df, 20) << "a joint law with many outcomes";
  EXPECT_GT(accepted, drafted / 10) << "drafts kept: the rule's acceptance path is exercised";
  EXPECT_LT(accepted, drafted) << "and its rejection path";
}

// ---------------------------------------------------------------- the draft model

struct Model {
  std::unique_ptr<LoadedModel> m;
  std::unique_ptr<CpuBackend> be;
  Model(const std::string& arch, uint64_t seed, int n_layer, ThreadPool& pool)
      : m(LoadedModel::open(test::tiny_gguf(arch, "q8_0", seed, n_layer))) {
    be = std::make_unique<CpuBackend>(m->weights, pool);
  }
};

struct SpecRun {
  std::vector<int32_t> tokens;
  GenerateStats st;
  std::vector<float> next_logits;
};

SpecRun run(Backend& be, std::span<const int32_t> prompt, Drafter* d, int k, int n, const SamplerParams& sp) {
  KvCache kv = be.make_cache(96);
  Sampler sampler(sp);
  GenerateParams gp;
  gp.n_predict = n;
  gp.stop_at_eog = false;
  gp.spec.drafter = d;
  gp.spec.control.draft_max = k;
  gp.spec.control.adaptive = false;
  SpecRun r;
  r.st = generate(be, kv, sampler, nullptr, prompt, gp, [&](int32_t id) {
    r.tokens.push_back(id);
    return true;
  });
  const int32_t next[1] = {r.tokens.back()};
  be.forward(kv, next, r.next_logits);
  return r;
}

SamplerParams greedy() {
  SamplerParams sp;
  sp.temperature = 0;
  return sp;
}

TEST(ModelDrafter, GreedyOutputIsPlainDecodingsForEveryK) {
  ThreadPool pool(2);
  for (const char* arch : {"qwen3moe", "qwen35moe"}) {
    Model target(arch, 41, 0, pool);
    Model small("qwen3moe", 43, 1, pool);  // another model, one layer, the same vocabulary
    ASSERT_EQ(small.m->weights.cfg.n_vocab, target.m->weights.cfg.n_vocab);
    check_draft_vocab(*target.m->tokenizer, *small.m->tokenizer, target.m->weights.cfg.n_vocab,
                      small.m->weights.cfg.n_vocab);
    const auto prompt = test::random_tokens(6, 21);
    constexpr int kN = 24;
    const SpecRun want = run(*target.be, prompt, nullptr, 1, kN, greedy());
    int64_t self_drafted = 0, self_accepted = 0, small_verifies = 0;
    for (int k = 1; k <= 8; ++k) {
      ModelDrafter d(*small.be, {.sampling = greedy(), .p_min = 0, .ctx = 96});
      const SpecRun o = run(*target.be, prompt, &d, k, kN, greedy());
      EXPECT_EQ(o.tokens, want.tokens) << arch << " K=" << k;
      EXPECT_EQ(o.next_logits, want.next_logits) << arch << " K=" << k << ": the cache as plain decoding's";
      EXPECT_GT(d.forwards(), 0);
      small_verifies += o.st.spec.verifies;
      // The model drafting for itself (the CPU's batch rows are its decode
      // rows): nearly every draft is kept.
      ModelDrafter self(*target.be, {.sampling = greedy(), .p_min = 0, .ctx = 96});
      const SpecRun s = run(*target.be, prompt, &self, k, kN, greedy());
      EXPECT_EQ(s.tokens, want.tokens) << arch << " self K=" << k;
      self_drafted += s.st.spec.drafted;
      self_accepted += s.st.spec.accepted;
    }
    EXPECT_GT(small_verifies, 0);
    EXPECT_GE(self_accepted * 10, self_drafted * 9) << arch;
  }
}

TEST(ModelDrafter, SampledRunKeepsACacheThatGoesOnAsTheTokensSay) {
  ThreadPool pool(2);
  Model target("qwen3moe", 41, 0, pool), small("qwen3moe", 43, 1, pool);
  const auto prompt = test::random_tokens(5, 22);
  SamplerParams sp = chain(9);
  sp.top_k = 40;
  ModelDrafter d(*small.be, {.sampling = sp, .p_min = 0, .ctx = 96});
  const SpecRun o = run(*target.be, prompt, &d, 4, 20, sp);
  ASSERT_EQ(o.tokens.size(), 20u);
  EXPECT_GT(o.st.spec.verifies, 0);
  // A fresh cache fed the prompt and the tokens one by one gives the logits
  // the speculative run's cache gives after its last token.
  KvCache kv = target.be->make_cache(96);
  std::vector<float> lg;
  target.be->forward(kv, prompt, lg);
  for (int32_t t : o.tokens) {
    const int32_t one[1] = {t};
    target.be->forward(kv, one, lg);
  }
  EXPECT_EQ(lg, o.next_logits);
}

TEST(ModelDrafter, FollowsTheHistoryThroughRollbacks) {
  ThreadPool pool(2);
  Model small("qwen3moe", 43, 1, pool);
  const auto base = test::random_tokens(10, 23);
  ModelDrafter kept(*small.be, {.sampling = greedy(), .p_min = 0, .ctx = 64});
  std::vector<int32_t> out, fresh_out;
  // Histories that share shorter and longer prefixes with the last one.
  std::vector<std::vector<int32_t>> hs;
  for (int cut : {10, 7, 9, 3, 10, 1}) {
    std::vector<int32_t> h(base.begin(), base.begin() + cut);
    h.push_back(static_cast<int32_t>(100 + cut));
    hs.push_back(h);
  }
  for (const auto& h : hs) {
    kept.propose(h, 5, out);
    ModelDrafter fresh(*small.be, {.sampling = greedy(), .p_min = 0, .ctx = 64});
    fresh.propose(h, 5, fresh_out);
    EXPECT_EQ(out, fresh_out) << "history of " << h.size();
    EXPECT_EQ(out.size(), 5u);
    EXPECT_EQ(kept.n_cached(), static_cast<int64_t>(h.size() + 4)) << "the history and all drafts but the last";
  }
}

// Counts the entries of each forward_seqs call (propose_all's batching).
class SeqCounter final : public Backend {
 public:
  explicit SeqCounter(Backend& inner) : be_(inner) {}
  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool all) override {
    ++forwards;
    be_.forward(kv, tokens, logits, all);
  }
  void forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) override {
    max_entries = std::max(max_entries, seqs.size());
    ++calls;
    be_.forward_seqs(seqs, logits);
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return be_.make_cache(ctx, type); }
  const ModelConfig& config() const override { return be_.config(); }
  std::string name() const override { return "counter"; }
  void set_route_hook(RouteHook hook, bool want_hidden = false) override {
    be_.set_route_hook(std::move(hook), want_hidden);
  }
  size_t max_entries = 0;
  int calls = 0, forwards = 0;

 private:
  Backend& be_;
};

// Three draft-model proposals made together (a server step's slots): each
// is what its drafter's own propose() gives -- greedy, sampled (with its
// distributions), and in a second round through the prefix each cache kept
// (one history went on with two of its drafts, one went back) -- and their
// passes went through forward_seqs, one call per round, with every drafting
// proposal in it. A non-model drafter among them proposes alone.
TEST(ModelDrafter, ProposalsMadeTogetherAreEachOnesOwn) {
  ThreadPool pool(2);
  Model small("qwen3moe", 43, 1, pool);
  SeqCounter counter(*small.be);
  SamplerParams sampled = chain(5);
  sampled.top_k = 40;
  const std::vector<SamplerParams> params = {greedy(), sampled, greedy()};
  std::vector<std::vector<int32_t>> hs = {test::random_tokens(9, 31), test::random_tokens(4, 32),
                                          test::random_tokens(12, 33)};
  std::vector<std::unique_ptr<ModelDrafter>> together, alone;
  for (const SamplerParams& sp : params) {
    together.push_back(std::make_unique<ModelDrafter>(counter, ModelDrafter::Options{sp, 0, 64}));
    alone.push_back(std::make_unique<ModelDrafter>(*small.be, ModelDrafter::Options{sp, 0, 64}));
  }
  auto same_q = [](const std::vector<std::vector<TokenProb>>& a, const std::vector<std::vector<TokenProb>>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].size() != b[i].size()) return false;
      for (size_t j = 0; j < a[i].size(); ++j)
        if (a[i][j].id != b[i][j].id || a[i][j].p != b[i][j].p) return false;
    }
    return true;
  };
  std::vector<std::vector<int32_t>> outs(4), want(3);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      hs[0].insert(hs[0].end(), outs[0].begin(), outs[0].begin() + 2);  // two drafts kept, then another token
      hs[0].push_back(7);
      hs[1].push_back(8);
      hs[2].resize(6);  // went back
      hs[2].push_back(9);
    }
    NgramDrafter ngram;
    std::vector<Proposal> ps;
    for (size_t i = 0; i < hs.size(); ++i) ps.push_back({together[i].get(), hs[i], 5, &outs[i], {}});
    ps.push_back({&ngram, hs[0], 3, &outs[3], {}});
    counter.max_entries = 0;
    counter.calls = 0;
    counter.forwards = 0;
    propose_all(ps);
    for (size_t i = 0; i < hs.size(); ++i) {
      EXPECT_TRUE(ps[i].error.empty()) << ps[i].error;
      alone[i]->propose(hs[i], 5, want[i]);
      EXPECT_EQ(outs[i], want[i]) << "proposal " << i << ", round " << round;
      EXPECT_EQ(outs[i].size(), 5u);
      EXPECT_TRUE(same_q(together[i]->draft_distributions(), alone[i]->draft_distributions())) << "proposal " << i;
      EXPECT_EQ(together[i]->n_cached(), alone[i]->n_cached()) << "proposal " << i;
    }
    EXPECT_EQ(together[1]->draft_distributions().size(), 5u) << "the sampled one's q";
    EXPECT_EQ(counter.forwards, 0) << "no pass of its own";
    EXPECT_EQ(counter.calls, 5) << "a catch-up round and one per draft but the last";
    EXPECT_EQ(counter.max_entries, 3u);
  }
}

TEST(ModelDrafter, PMinStopsDraftingAtAnUnlikelyToken) {
  ThreadPool pool(2);
  Model small("qwen3moe", 43, 1, pool);
  const auto h = test::random_tokens(8, 24);
  std::vector<int32_t> out;
  ModelDrafter all(*small.be, {.sampling = greedy(), .p_min = 0, .ctx = 64});
  all.propose(h, 6, out);
  EXPECT_EQ(out.size(), 6u);
  ModelDrafter none(*small.be, {.sampling = greedy(), .p_min = 1.0, .ctx = 64});
  none.propose(h, 6, out);
  EXPECT_TRUE(out.empty()) << "no token of a random model is certain";
  EXPECT_THROW(ModelDrafter(*small.be, {.sampling = greedy(), .p_min = 1.5, .ctx = 64}), Error);
}

TEST(ModelDrafter, VocabularyMustMatch) {
  const Tokenizer a(make_synthetic_vocab(512));
  Vocab other = make_synthetic_vocab(512);
  EXPECT_NO_THROW(check_draft_vocab(a, Tokenizer(make_synthetic_vocab(512)), 512, 512));
  try {
    check_draft_vocab(a, a, 512, 600);
    ADD_FAILURE() << "sizes differ";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("600"), std::string::npos) << e.what();
  }
  std::swap(other.tokens[300], other.tokens[301]);
  try {
    check_draft_vocab(a, Tokenizer(std::move(other)), 512, 512);
    ADD_FAILURE() << "token strings differ";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 300"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ms
