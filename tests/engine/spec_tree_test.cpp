// Draft trees (engine/draft_tree.h; docs/speculative.md "Draft trees"):
//  - the best-first builder on fake distributions: the nodes kept are the
//    `budget` most likely paths (brute force over every path), best first,
//    parents before children; bad candidates skipped, bounds kept;
//  - ancestor sets (SeqTokens::parents) checked, with errors naming what is
//    wrong; backends and models without trees refuse them;
//  - the CPU backend's tree forward: each node's logits bit-equal to its
//    path decoded as a chain, and after keep_tree_path the cache goes on as
//    plain decoding's, bit for bit (qwen3moe, mixtral, gpt-oss with its
//    window and sinks; f16, f32, q8_0 and paged caches);
//  - generation with trees: greedy and sampled output identical to plain
//    decoding for K = 1..8 and budgets 1..24 (oracle candidates, a draft
//    model, DFlash), with trees accepting more per verify than chains where
//    the first guess is often wrong; the hybrid falls back to chains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/backend.h"
#include "engine/cpu_backend.h"
#include "engine/draft_tree.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/speculative.h"
#include "engine/speculative_dflash.h"
#include "format/gguf.h"
#include "model/dflash_weights.h"
#include "tiny_gguf.h"
#include "util/error.h"
#include "spec_test_util.h"

namespace ms {
namespace {

// ---------------------------------------------------------------- the builder

// 4 positions of 3 candidates, distinct random probabilities (no ties).
std::vector<std::vector<TokenProb>> fake_candidates(uint32_t seed, int positions = 4, int k = 3) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.01, 1.0);
  std::vector<std::vector<TokenProb>> c(static_cast<size_t>(positions));
  for (int d = 0; d < positions; ++d) {
    std::vector<double> p;
    double sum = 0;
    for (int i = 0; i < k; ++i) sum += p.emplace_back(u(rng));
    std::sort(p.begin(), p.end(), std::greater<>());
    for (int i = 0; i < k; ++i) c[static_cast<size_t>(d)].push_back({100 * d + 7 * i + 1, p[static_cast<size_t>(i)] / sum});
  }
  return c;
}

// Every path's log score (every node of the full tree), by brute force.
void all_paths(const std::vector<std::vector<TokenProb>>& c, size_t d, double score, std::vector<double>& out) {
  if (d == c.size()) return;
  for (const TokenProb& t : c[d]) {
    out.push_back(score + std::log(t.p));
    all_paths(c, d + 1, score + std::log(t.p), out);
  }
}

TEST(DraftTree, BestFirstKeepsTheMostLikelyPaths) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto c = fake_candidates(seed);
    std::vector<double> every;
    all_paths(c, 0, 0.0, every);
    std::sort(every.begin(), every.end(), std::greater<>());
    for (int budget = 0; budget <= static_cast<int>(every.size()) + 3; ++budget) {
      const DraftTree t = build_draft_tree(5, c, budget, 4, 1000);
      const size_t want = std::min<size_t>(static_cast<size_t>(budget), every.size());
      ASSERT_EQ(t.size(), want + 1) << "budget " << budget;
      EXPECT_EQ(t.tokens[0], 5);
      EXPECT_EQ(t.parents[0], -1);
      for (size_t i = 1; i < t.size(); ++i) {
        const int32_t p = t.parents[i];
        ASSERT_GE(p, 0);
        ASSERT_LT(p, static_cast<int32_t>(i)) << "a parent precedes its child";
        EXPECT_EQ(t.depth[i], t.depth[static_cast<size_t>(p)] + 1);
        // The node's score is its parent's times its candidate's probability.
        const auto& cd = c[static_cast<size_t>(t.depth[i] - 1)];
        const auto it = std::find_if(cd.begin(), cd.end(), [&](const TokenProb& x) { return x.id == t.tokens[i]; });
        ASSERT_NE(it, cd.end());
        EXPECT_NEAR(t.log_score[i], t.log_score[static_cast<size_t>(p)] + std::log(it->p), 1e-12);
        if (i > 1) EXPECT_LE(t.log_score[i], t.log_score[i - 1] + 1e-12) << "best first, node " << i;
        EXPECT_EQ(t.child(p, t.tokens[i]), static_cast<int32_t>(i));
      }
      // The kept scores are the best `want` of all paths.
      std::vector<double> got(t.log_score.begin() + 1, t.log_score.end());
      std::sort(got.begin(), got.end(), std::greater<>());
      for (size_t i = 0; i < want; ++i) EXPECT_NEAR(got[i], every[i], 1e-12) << "budget " << budget << ", rank " << i;
    }
  }
}

