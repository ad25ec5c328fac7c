// Speculative decoding (docs/speculative.md): a cheap drafter proposes the
// next K tokens; the target model checks all of them in ONE forward pass (the
// last sampled token and the K drafts, the logits of every one: SeqTokens::
// all_logits), and the sequence state rolls back past the first rejected
// draft (KvCache::keep_token_states + truncate, docs/sequence_state.md).
//
// The output is the target's: for drafters that propose one token per
// position (a point mass) the sampler draws each emitted token from the
// target's logits after exactly the tokens plain decoding would have fed it,
// once per emitted token as plain decoding does, and a draft is kept only
// when it IS the drawn token, so greedy or sampled with a seed the tokens are
// plain decoding's; drafters that sample (a draft model at a temperature) go
// through the rejection rule (speculative_pick), whose output has the
// target's distribution. Only the number of forward passes changes.
//
// This header: the drafters (n-gram lookup over the sequence so far; a draft
// model; an oracle for tests and benchmarks), the rejection rule, the
// controller that chooses K per step from measured acceptance and step time
// (K = 0: plain decoding), and parsing of `--spec`. The verify loop itself is decode_speculative()
// (generate.h runs it when GenerateParams::spec has a drafter).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace ms {

class Backend;
class KvCache;
class Tokenizer;

// Proposes continuations of a sequence.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens tokens that might follow `history` (the prompt and every
  // token emitted so far, the last sampled one included) into `out`
  // (cleared first; fewer, or none, when it has no good guess).
  virtual void propose(std::span<const int32_t> history, int max_tokens, std::vector<int32_t>& out) = 0;
  virtual std::string name() const = 0;
  // The distributions the last propose() drew its drafts from, one per draft
  // (a drafter that samples: a draft model at a temperature). Empty: each
  // draft is a point mass, its one guess (the n-gram and oracle drafters, a
  // greedy draft model). speculative_pick() uses them.
  virtual const std::vector<std::vector<TokenProb>>& draft_distributions() const {
    static const std::vector<std::vector<TokenProb>> none;
    return none;
  }
  // The sequence gave its state back (a server's job preempted for KV pages:
  // it re-reads its text later): drop what this drafter caches for it, so
  // its memory goes too. The next propose() starts from the history alone.
  virtual void release() {}
  // Draft trees (--spec-tree; engine/draft_tree.h). Drafters with
  // distributions (a draft model, DFlash; the oracle's synthetic ones) say
  // gives_candidates(); after set_candidates(k) with k > 0 each propose()
  // also leaves in candidates() its top k tokens at each drafted position,
  // most likely first, with the drafter's probabilities (drafted position j:
  // candidates()[j]; fewer positions than drafts when it has no more). The
  // tree builder grows a tree of alternatives from them. Others leave it
  // empty: their drafts are verified as chains.
  virtual bool gives_candidates() const { return false; }
  void set_candidates(int k) { top_k_ = k; }
  // After a tree verify: the tree's nodes kept (root first, in the order
  // they were fed), now the sequence's positions from the root's on. For a
  // drafter that watches the target's forwards (DFlash), whose hook saw the
  // whole tree. Default: nothing.
  virtual void tree_kept(std::span<const int32_t> nodes) { (void)nodes; }
  const std::vector<std::vector<TokenProb>>& candidates() const { return cands_; }

 protected:
  int top_k_ = 0;
  std::vector<std::vector<TokenProb>> cands_;
};

// One drafter's proposal among several made together (propose_all).
struct Proposal {
  Drafter* drafter = nullptr;
  std::span<const int32_t> history;
  int max_tokens = 0;
  std::vector<int32_t>* out = nullptr;
  std::string error;  // set (and out cleared) when its proposal failed
};
// Each proposal as its drafter's propose() makes it, draft-model drafters of
// one backend together: their passes (each one's catch-up, then one token
// each per draft) go through that backend's forward_seqs, one call per
// round, so the draft's weights are read once per round for all of them (a
// server step's slots). A drafter whose pages run short stops drafting there
// (keeping the drafts it has); a failed pass fails the proposals in it.
void propose_all(std::span<Proposal> proposals);