TEST(DraftTree, SpineFirstThenTheMostLikelyOtherPaths) {
  for (uint32_t seed : {4u, 5u}) {
    // Flat-ish candidates: without a spine the tree goes wide first.
    const auto c = fake_candidates(seed, 5, 4);
    for (int budget : {0, 1, 3, 5, 6, 9, 20, 60}) {
      const DraftTree t = build_draft_tree(5, c, budget, 5, 1000, /*spine=*/true);
      const int spine = std::min(budget, 5);
      ASSERT_EQ(t.size(), static_cast<size_t>(std::min(budget, 4 + 16 + 64 + 256 + 1024)) + 1);
      // Nodes 1..spine: the chain of first choices.
      for (int i = 1; i <= spine; ++i) {
        EXPECT_EQ(t.parents[static_cast<size_t>(i)], i - 1);
        EXPECT_EQ(t.tokens[static_cast<size_t>(i)], c[static_cast<size_t>(i - 1)][0].id) << "budget " << budget;
      }
      // The others: the best of every path off that chain (brute force), parents first.
      std::vector<double> off;
      std::function<void(size_t, double, bool)> walk = [&](size_t d, double score, bool on_spine) {
        if (d == c.size()) return;
        for (size_t r = 0; r < c[d].size(); ++r) {
          const double s = score + std::log(c[d][r].p);
          const bool on = on_spine && r == 0 && static_cast<int>(d) < spine;
          if (!on) off.push_back(s);
          walk(d + 1, s, on);
        }
      };
      walk(0, 0.0, true);
      std::sort(off.begin(), off.end(), std::greater<>());
      std::vector<double> got(t.log_score.begin() + 1 + spine, t.log_score.end());
      std::sort(got.begin(), got.end(), std::greater<>());
      ASSERT_LE(got.size(), off.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], off[i], 1e-12) << "budget " << budget << ", rank " << i;
      for (size_t i = 1; i < t.size(); ++i) EXPECT_LT(t.parents[i], static_cast<int32_t>(i));
      std::set<std::pair<int32_t, int32_t>> seen;  // (parent, token): no node twice
      for (size_t i = 1; i < t.size(); ++i) EXPECT_TRUE(seen.insert({t.parents[i], t.tokens[i]}).second);
    }
  }
}

TEST(DraftTree, ATopHeavyDrafterGivesAChainAndAFlatOneAFan) {
  // p = 0.9 first everywhere: the chain of first choices comes first.
  std::vector<std::vector<TokenProb>> sure(5, {{1, 0.9}, {2, 0.05}, {3, 0.05}});
  const DraftTree chain = build_draft_tree(0, sure, 5, 5, 10);
  EXPECT_TRUE(chain.is_chain());
  EXPECT_EQ(chain.max_depth(), 5);
  // Uniform over 3: the three first-position tokens before anything deeper.
  std::vector<std::vector<TokenProb>> flat(5, {{1, 0.34}, {2, 0.33}, {3, 0.33}});
  const DraftTree fan = build_draft_tree(0, flat, 3, 5, 10);
  EXPECT_EQ(fan.max_depth(), 1);
  EXPECT_TRUE(fan.has_children(0));
  EXPECT_FALSE(fan.has_children(1));
  EXPECT_EQ(fan.child(0, 3), 3);
  EXPECT_EQ(fan.child(0, 4), -1);
}

TEST(DraftTree, BoundsAndBadCandidates) {
  const auto c = fake_candidates(9);
  EXPECT_EQ(build_draft_tree(0, c, 100, 2, 1000).max_depth(), 2) << "max_depth bounds the depth";
  EXPECT_EQ(build_draft_tree(0, c, 100, 2, 1000).size(), 1u + 3 + 9);
  EXPECT_EQ(build_draft_tree(0, c, 100, 0, 1000).size(), 1u);
  EXPECT_EQ(build_draft_tree(0, {}, 100, 8, 1000).size(), 1u);
  // Ids outside the vocabulary and p <= 0 skipped; a repeated id ends the list.
  std::vector<std::vector<TokenProb>> bad = {{{-1, 0.5}, {4, 0.3}, {999, 0.1}, {5, 0.0}, {6, 0.1}, {4, 0.05}, {7, 0.05}},
                                             {{8, 1.0}}};
  const DraftTree t = build_draft_tree(0, bad, 100, 8, 999);
  std::set<int32_t> depth1;
  for (size_t i = 1; i < t.size(); ++i)
    if (t.depth[i] == 1) depth1.insert(t.tokens[i]);
  EXPECT_EQ(depth1, (std::set<int32_t>{4, 6}));
  EXPECT_EQ(t.size(), 1u + 2 + 2);
  // A position with no usable candidate ends the depth there.
  std::vector<std::vector<TokenProb>> gap = {{{1, 0.5}}, {{-3, 0.5}}, {{2, 0.5}}};
  EXPECT_EQ(build_draft_tree(0, gap, 10, 8, 100).max_depth(), 1);
  EXPECT_THROW(build_draft_tree(0, c, -1, 2, 1000), Error);
  EXPECT_THROW(build_draft_tree(0, c, 1, -2, 1000), Error);
}

TEST(DraftTree, TopCandidatesAreTheSoftmaxsBest) {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  std::vector<TokenProb> top;
  top_candidates(logits.data(), 5, 3, top);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1) << "ties: the lower id first";
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 4);
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - 3.0);
  EXPECT_NEAR(top[0].p, 1.0 / sum, 1e-12);
  EXPECT_NEAR(top[2].p, std::exp(-1.0) / sum, 1e-12);
  top_candidates(logits.data(), 5, 9, top);
  EXPECT_EQ(top.size(), 5u);
}

// ---------------------------------------------------------------- ancestor sets

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenTreeChecks, BadAncestorSetsAreClearErrors) {
  auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  const std::vector<int32_t> toks = {1, 2, 3};
  auto check = [&](std::vector<int32_t> parents) {
    return error_of([&] { check_token_tree(parents, toks.size(), "tree"); });
  };
  EXPECT_EQ(check({-1, 0, 1}), "");
  EXPECT_EQ(check({-1, -1, 0}), "") << "several children of the prefix";
  EXPECT_TRUE(has(check({-1, 2, 0}), "token 1's parent is 2")) << check({-1, 2, 0});
  EXPECT_TRUE(has(check({-1, 1, 0}), "token 1's parent is 1"));
  EXPECT_TRUE(has(check({0, -1, 0}), "token 0's parent is 0"));
  EXPECT_TRUE(has(check({-1, -5, 0}), "token 1's parent is -5"));
  EXPECT_TRUE(has(check({-1, 0}), "2 parents for 3 tokens"));
  std::vector<int32_t> depth;
  check_token_tree(std::vector<int32_t>{-1, 0, 0, 2, -1}, 5, "t", &depth);
  EXPECT_EQ(depth, (std::vector<int32_t>{0, 1, 1, 2, 0}));

  KvCache kv(1, 1, 32, 64);
  const std::vector<int32_t> parents = {-1, 0, 1};
  const SeqTokens e{&kv, toks, true, true, parents};
  const std::string none = error_of([&] { check_seq_tokens(std::span<const SeqTokens>(&e, 1), 100, 0, "cuda"); });
  EXPECT_TRUE(has(none, "entry 0 carries an ancestor set")) << none;
  EXPECT_TRUE(has(none, "the cuda backend does not run")) << none;
  const std::string big = error_of([&] { check_seq_tokens(std::span<const SeqTokens>(&e, 1), 100, 2, "cpu"); });
  EXPECT_TRUE(has(big, "a token tree of 3 tokens; the cpu backend runs trees of at most 2")) << big;
  EXPECT_EQ(error_of([&] { check_seq_tokens(std::span<const SeqTokens>(&e, 1), 100, 3, "cpu"); }), "");
  const std::vector<int32_t> short_parents = {-1, 0};
  const SeqTokens e2{&kv, toks, true, true, short_parents};
  EXPECT_TRUE(has(error_of([&] { check_seq_tokens(std::span<const SeqTokens>(&e2, 1), 100, 8, "cpu"); }),
                  "2 parents for 3 tokens"));
}