// The speculative sampling rule at one position: the drafter drew `draft`
// from q (empty q: a point mass on `draft`), the target's distribution there
// is p (Sampler::distribution: the sampler chain applied as plain decoding
// applies it). The draft is accepted with probability min(1, p(x) / q(x));
// otherwise the token is drawn from max(0, p - q) normalised. Whatever q is,
// the token that results is distributed as p (Leviathan et al. 2023, Chen et
// al. 2023), so speculation leaves the output distribution the target's.
// Random numbers come from `rng`'s generator.
struct SpecPick {
  int32_t token = 0;
  bool accepted = false;
};
SpecPick speculative_pick(const std::vector<TokenProb>& p, const std::vector<TokenProb>& q, int32_t draft,
                          Sampler& rng);

// The draft model's cache and the tokens it holds: a ModelDrafter's own, or
// one a server slot keeps for the drafters of its jobs.
struct DraftCache {
  DraftCache();
  ~DraftCache();  // out of line: KvCache is complete there
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> fed;  // what kv holds
  void clear();              // forgets every position (a paged cache gives its pages back)
};

// A smaller model of the same vocabulary drafts (`--spec draft -md FILE`):
// its own backend (the CPU's, or the target's GPU) and its own cache, which
// follows the target's sequence: at each proposal it goes back to the
// longest prefix it shares with the history (rejected drafts leave it that
// way) and runs the rest in one forward, then decodes its drafts one at a
// time. Greedy targets get greedy drafts (point masses); sampled ones get
// drafts drawn from the draft's distribution under the target's temperature,
// top-k, top-p and min-p (no penalties), with their distributions for the
// rejection rule.
class ModelDrafter : public Drafter {
 public:
  struct Options {
    SamplerParams sampling;  // the target's; temperature 0: greedy drafts
    // Stop drafting at a token whose draft probability is below this
    // (--draft-p-min; 0: never). Greedy drafts read the softmax at temperature 1.
    double p_min = 0;
    int64_t ctx = 4096;  // the draft cache's length (>= the target's)
  };
  // Throws ms::Error when p_min is outside [0, 1] or ctx < 1. `cache`: a
  // draft cache to use (null: its own, made here); one without a KvCache
  // gets one of o.ctx tokens; one with a KvCache must be of `draft`, at
  // least o.ctx tokens long. A proposal that fails (the draft's forward
  // throws: a paged pool short of pages) clears the cache and rethrows.
  ModelDrafter(Backend& draft, Options o, std::shared_ptr<DraftCache> cache = nullptr);
  void propose(std::span<const int32_t> history, int max_tokens, std::vector<int32_t>& out) override;
  std::string name() const override { return "draft"; }
  const std::vector<std::vector<TokenProb>>& draft_distributions() const override { return dists_; }
  // The draft model's softmax at each drafted position (temperature 1 when
  // greedy; the sampled distribution when sampling), along its own chain.
  bool gives_candidates() const override { return true; }
  void release() override { cache_->clear(); }
  // propose() in parts, for propose_all: start() goes back to the longest
  // prefix the cache shares with the history and returns the tokens to run
  // (empty: no proposal); after each pass over them, take() reads the last
  // token's logits row and drafts a token, returning whether to run it and
  // draft on (after fed() records what the pass appended).
  std::span<const int32_t> start(std::span<const int32_t> history, int max_tokens, std::vector<int32_t>& out);
  bool take(const float* row, std::vector<int32_t>& out);
  void fed(std::span<const int32_t> tokens);
  DraftCache& cache() { return *cache_; }
  Backend& backend() { return be_; }
  // Forward passes the draft model ran (tests, stats).
  int64_t forwards() const { return forwards_; }
  int64_t n_cached() const;  // tokens the draft cache holds

 private:
  void run(std::span<const int32_t> tokens);  // a forward of the draft, appended to fed
  int want_ = 0;  // drafts the proposal under way may make
  Backend& be_;
  Options opt_;
  std::shared_ptr<DraftCache> cache_;
  Sampler sampler_;
  std::vector<float> logits_;
  std::vector<std::vector<TokenProb>> dists_;
  std::vector<TokenProb> dist_;
  int64_t forwards_ = 0;
};

// Throws ms::Error unless the draft model can draft for the target: the
// same vocabulary size and the same token strings (what a token id means),
// naming the first difference.
void check_draft_vocab(const Tokenizer& target, const Tokenizer& draft, int64_t target_n_vocab,
                       int64_t draft_n_vocab);