struct Tiny {
  std::unique_ptr<LoadedModel> m;
  ThreadPool pool{2};
  std::unique_ptr<CpuBackend> be;
  explicit Tiny(const std::string& arch, CpuBackend::Options o = {})
      : m(LoadedModel::open(test::tiny_gguf(arch, "q8_0", 41))) {
    be = std::make_unique<CpuBackend>(m->weights, pool, o);
  }
};

TEST(TokenTreeChecks, BackendsAndModelsWithoutTreesRefuseThem) {
  // A hybrid's cache keeps a path only right after that tree's forward (its
  // node states are gone otherwise).
  Tiny hybrid("qwen35moe");
  KvCache kv = hybrid.be->make_cache(64);
  std::vector<float> logits;
  const std::vector<int32_t> toks = {1, 2, 3}, parents = {-1, 0, 0};
  hybrid.be->forward(kv, toks, logits);
  const std::string stale = error_of([&] { kv.keep_path(0, std::vector<int32_t>{0, 1}); });
  EXPECT_NE(stale.find("last forward was not that token tree"), std::string::npos) << stale;
  EXPECT_EQ(kv.n_past(), 3);

  Tiny attn("qwen3moe", {.max_batch = 4});
  KvCache kv2 = attn.be->make_cache(64);
  EXPECT_EQ(attn.be->max_token_tree(kv2), 4) << "one batch";
  const std::vector<int32_t> five = {1, 2, 3, 4, 5}, five_parents = {-1, 0, 0, 1, 1};
  const SeqTokens big{&kv2, five, true, true, five_parents};
  EXPECT_NE(error_of([&] { attn.be->forward_seqs(std::span<const SeqTokens>(&big, 1), logits); }).find("at most 4"),
            std::string::npos);
  // The base class's forward_seqs (backends that do not override it) refuses too.
  class Plain : public Backend {
   public:
    explicit Plain(Backend& b) : b_(b) {}
    void forward(KvCache& kv, std::span<const int32_t> t, std::vector<float>& l, bool all) override { b_.forward(kv, t, l, all); }
    KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return b_.make_cache(ctx, type); }
    const ModelConfig& config() const override { return b_.config(); }
    std::string name() const override { return "plain"; }
    void set_route_hook(RouteHook, bool) override {}
   private:
    Backend& b_;
  } plain(*attn.be);
  const SeqTokens small{&kv2, toks, true, true, parents};
  EXPECT_NE(error_of([&] { plain.forward_seqs(std::span<const SeqTokens>(&small, 1), logits); }).find("the plain backend does not run"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plain.keep_tree_path(kv2, 0, std::vector<int32_t>{0}); }).find("plain backend"),
            std::string::npos);
  EXPECT_EQ(kv2.n_past(), 0);
  // Speculative decoding on such a backend (as on CUDA): chains, the same text.
  OracleDrafter probe({1}, 0, 0.5, attn.m->weights.cfg.n_vocab, 1);
  EXPECT_EQ(spec_tree_refusal(plain, kv2, probe), "the plain backend does not run token trees");
  const auto prompt = test::random_tokens(5, 8);
  GenerateParams gp;
  gp.n_predict = 16;
  gp.stop_at_eog = false;
  SamplerParams sp;
  sp.temperature = 0;
  std::vector<int32_t> want, got;
  {
    KvCache kv = plain.make_cache(64);
    Sampler sampler(sp);
    generate(plain, kv, sampler, nullptr, prompt, gp, [&](int32_t id) { want.push_back(id); return true; });
  }
  OracleDrafter oracle(want, prompt.size(), 0.6, attn.m->weights.cfg.n_vocab, 2);
  gp.spec.drafter = &oracle;
  gp.spec.control.adaptive = false;
  gp.spec.control.draft_max = 4;
  gp.spec.tree_budget = 8;
  KvCache kv3 = plain.make_cache(64);
  Sampler sampler(sp);
  const GenerateStats st = generate(plain, kv3, sampler, nullptr, prompt, gp, [&](int32_t id) { got.push_back(id); return true; });
  EXPECT_EQ(got, want);
  EXPECT_GT(st.spec.verifies, 0);
  EXPECT_EQ(st.spec.tree_verifies, 0);
}

TEST(TokenTreeChecks, KeepPathChecksItsNodes) {
  KvCache kv(2, 1, 32, 64);
  kv.advance(10);
  const auto err = [&](std::vector<int32_t> nodes, int64_t base) { return error_of([&] { kv.keep_path(base, nodes); }); };
  EXPECT_NE(err({1, 2}, 4).find("start at the tree's root"), std::string::npos);
  EXPECT_NE(err({}, 4).find("start at the tree's root"), std::string::npos);
  EXPECT_NE(err({0, 3, 3}, 4).find("increasing order"), std::string::npos);
  EXPECT_NE(err({0, 6}, 4).find("past the 10 positions"), std::string::npos);
  EXPECT_EQ(kv.n_past(), 10);
  kv.keep_path(4, std::vector<int32_t>{0, 2, 5});
  EXPECT_EQ(kv.n_past(), 7);
}

// ---------------------------------------------------------------- the CPU tree forward

// A tree over a prefix: two subtrees of the first node, a deep branch, a second root.
const std::vector<int32_t> kParents = {-1, 0, 0, 1, 1, 2, 3, 3, 6, -1, 9};

std::vector<int32_t> path_of(int t) {
  std::vector<int32_t> p;
  for (int a = t; a >= 0; a = kParents[static_cast<size_t>(a)]) p.insert(p.begin(), a);
  return p;
}

enum class CacheKind { F16, F32, Q8_0, Paged };

void check_tree_forward(const std::string& arch, CacheKind kind) {
  Tiny t(arch);
  const std::string what = arch + " cache " + std::to_string(static_cast<int>(kind));
  const KvType type = kind == CacheKind::F32 ? KvType::F32 : kind == CacheKind::Q8_0 ? KvType::Q8_0 : KvType::F16;
  std::shared_ptr<KvPages> pages;
  if (kind == CacheKind::Paged) pages = t.be->make_kv_pages(400, type, 4);
  auto cache = [&] { return pages ? t.be->make_paged_cache(pages, 96, type) : t.be->make_cache(96, type); };
  const size_t V = static_cast<size_t>(t.m->weights.cfg.n_vocab);
  const std::vector<int32_t> prefix = test::random_tokens(21, 5);  // past gpt-oss's window of 8
  const std::vector<int32_t> toks = test::random_tokens(static_cast<int>(kParents.size()), 6);
  KvCache kv = cache();
  std::vector<float> lg, rows;
  t.be->forward(kv, prefix, lg);
  const SeqTokens e{&kv, toks, true, true, kParents};
  t.be->forward_seqs(std::span<const SeqTokens>(&e, 1), rows);
  ASSERT_EQ(rows.size(), toks.size() * V);
  ASSERT_EQ(kv.n_past(), static_cast<int64_t>(prefix.size() + toks.size()));
  for (int n = 0; n < static_cast<int>(toks.size()); ++n) {
    // The node's path decoded as a chain from the same prefix.
    const std::vector<int32_t> path = path_of(n);
    std::vector<int32_t> path_toks;
    for (int32_t a : path) path_toks.push_back(toks[static_cast<size_t>(a)]);
    KvCache chain = cache();
    t.be->forward(chain, prefix, lg);
    for (int32_t tok : path_toks) t.be->forward(chain, std::span<const int32_t>(&tok, 1), lg);  // decode steps
    EXPECT_TRUE(std::equal(lg.begin(), lg.end(), rows.begin() + static_cast<std::ptrdiff_t>(n * V)))
        << what << ": node " << n << "'s logits against its path as a chain";
  }
  // Keep the path to node 8 (0 1 3 6 8): the cache is then the chain's, bit for bit.
  for (int keep_to : {8, 5, 0, 10}) {
    const std::vector<int32_t> path = path_of(keep_to);
    if (path[0] != 0) continue;  // the second root's path does not start at node 0
    KvCache tree_kv = cache();
    t.be->forward(tree_kv, prefix, lg);
    const SeqTokens te{&tree_kv, toks, true, true, kParents};
    t.be->forward_seqs(std::span<const SeqTokens>(&te, 1), rows);
    const int64_t base = static_cast<int64_t>(prefix.size());
    t.be->keep_tree_path(tree_kv, base, path);
    ASSERT_EQ(tree_kv.n_past(), base + static_cast<int64_t>(path.size()));
    KvCache chain = cache();
    t.be->forward(chain, prefix, lg);
    std::vector<int32_t> path_toks;
    for (int32_t a : path) path_toks.push_back(toks[static_cast<size_t>(a)]);
    for (int32_t tok : path_toks) t.be->forward(chain, std::span<const int32_t>(&tok, 1), lg);
    const std::vector<int32_t> more = {17, 250, 3};
    std::vector<float> a, b;
    for (int32_t tok : more) {
      std::vector<float> ra, rb;
      t.be->forward(tree_kv, std::span<const int32_t>(&tok, 1), ra);
      t.be->forward(chain, std::span<const int32_t>(&tok, 1), rb);
      a.insert(a.end(), ra.begin(), ra.end());
      b.insert(b.end(), rb.begin(), rb.end());
    }
    EXPECT_EQ(a, b) << what << ": the cache after keeping the path to node " << keep_to;
  }
}