// Prompt lookup / n-gram drafting: the longest suffix of the history of
// n_max .. n_min tokens that occurred earlier (the most recent occurrence
// within the last `window` tokens) is taken to go on as it went on then.
// Text that quotes its prompt (code edits, summaries, extraction) and loops
// (which random-weight models fall into) are where it is right. Work per
// call is bounded: at most window * (n_max - n_min + 1) suffix comparisons.
class NgramDrafter : public Drafter {
 public:
  struct Options {
    int n_min = 2;
    int n_max = 4;
    int window = 8192;  // history tokens searched back from the end
  };
  NgramDrafter() : NgramDrafter(Options{}) {}
  explicit NgramDrafter(Options o);  // throws ms::Error for 1 <= n_min <= n_max, window >= 1 not holding
  void propose(std::span<const int32_t> history, int max_tokens, std::vector<int32_t>& out) override;
  std::string name() const override { return "ngram"; }

 private:
  Options opt_;
};

// Tests and benchmarks only: knows the target's own continuation of the
// prompt (from a plain run first, with the same sampler and seed, so it is
// exactly what speculation will emit) and proposes it right with probability
// alpha per position, a wrong token otherwise (seeded), so speed-up can be
// measured against acceptance on random-weight models. It proposes nothing
// once the history has left the reference (or run past its end).
class OracleDrafter : public Drafter {
 public:
  // n_prompt: the tokens of history before the reference starts; n_vocab:
  // the range the wrong tokens are drawn from (>= 2).
  OracleDrafter(std::vector<int32_t> reference, size_t n_prompt, double alpha, int64_t n_vocab, uint64_t seed);
  void propose(std::span<const int32_t> history, int max_tokens, std::vector<int32_t>& out) override;
  std::string name() const override;
  // Synthetic candidates for tree tests and benchmarks: at each position the
  // reference token is at rank r with probability alpha (1 - alpha)^r (the
  // first rank that draws it; absent when none does), the other ranks
  // distinct wrong tokens, and rank r reported with that probability (a
  // calibrated drafter). The draft is rank 0. Without candidates the draws
  // are the chain's above.
  bool gives_candidates() const override { return true; }

 private:
  std::vector<int32_t> ref_;
  size_t n_prompt_;
  double alpha_;
  int64_t n_vocab_;
  std::mt19937_64 rng_;
};

// `--spec ngram`, `--spec draft` (with -md FILE), `--spec mtp` (the model's
// MTP block: MtpDrafter, engine/speculative_mtp.h), `--spec dflash` (also
// llama.cpp's spelling draft-dflash; with -md FILE, a DFlash block drafter:
// engine/speculative_dflash.h) or `--spec oracle:ALPHA` (ALPHA in [0, 1]).
struct DraftChoice {
  enum class Kind { Ngram, Oracle, Model, Mtp, DFlash } kind = Kind::Ngram;
  // The kinds that read a drafter file (-md FILE).
  bool needs_file() const { return kind == Kind::Model || kind == Kind::DFlash; }
  double alpha = 0;  // oracle
  std::string describe() const;  // "ngram", "draft", "mtp", "dflash", "oracle:0.8"
};
// Throws ms::Error naming --spec and the accepted forms.
DraftChoice parse_draft_choice(const std::string& text);

// Why drafts of `drafter` on `backend` with cache kv would be verified as
// chains despite --spec-tree ("" when trees run): a drafter without
// distributions, a backend without token trees (CUDA).
std::string spec_tree_refusal(const Backend& backend, const KvCache& kv, const Drafter& drafter);

// How many drafts to verify at each step.
struct SpecControllerOptions {
  int draft_max = 8;   // K at most (--draft-max)
  int draft_min = 1;   // fewer drafts than this available: a plain step (--draft-min)
  bool adaptive = true;  // false: always ask for draft_max (tests, fixed-K measurements)
  // While speculation is off, a probe (a verify of the K the estimates
  // favour, narrow while they are poor) after this many plain steps; the
  // interval doubles after each probe that leaves it off, up to probe_max,
  // and comes back down when it turns on.
  int probe_after = 16;
  int probe_max = 256;
  // ... and never sooner than a probe's expected loss (its verify's time
  // beyond the tokens it should bring) is this share of the plain steps'
  // time before it: probing where verifies are dear must cost little.
  double probe_budget = 0.02;
  // While on, one plain step every this many steps keeps plain decoding's
  // time current (it is what speculation must beat).
  int retime_every = 64;
  // Weight left to old acceptance counts per verify (recent steps count
  // most: a run of rejections turns speculation off within a few verifies).
  double decay = 0.9;
  // Speculation must promise this many times plain decoding's rate: a
  // marginal estimate is within timing noise, and a wrong one costs.
  double min_gain = 1.05;
  // Throws ms::Error naming the flag when out of range (draft_max 1..64,
  // draft_min 1..draft_max).
  void validate() const;
};