TEST(TokenTreeForward, NodesAreTheirPathsAndTheKeptPathIsTheChain) {
  for (const char* arch : {"qwen3moe", "gpt-oss", "mixtral", "qwen35moe"}) check_tree_forward(arch, CacheKind::F16);
  check_tree_forward("qwen35moe", CacheKind::Paged);
  check_tree_forward("qwen3moe", CacheKind::F32);
  check_tree_forward("qwen3moe", CacheKind::Q8_0);
  check_tree_forward("qwen3moe", CacheKind::Paged);
  check_tree_forward("gpt-oss", CacheKind::Paged);
}

TEST(TokenTreeForward, TreesMixWithOtherSequencesInOneStep) {
  // A tree beside a decode token and a prompt chunk of other sequences, in
  // batches of 8: the tree is not split, and every entry gets what it gets alone.
  Tiny t("qwen3moe", {.max_batch = 16});
  const size_t V = static_cast<size_t>(t.m->weights.cfg.n_vocab);
  const std::vector<int32_t> prefix = test::random_tokens(9, 2), toks = test::random_tokens(11, 3),
                             chunk = test::random_tokens(12, 4), one = {42};
  KvCache a = t.be->make_cache(64), b = t.be->make_cache(64), c = t.be->make_cache(64);
  std::vector<float> lg, step;
  t.be->forward(a, prefix, lg);
  t.be->forward(b, prefix, lg);
  const std::vector<SeqTokens> seqs = {{&b, one, true}, {&c, chunk, true}, {&a, toks, true, true, kParents}};
  t.be->forward_seqs(seqs, step);
  ASSERT_EQ(step.size(), (2 + toks.size()) * V);
  KvCache a2 = t.be->make_cache(64);
  std::vector<float> alone;
  t.be->forward(a2, prefix, lg);
  const SeqTokens e{&a2, toks, true, true, kParents};
  t.be->forward_seqs(std::span<const SeqTokens>(&e, 1), alone);
  EXPECT_TRUE(std::equal(alone.begin(), alone.end(), step.begin() + static_cast<std::ptrdiff_t>(2 * V)));
}

// ---------------------------------------------------------------- generation with trees

struct Out {
  std::vector<int32_t> tokens;
  GenerateStats st;
  std::vector<float> next_logits;
};

Out run(Backend& be, std::span<const int32_t> prompt, GenerateParams gp, const SamplerParams& sp,
        const std::function<std::unique_ptr<Drafter>(KvCache&)>& make_drafter = nullptr) {
  KvCache kv = be.make_cache(128);
  std::unique_ptr<Drafter> d;
  if (make_drafter) gp.spec.drafter = (d = make_drafter(kv)).get();
  Sampler sampler(sp);
  Out o;
  o.st = generate(be, kv, sampler, nullptr, prompt, gp, [&](int32_t id) {
    o.tokens.push_back(id);
    return true;
  });
  const int32_t next[1] = {o.tokens.back()};
  be.forward(kv, next, o.next_logits);
  return o;
}

GenerateParams tree_params(Drafter* d, int k, int budget, int n) {
  GenerateParams gp;
  gp.n_predict = n;
  gp.stop_at_eog = false;
  gp.spec.drafter = d;
  gp.spec.control.draft_max = k;
  gp.spec.control.adaptive = false;
  gp.spec.tree_budget = budget;
  return gp;
}

using spec_test::greedy;
using spec_test::sampled;

TEST(SpecTree, OutputIsPlainDecodingsForEveryKAndBudget) {
  Tiny t("qwen3moe");
  const int64_t V = t.m->weights.cfg.n_vocab;
  constexpr int kN = 24;
  for (const bool temp : {false, true}) {
    const SamplerParams sp = temp ? sampled() : greedy();
    const auto prompt = test::random_tokens(6, temp ? 2 : 1);
    GenerateParams plain;
    plain.n_predict = kN;
    plain.stop_at_eog = false;
    const Out want = run(*t.be, prompt, plain, sp);
    int64_t chain_emitted = 0, chain_verifies = 0, tree_emitted = 0, tree_verifies = 0;
    for (int k = 1; k <= 8; ++k)
      for (int budget : {0, 1, 3, 8, 24}) {
        const std::string what = std::string(temp ? "sampled" : "greedy") + " K=" + std::to_string(k) +
                                 " budget " + std::to_string(budget);
        OracleDrafter oracle(want.tokens, prompt.size(), 0.5, V, 300 + k);
        const Out o = run(*t.be, prompt, tree_params(&oracle, k, budget, kN), sp);
        EXPECT_EQ(o.tokens, want.tokens) << what;
        EXPECT_EQ(o.next_logits, want.next_logits) << what << ": the cache goes on as plain decoding's";
        EXPECT_EQ(o.st.spec.emitted + o.st.spec.plain_steps + 1, kN) << what;
        if (budget > 0) {
          EXPECT_EQ(o.st.spec.tree_verifies, o.st.spec.verifies) << what;
          EXPECT_LE(o.st.spec.tree_nodes, int64_t{budget} * o.st.spec.tree_verifies) << what;
          tree_emitted += o.st.spec.emitted;
          tree_verifies += o.st.spec.verifies;
        } else {
          EXPECT_EQ(o.st.spec.tree_verifies, 0) << what;
          chain_emitted += o.st.spec.emitted;
          chain_verifies += o.st.spec.verifies;
        }
      }
    // Right half the time at each rank: alternatives often hold the token.
    EXPECT_GT(double(tree_emitted) / double(tree_verifies), double(chain_emitted) / double(chain_verifies))
        << "trees emit more tokens per verify than chains";
  }
}

TEST(SpecTree, TheBudgetFollowsTheDepthAskedFor) {
  // n_predict 4, drafts always wrong: the first verify may draft 2 (a verify
  // emits one more than it keeps), so its tree is 2 deep and gets 16 * 2 / 8
  // = 4 drafts of the 16; the second may draft 1: 16 / 8 = 2 drafts.
  Tiny t("qwen3moe");
  const auto prompt = test::random_tokens(6, 1);
  GenerateParams plain;
  plain.n_predict = 4;
  plain.stop_at_eog = false;
  const Out want = run(*t.be, prompt, plain, greedy());
  OracleDrafter oracle(want.tokens, prompt.size(), 0.0, t.m->weights.cfg.n_vocab, 3);  // always wrong: one verify each
  const Out o = run(*t.be, prompt, tree_params(&oracle, 8, 16, 4), greedy());
  EXPECT_EQ(o.tokens, want.tokens);
  EXPECT_EQ(o.st.spec.tree_verifies, 2);
  EXPECT_EQ(o.st.spec.tree_nodes, 4 + 2);
  EXPECT_EQ(o.st.spec.accepted, 0);
}