// Chooses K per step: the one that maximises expected tokens per second,
//   E(K) / T(K),  E(K) = 1 + sum_{j=1..K} prod_{i<j} a_i,
// where a_i is the measured probability that draft i is accepted when drafts
// 0..i-1 were (a position seldom reached leans on the one before it), and
// T(K) the measured time of a step that drafts and verifies K (the median of
// its last few measurements, so one slow step -- a first batched pass, a
// hiccup -- does not turn speculation off; between two measured widths: on
// the line between them; wider than any: the widest plus what each draft
// has cost so far, so widths are tried only when their promise survives that
// price, at most 2 K + 1 at a time). Speculation starts at the narrowest K,
// and K = 0 when no K beats plain decoding's 1 / T(0) by min_gain; then a
// probe now and then. Pure bookkeeping: the caller times the steps.
class SpecController {
 public:
  explicit SpecController(SpecControllerOptions o = {});
  const SpecControllerOptions& options() const { return opt_; }
  // Drafts to ask for at the next step (0: a plain decode step).
  int plan();
  // A plain decode step (one token) took `seconds`.
  void record_plain(double seconds);
  // A step of `drafted` drafts (drafting, verifying them and the last token,
  // sampling) took `seconds`; the first `accepted` drafts were kept.
  void record_verify(int drafted, int accepted, double seconds);

  // The estimates plan() uses.
  double acceptance(int pos) const;      // a_pos
  double expected_tokens(int k) const;   // E(k)
  double verify_seconds(int k) const;    // T(k); k = 0 is a plain step; 0 when nothing is measured
  double plain_seconds() const { return plain_s_; }
  // The K in draft_min..draft_max with the best expected rate, and whether
  // it beats plain decoding (returns 0 when not).
  int best_k() const;
  bool on() const { return on_; }

 private:
  int argmax_rate() const;
  int widest_candidate() const;
  int second_width() const;
  SpecControllerOptions opt_;
  std::vector<double> tried_, accepted_;  // decayed counts by draft position
  std::map<int, std::vector<double>> verify_samples_;  // the last few times by drafts verified
  std::map<int, double> verify_s_;        // their medians
  std::vector<double> plain_samples_;
  double plain_s_ = 0;                    // median of the last plain steps, 0: not measured
  bool on_ = true;
  int steps_since_plain_ = 0;  // verify steps since the last plain one
  int off_steps_ = 0;          // plain steps since speculation turned off or last probed
  int on_streak_ = 0;          // steps planned with speculation on since it last turned on
  int probe_interval_;
};

// What speculation did over one generation (GenerateStats::spec).
struct SpecStats {
  int64_t verifies = 0;      // forward passes with drafts
  int64_t plain_steps = 0;   // decode forward passes without
  int64_t drafted = 0, accepted = 0;
  int64_t emitted = 0;       // tokens emitted from verify passes (accepted + one each)
  int64_t replayed = 0;      // tokens run again to roll a recurrent state back (SpecDecoding::Rollback::Replay)
  // Verifies of draft trees (--spec-tree) among `verifies`, and their drafts
  // (tree nodes past the root; counted in `drafted` too, so acceptance is
  // per node fed). tried_at / accepted_at count by depth for trees.
  int64_t tree_verifies = 0, tree_nodes = 0;
  std::vector<int64_t> tried_at, accepted_at;  // by draft position: reached / kept
  // Steps by drafts verified (index 0: plain steps): how many, and their
  // total time (drafting, forward, sampling).
  std::vector<int64_t> steps_by_width;
  std::vector<double> seconds_by_width;
  void record_width(size_t drafts, double seconds);
  // Adds another run's counts (bench's repetitions).
  void add(const SpecStats& o);
  double mean_step_seconds(size_t drafts) const;  // 0 when none
  double acceptance() const { return drafted ? double(accepted) / double(drafted) : 0; }
  double tokens_per_verify() const { return verifies ? double(emitted) / double(verifies) : 0; }
  // "drafted 120, accepted 96 (80.0%) | by position: 0.95 0.90 ... | 2.31 tokens per verify (41 verifies, 3
  // plain steps) | ms per step by drafts: 0:0.68 3:0.91 ..."
  std::string describe() const;
};

}  // namespace ms