TEST(SpecTree, DraftModelTreesKeepTheOutput) {
  Tiny t("qwen3moe");
  auto draft_m = LoadedModel::open(test::tiny_gguf("qwen3moe", "q8_0", 41, 1));  // one layer, same vocabulary
  CpuBackend draft_be(draft_m->weights, t.pool);
  constexpr int kN = 20;
  for (const bool temp : {false, true}) {
    const SamplerParams sp = temp ? sampled() : greedy();
    const auto prompt = test::random_tokens(7, 4);
    GenerateParams plain;
    plain.n_predict = kN;
    plain.stop_at_eog = false;
    const Out want = run(*t.be, prompt, plain, sp);
    for (Backend* drafting : {static_cast<Backend*>(t.be.get()), static_cast<Backend*>(&draft_be)})
      for (int k : {1, 4, 8})
        for (int budget : {2, 12}) {
          ModelDrafter d(*drafting, {sp, 0.0, 128});
          const Out o = run(*t.be, prompt, tree_params(&d, k, budget, kN), sp);
          const std::string what = std::string(temp ? "sampled" : "greedy") +
                                   (drafting == t.be.get() ? " self" : " 1-layer") + " K=" + std::to_string(k) +
                                   " budget " + std::to_string(budget);
          EXPECT_EQ(o.tokens, want.tokens) << what;
          EXPECT_EQ(o.next_logits, want.next_logits) << what;
          EXPECT_GT(o.st.spec.tree_verifies, 0) << what;
          // The model drafting for itself greedily: its first choice is always right.
          if (drafting == t.be.get() && !temp) EXPECT_GE(o.st.spec.accepted, o.st.spec.tree_verifies) << what;
        }
  }
}

TEST(SpecTree, DFlashTreesKeepTheOutput) {
  auto f = GgufFile::open(test::tiny_gguf("dflash", "f32", 7));
  const DFlashWeights dw = bind_dflash(*f);
  Tiny t("qwen3moe");
  const auto prompt = test::random_tokens(12, 9);
  GenerateParams plain;
  plain.n_predict = 30;
  plain.stop_at_eog = false;
  const Out want = run(*t.be, prompt, plain, greedy());
  for (int k : {1, 3, 8})
    for (int budget : {1, 6, 20}) {
      const Out o = run(*t.be, prompt, tree_params(nullptr, k, budget, 30), greedy(), [&](KvCache& kv) {
        return std::make_unique<DFlashDrafter>(*t.be, kv, dw, t.m->weights, t.pool);
      });
      const std::string what = "K=" + std::to_string(k) + " budget " + std::to_string(budget);
      EXPECT_EQ(o.tokens, want.tokens) << what;
      EXPECT_EQ(o.next_logits, want.next_logits) << what;
      EXPECT_EQ(o.st.spec.tree_verifies, o.st.spec.verifies) << what;
      // Drafts at every step (the last one may have no room): the drafter's
      // context took each kept path's rows (without them it has none to draft from).
      EXPECT_GT(o.st.spec.verifies, 0) << what;
      EXPECT_LE(o.st.spec.plain_steps, 1) << what << ": the drafter kept its context through the trees";
    }
}

// qwen35moe: each node's Gated DeltaNet recurrence runs from its parent's
// state (kept per node), and keep_tree_path takes the path's last state.
TEST(SpecTree, HybridTreesKeepTheOutput) {
  Tiny t("qwen35moe");
  const int64_t V = t.m->weights.cfg.n_vocab;
  KvCache kv = t.be->make_cache(64);
  OracleDrafter probe({1}, 0, 0.5, V, 1);
  EXPECT_EQ(spec_tree_refusal(*t.be, kv, probe), "");
  NgramDrafter ng;
  EXPECT_NE(spec_tree_refusal(*t.be, kv, ng).find("no distributions"), std::string::npos);
  for (const bool temp : {false, true}) {
    const SamplerParams sp = temp ? sampled() : greedy();
    const auto prompt = test::random_tokens(6, 3);
    GenerateParams plain;
    plain.n_predict = 24;
    plain.stop_at_eog = false;
    const Out want = run(*t.be, prompt, plain, sp);
    for (int k : {1, 2, 6, 8})
      for (int budget : {3, 16}) {
        const std::string what = std::string(temp ? "sampled" : "greedy") + " K=" + std::to_string(k) + " budget " +
                                 std::to_string(budget);
        OracleDrafter oracle(want.tokens, prompt.size(), 0.6, V, 40 + k);
        const Out o = run(*t.be, prompt, tree_params(&oracle, k, budget, 24), sp);
        EXPECT_EQ(o.tokens, want.tokens) << what;
        EXPECT_EQ(o.next_logits, want.next_logits) << what << ": the cache goes on as plain decoding's";
        EXPECT_EQ(o.st.spec.tree_verifies, o.st.spec.verifies) << what;
        EXPECT_GT(o.st.spec.verifies, 0) << what;
        EXPECT_GT(o.st.spec.accepted, 0) << what;
      }
  }
}

}  // namespace
}  // namespace ms
