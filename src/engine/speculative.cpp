#include "engine/speculative.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <chrono>
#include <functional>

#include <unordered_map>

#include "engine/draft_tree.h"
#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ms {

// ---------------------------------------------------------------- n-gram

NgramDrafter::NgramDrafter(Options o) : opt_(o) {
  if (o.n_min < 1 || o.n_max < o.n_min || o.n_max > 64)
    throw Error("n-gram drafter: the n-gram sizes must satisfy 1 <= n_min <= n_max <= 64 (got " +
                std::to_string(o.n_min) + ".." + std::to_string(o.n_max) + ")");
  if (o.window < 1) throw Error("n-gram drafter: the search window must be >= 1 token");
}

void NgramDrafter::propose(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  const int64_t H = static_cast<int64_t>(h.size());
  if (max_tokens <= 0) return;
  const int64_t lo = std::max<int64_t>(0, H - opt_.window);
  for (int n = std::min<int64_t>(opt_.n_max, H - 1); n >= opt_.n_min; --n) {
    const int32_t* suffix = h.data() + (H - n);
    // The most recent earlier occurrence: it starts before the suffix does.
    for (int64_t j = H - n - 1; j >= lo; --j) {
      if (h[static_cast<size_t>(j)] != suffix[0] || !std::equal(suffix, suffix + n, h.data() + j)) continue;
      // What followed it. Past the history's end the continuation reads the
      // drafts themselves (a loop of period H - n - j goes on as a loop).
      for (int64_t i = j + n; static_cast<int>(out.size()) < max_tokens; ++i)
        out.push_back(i < H ? h[static_cast<size_t>(i)] : out[static_cast<size_t>(i - H)]);
      return;
    }
  }
}

// ---------------------------------------------------------------- oracle

OracleDrafter::OracleDrafter(std::vector<int32_t> reference, size_t n_prompt, double alpha, int64_t n_vocab,
                             uint64_t seed)
    : ref_(std::move(reference)), n_prompt_(n_prompt), alpha_(alpha), n_vocab_(n_vocab), rng_(seed) {
  if (!(alpha >= 0.0 && alpha <= 1.0)) throw Error("oracle drafter: alpha must be in [0, 1]");
  if (n_vocab < 2) throw Error("oracle drafter: needs a vocabulary of at least 2 tokens");
}

void OracleDrafter::propose(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  cands_.clear();
  if (h.size() <= n_prompt_) return;
  const size_t pos = h.size() - n_prompt_;  // reference tokens the history holds
  // Still on the reference? (Its last token is the cheap check: a history
  // that left it never comes back to its positions.)
  if (pos > ref_.size() || h.back() != ref_[pos - 1]) return;
  auto uniform = [&] { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); };
  if (top_k_ > 0) {
    const int k = static_cast<int>(std::min<int64_t>(top_k_, n_vocab_));
    for (size_t i = pos; i < ref_.size() && static_cast<int>(out.size()) < max_tokens; ++i) {
      int right_rank = -1;
      for (int r = 0; r < k && right_rank < 0; ++r)
        if (uniform() < alpha_) right_rank = r;
      std::vector<TokenProb> c;
      double pr = alpha_;
      for (int r = 0; r < k; ++r, pr *= 1.0 - alpha_) {
        int32_t id = ref_[i];
        if (r != right_rank)  // a wrong token not yet listed
          for (;;) {
            const auto off = 1 + static_cast<int64_t>(rng_() % static_cast<uint64_t>(n_vocab_ - 1));
            id = static_cast<int32_t>((ref_[i] + off) % n_vocab_);
            if (std::none_of(c.begin(), c.end(), [&](const TokenProb& t) { return t.id == id; })) break;
            if (static_cast<int64_t>(c.size()) + 1 >= n_vocab_) break;
          }
        c.push_back({id, std::max(pr, 1e-12)});
      }
      out.push_back(c[0].id);
      cands_.push_back(std::move(c));
    }
    return;
  }
  for (size_t i = pos; i < ref_.size() && static_cast<int>(out.size()) < max_tokens; ++i) {
    const double u = uniform();
    if (u < alpha_) {
      out.push_back(ref_[i]);
    } else {  // any other token, uniformly
      const auto off = 1 + static_cast<int64_t>(rng_() % static_cast<uint64_t>(n_vocab_ - 1));
      out.push_back(static_cast<int32_t>((ref_[i] + off) % n_vocab_));
    }
  }
}

std::string OracleDrafter::name() const { return DraftChoice{DraftChoice::Kind::Oracle, alpha_}.describe(); }

// ---------------------------------------------------------------- the rejection rule

SpecPick speculative_pick(const std::vector<TokenProb>& p, const std::vector<TokenProb>& q, int32_t draft,
                          Sampler& rng) {
  if (p.empty()) throw Error("speculative sampling: an empty target distribution");
  double px = 0, qx = 0;
  for (const TokenProb& t : p)
    if (t.id == draft) px += t.p;
  for (const TokenProb& t : q)
    if (t.id == draft) qx += t.p;
  // No q, or one that gives the draft no probability (then the drafter has
  // not drawn it from q): the point mass it behaves as.
  const bool point = !(qx > 0);
  if (point) qx = 1.0;
  // u < p / q accepts with probability min(1, p / q) (u in [0, 1)).
  if (px > 0 && rng.uniform() * qx < px) return {draft, true};
  // The residual max(0, p - q) over p's support (q's mass elsewhere only
  // lowers what p does not have).
  std::unordered_map<int32_t, double> qmap;
  if (point) {
    qmap[draft] = 1.0;
  } else {
    qmap.reserve(q.size());
    for (const TokenProb& t : q) qmap[t.id] += t.p;
  }
  std::vector<TokenProb> residual;
  residual.reserve(p.size());
  double mass = 0;
  for (const TokenProb& t : p) {
    auto it = qmap.find(t.id);
    const double r = t.p - (it == qmap.end() ? 0.0 : it->second);
    if (r > 0) {
      residual.push_back({t.id, r});
      mass += r;
    }
  }
  // p == q up to rounding: a rejection then has (almost) no probability, and
  // p itself is the right law for it.
  if (!(mass > 1e-12)) return {rng.draw_from(p), false};
  return {rng.draw_from(residual), false};
}

// ---------------------------------------------------------------- --spec

std::string DraftChoice::describe() const {
  if (kind == Kind::Ngram) return "ngram";
  if (kind == Kind::Model) return "draft";
  if (kind == Kind::Mtp) return "mtp";
  if (kind == Kind::DFlash) return "dflash";
  char buf[48];
  std::snprintf(buf, sizeof buf, "oracle:%g", alpha);
  return buf;
}

DraftChoice parse_draft_choice(const std::string& text) {
  if (text == "ngram") return {DraftChoice::Kind::Ngram, 0};
  if (text == "draft") return {DraftChoice::Kind::Model, 0};
  if (text == "mtp") return {DraftChoice::Kind::Mtp, 0};
  if (text == "dflash" || text == "draft-dflash") return {DraftChoice::Kind::DFlash, 0};
  const std::string bad = "--spec " + text + ": expected ngram, mtp, draft or dflash (with -md FILE) or oracle:ALPHA with ALPHA in "
                          "[0, 1] (the oracle is for benchmarks: it is given the model's own output)";
  if (text.rfind("oracle:", 0) != 0) throw Error(bad);
  const std::string num = text.substr(7);
  if (num.empty()) throw Error(bad);
  char* end = nullptr;
  const double a = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !(a >= 0.0 && a <= 1.0)) throw Error(bad);
  return {DraftChoice::Kind::Oracle, a};
}

// ---------------------------------------------------------------- controller

void SpecControllerOptions::validate() const {
  if (draft_max < 1 || draft_max > 64)
    throw Error("--draft-max " + std::to_string(draft_max) + ": must be in 1..64");
  if (draft_min < 1 || draft_min > draft_max)
    throw Error("--draft-min " + std::to_string(draft_min) + ": must be in 1..--draft-max (" +
                std::to_string(draft_max) + ")");
  if (probe_after < 1 || probe_max < probe_after || retime_every < 2 || !(decay > 0.0 && decay <= 1.0) ||
      !(probe_budget > 0.0 && probe_budget <= 1.0) ||
      !(min_gain >= 1.0 && min_gain < 10.0))
    throw Error("speculative decoding: invalid controller options");
}

SpecController::SpecController(SpecControllerOptions o)
    : opt_(o), tried_(static_cast<size_t>(o.draft_max), 0.0), accepted_(static_cast<size_t>(o.draft_max), 0.0),
      probe_interval_(o.probe_after) {
  opt_.validate();
}

double SpecController::acceptance(int pos) const {
  if (pos < 0 || pos >= opt_.draft_max) return 0;
  // One pseudo-observation at the position before's estimate (1/2 for the
  // first): an untried position is expected to do as the last one reached,
  // and a few observations decide.
  double prior = 0.5;
  for (int i = 0; i <= pos; ++i) {
    const size_t j = static_cast<size_t>(i);
    prior = (accepted_[j] + prior) / (tried_[j] + 1.0);
  }
  return prior;
}

double SpecController::expected_tokens(int k) const {
  double e = 1, reach = 1;
  for (int j = 0; j < std::min(k, opt_.draft_max); ++j) {
    reach *= acceptance(j);
    e += reach;
  }
  return e;
}

double SpecController::verify_seconds(int k) const {
  if (k <= 0) return plain_s_;
  if (auto it = verify_s_.find(k); it != verify_s_.end()) return it->second;
  auto above = verify_s_.upper_bound(k);
  int k0 = 0;
  double t0 = plain_s_;
  if (above != verify_s_.begin()) {
    k0 = std::prev(above)->first;
    t0 = std::prev(above)->second;
  }
  // Between two measured widths (plain decoding is width 0): on the line.
  if (above != verify_s_.end() && (k0 > 0 || plain_s_ > 0))
    return t0 + double(k - k0) / double(above->first - k0) * (above->second - t0);
  if (above != verify_s_.end()) return above->second;
  // Wider than any measured: the widest, plus what each draft has cost on
  // average up to it (over plain decoding), so a wider K is chosen only when
  // its acceptance pays for that: where every draft brings its own experts a
  // verify's cost grows with its width, and guessing it flat is what made
  // exploring cost more than it could win.
  // Two widths measured: the marginal cost per draft between the two widest,
  // so a verify with a fixed cost of its own (a batched pass beside the
  // decode step's graph on a GPU) is not priced as if all of it grew with K.
  if (k0 > 0 && verify_s_.size() >= 2) {
    const auto prev = std::prev(std::prev(verify_s_.end()));
    return t0 + double(k - k0) * std::max(0.0, (t0 - prev->second) / double(k0 - prev->first));
  }
  if (k0 > 0 && plain_s_ > 0) return t0 + double(k - k0) * std::max(0.0, (t0 - plain_s_) / double(k0));
  return t0;
}

// With one width measured, its cost over plain decoding may be a fixed cost
// (a batched pass) or grow with every draft (a MoE's experts): the price
// above assumes the latter. One verify of the next width settles it, tried
// only where that width would pay even at the measured width's cost.
int SpecController::second_width() const {
  if (verify_s_.size() != 1 || plain_s_ <= 0) return 0;
  const int k1 = widest_candidate();
  const auto [k0, t0] = *verify_s_.begin();
  return k1 > k0 && t0 > 0 && expected_tokens(k1) / t0 > opt_.min_gain / plain_s_ ? k1 : 0;
}

// The widest K worth trying now: twice the widest measured plus one, so that
// acceptance deep in the chain can be found out in a few steps (1, 3, 7),
// and each widening is a choice verify_seconds() priced.
int SpecController::widest_candidate() const {
  const int measured = verify_s_.empty() ? 0 : verify_s_.rbegin()->first;
  return std::min(opt_.draft_max, std::max(opt_.draft_min, 2 * measured + 1));
}

int SpecController::argmax_rate() const {
  int best = opt_.draft_min;
  double best_rate = -1;
  for (int k = opt_.draft_min; k <= widest_candidate(); ++k) {
    const double t = verify_seconds(k);
    const double rate = t > 0 ? expected_tokens(k) / t : expected_tokens(k);
    if (rate > best_rate * (1 + 1e-9)) {  // ties: the smaller K (less work for the same rate)
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

int SpecController::best_k() const {
  const int k = argmax_rate();
  if (plain_s_ <= 0) return k;  // nothing to compare with yet
  const double t = verify_seconds(k);
  return t > 0 && expected_tokens(k) / t > opt_.min_gain / plain_s_ ? k : 0;
}

int SpecController::plan() {
  if (!opt_.adaptive) return opt_.draft_max;
  // Plain decoding's time first, and again now and then while speculating.
  if (plain_s_ <= 0 || (on_ && steps_since_plain_ >= opt_.retime_every)) return 0;
  int k = best_k();
  if (k == 0) k = second_width();
  if (k > 0) {
    // Back to short probe intervals once speculation has paid for a while
    // (not after the few verifies a probe's fresh evidence can buy).
    if (!on_) on_streak_ = 0;
    if (++on_streak_ >= opt_.probe_after) probe_interval_ = opt_.probe_after;
    on_ = true;
    return k;
  }
  if (on_) {
    on_ = false;
    off_steps_ = 0;
  }
  // A probe loses what its verify costs beyond the tokens it is expected to
  // bring: it comes only after enough plain steps that this loss stays
  // within probe_budget of their time.
  const int probe_k = argmax_rate();
  const double loss_steps = std::max(0.0, verify_seconds(probe_k) / plain_s_ - expected_tokens(probe_k));
  const double due = std::min<double>(opt_.probe_max, std::max<double>(probe_interval_, loss_steps / opt_.probe_budget));
  if (++off_steps_ < due) return 0;
  // A probe: fresh evidence of acceptance counts for more than the old; its
  // width is the one the estimates favour (narrow while they are poor), not
  // the widest: a probe that finds the drafts still wrong must cost little.
  off_steps_ = 0;
  probe_interval_ = std::min(opt_.probe_max, probe_interval_ * 2);
  for (size_t i = 0; i < tried_.size(); ++i) {
    tried_[i] *= 0.5;
    accepted_[i] *= 0.5;
  }
  return probe_k;
}

namespace {
// The median of the last few samples (odd count: the middle one; even: the
// lower middle, the optimistic choice between two).
double push_median(std::vector<double>& samples, double seconds) {
  constexpr size_t kKeep = 5;
  if (samples.size() == kKeep) samples.erase(samples.begin());
  samples.push_back(seconds);
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}
}  // namespace

void SpecController::record_plain(double seconds) {
  plain_s_ = push_median(plain_samples_, seconds);
  steps_since_plain_ = 0;
}

void SpecController::record_verify(int drafted, int accepted, double seconds) {
  drafted = std::clamp(drafted, 0, opt_.draft_max);
  accepted = std::clamp(accepted, 0, drafted);
  if (drafted == 0) return;
  for (size_t i = 0; i < tried_.size(); ++i) {
    tried_[i] *= opt_.decay;
    accepted_[i] *= opt_.decay;
  }
  // Position i was reached when drafts 0..i-1 were accepted.
  for (int i = 0; i < std::min(drafted, accepted + 1); ++i) {
    tried_[static_cast<size_t>(i)] += 1;
    if (i < accepted) accepted_[static_cast<size_t>(i)] += 1;
  }
  verify_s_[drafted] = push_median(verify_samples_[drafted], seconds);
  ++steps_since_plain_;
}

// ---------------------------------------------------------------- stats

std::string SpecStats::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "drafted %lld, accepted %lld (%.1f%%) | by position:", static_cast<long long>(drafted),
                static_cast<long long>(accepted), 100.0 * acceptance());
  std::string s = buf;
  for (size_t i = 0; i < tried_at.size(); ++i) {
    if (tried_at[i] == 0) {
      s += " -";
      continue;
    }
    std::snprintf(buf, sizeof buf, " %.2f", double(accepted_at[i]) / double(tried_at[i]));
    s += buf;
  }
  std::snprintf(buf, sizeof buf, " | %.2f tokens per verify (%lld verifies, %lld plain steps)", tokens_per_verify(),
                static_cast<long long>(verifies), static_cast<long long>(plain_steps));
  s += buf;
  if (replayed > 0) s += " | " + std::to_string(replayed) + " tokens replayed";
  if (tree_verifies > 0) {
    std::snprintf(buf, sizeof buf, " | trees: %lld verifies, %.1f drafts each", static_cast<long long>(tree_verifies),
                  double(tree_nodes) / double(tree_verifies));
    s += buf;
  }
  std::string widths;
  for (size_t w = 0; w < steps_by_width.size(); ++w) {
    if (steps_by_width[w] == 0) continue;
    std::snprintf(buf, sizeof buf, " %zu:%.3f", w, 1e3 * mean_step_seconds(w));
    widths += buf;
  }
  if (!widths.empty()) s += " | ms per step by drafts:" + widths;
  return s;
}

void SpecStats::record_width(size_t drafts, double seconds) {
  if (steps_by_width.size() <= drafts) {
    steps_by_width.resize(drafts + 1, 0);
    seconds_by_width.resize(drafts + 1, 0.0);
  }
  ++steps_by_width[drafts];
  seconds_by_width[drafts] += seconds;
}

void SpecStats::add(const SpecStats& o) {
  verifies += o.verifies;
  plain_steps += o.plain_steps;
  drafted += o.drafted;
  accepted += o.accepted;
  emitted += o.emitted;
  replayed += o.replayed;
  tree_verifies += o.tree_verifies;
  tree_nodes += o.tree_nodes;
  auto add_to = [](auto& to, const auto& from) {
    if (to.size() < from.size()) to.resize(from.size());
    for (size_t i = 0; i < from.size(); ++i) to[i] += from[i];
  };
  add_to(tried_at, o.tried_at);
  add_to(accepted_at, o.accepted_at);
  add_to(steps_by_width, o.steps_by_width);
  add_to(seconds_by_width, o.seconds_by_width);
}

double SpecStats::mean_step_seconds(size_t drafts) const {
  return drafts < steps_by_width.size() && steps_by_width[drafts] > 0
             ? seconds_by_width[drafts] / double(steps_by_width[drafts])
             : 0;
}

// ---------------------------------------------------------------- the verify loop

std::string spec_tree_refusal(const Backend& backend, const KvCache& kv, const Drafter& drafter) {
  if (!drafter.gives_candidates())
    return "the " + drafter.name() + " drafter gives no distributions to grow a tree from (draft and dflash do)";
  if (backend.max_token_tree(kv) < 2) return "the " + backend.name() + " backend does not run token trees";
  return "";
}

namespace {
// Candidates per drafted position a tree is grown from: enough for any
// budget's breadth at shallow depths (a best-first tree rarely goes wider).
constexpr int kTreeTopK = 8;
}  // namespace

void decode_speculative(Backend& backend, KvCache& kv, Sampler& sampler, const Tokenizer* tok,
                        std::vector<int32_t> history, std::vector<float>& logits, const GenerateParams& params,
                        const std::function<bool(int32_t)>& on_token, GenerateStats& st) {
  using clock = std::chrono::steady_clock;
  const SpecControllerOptions& co = params.spec.control;
  co.validate();
  Drafter& drafter = *params.spec.drafter;
  SpecController ctl(co);
  SpecStats& ss = st.spec;
  ss.tried_at.assign(static_cast<size_t>(co.draft_max), 0);
  ss.accepted_at.assign(static_cast<size_t>(co.draft_max), 0);
  if (kv.checkpoints().capacity() < co.draft_max + 2)
    kv.set_checkpoints({co.draft_max + 2, kv.checkpoints().options().spacing});
  const int64_t V = backend.config().n_vocab;
  const auto n_vocab = static_cast<int32_t>(V);
  const bool replay = params.spec.rollback == SpecDecoding::Rollback::Replay && kv.has_recurrent();
  // Cache position of history[0] (history is the prompt and what follows it).
  const int64_t base = kv.n_past() - static_cast<int64_t>(history.size());
  std::vector<float> replay_logits;
  // Returns the cache to `target` positions; the seconds a replay took.
  auto roll_back = [&](int64_t target) -> double {
    if (target == kv.n_past()) return 0;
    if (!replay || kv.can_truncate_to(target)) {
      kv.truncate(target);
      return 0;
    }
    const int64_t from = std::max(kv.restorable_at_or_below(target), base);
    kv.truncate(from);
    const auto t0 = clock::now();
    backend.forward(kv, std::span<const int32_t>(history.data() + (from - base), static_cast<size_t>(target - from)),
                    replay_logits);
    st.spec.replayed += target - from;
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Trees where the drafter, the backend and the model allow them.
  const bool trees = params.spec.tree_budget > 0 && spec_tree_refusal(backend, kv, drafter).empty();
  drafter.set_candidates(trees ? std::min(kTreeTopK, params.spec.tree_budget) : 0);
  // The rows of `logits` to sample from: row i follows drafts[0..i) (the
  // prompt's one row at first); with a tree, row n is node n's. p0: the
  // cache's length before their forward.
  std::vector<int32_t> drafts, batch;
  std::vector<std::vector<TokenProb>> q;  // the drafts' distributions (empty: point masses)
  std::vector<TokenProb> p;
  DraftTree tree;
  bool tree_step = false;  // the last forward fed `tree`
  std::vector<int32_t> path;  // a tree verify's nodes kept, root first
  int64_t p0 = kv.n_past();
  bool after_prompt = true;
  // A step's time: drafting, the forward, any replay and the sampling (what
  // speculation must buy back), from its start to the end of its sampling.
  auto step_start = clock::now();
  for (;;) {
    if (params.n_predict >= 0 && st.n_generated >= params.n_predict) break;
    // Sample row by row, as plain decoding would, while the drafts are kept.
    // Point-mass drafts: the row's token is sampled as plain decoding samples
    // it and the draft is kept when it is that token (the rejection rule with
    // q one-hot: kept with probability p(draft), else a draw from p without
    // it), so a seed gives plain decoding's very tokens. Drafts with
    // distributions: speculative_pick(). A tree: the row's token is sampled
    // so too, and the walk goes on to the child that holds it (if any): the
    // same rule over the node's children, exact for greedy and sampling.
    const size_t D = tree_step ? tree.size() - 1 : drafts.size();
    const bool with_q = !tree_step && D > 0 && q.size() >= D;
    size_t i = 0;
    int32_t id = -1, node = 0;
    bool stop = false, kept = false;
    path.assign(1, 0);
    for (;; ++i) {
      const size_t r = tree_step ? static_cast<size_t>(node) : i;
      const float* row = logits.data() + r * static_cast<size_t>(V);
      check_finite_logits(std::span<const float>(row, static_cast<size_t>(V)),
                          D == 0 ? "decode step" : "verify step", st.n_generated);
      if (with_q && i < D) {
        sampler.distribution(row, n_vocab, p);
        const SpecPick pick = speculative_pick(p, q[i], drafts[i], sampler);
        id = pick.token;
        kept = pick.accepted;
      } else {
        id = sampler.sample(row, n_vocab);
        if (tree_step) {
          node = tree.child(node, id);
          kept = node >= 0;
          if (kept) path.push_back(node);
        } else {
          kept = i < D && id == drafts[i];
        }
      }
      sampler.accept(id);
      ++st.n_generated;
      history.push_back(id);
      const bool eog = params.stop_at_eog && tok && tok->is_eog(id);
      if (!on_token(id)) {
        st.stop_reason = "stopped";
        stop = true;
      } else if (eog) {
        st.stop_reason = "eog";
        stop = true;
      } else if (params.n_predict >= 0 && st.n_generated >= params.n_predict) {
        stop = true;  // "length"
      }
      if (stop || !kept) break;
    }
    if (D > 0) {
      // Keep the last token fed and the drafts that were emitted (drafts[0..i)):
      // the cache then holds every emitted token but `id`, as after a plain step.
      // A tree: the path's rows move to consecutive positions (its k-th node
      // was computed at position p0 + k), the other nodes go.
      if (tree_step) {
        path.resize(i + 1);  // a child matched at a stop was not fed
        backend.keep_tree_path(kv, p0, path);
        drafter.tree_kept(path);
      } else {
        roll_back(p0 + 1 + static_cast<int64_t>(i));
      }
      const size_t depth = tree_step ? static_cast<size_t>(tree.max_depth()) : D;
      const size_t matched = i + (kept ? 1 : 0);
      const size_t evaluated = std::min(depth, i + 1);
      if (!tree_step) backend.confirm_drafts(kv, static_cast<int>(matched));
      ++ss.verifies;
      ss.drafted += static_cast<int64_t>(tree_step ? D : evaluated);
      ss.accepted += static_cast<int64_t>(matched);
      ss.emitted += static_cast<int64_t>(i + 1);
      if (tree_step) {
        ++ss.tree_verifies;
        ss.tree_nodes += static_cast<int64_t>(D);
      }
      for (size_t j = 0; j < evaluated; ++j) {
        // A tree's depth j + 1 is reached where the path's node there has children.
        if (tree_step && j < path.size() && !tree.has_children(path[j])) break;
        ++ss.tried_at[j];
        if (j < matched) ++ss.accepted_at[j];
      }
    }
    const double step_seconds = std::chrono::duration<double>(clock::now() - step_start).count();
    if (D > 0) {
      ss.record_width(D, step_seconds);
      // A tree is priced by its depth: the controller's K is how deep it asked.
      const int width = tree_step ? tree.max_depth() : static_cast<int>(D);
      if (!stop) ctl.record_verify(width, static_cast<int>(i), step_seconds);
    } else if (!after_prompt) {
      ss.record_width(0, step_seconds);
      ctl.record_plain(step_seconds);
    }
    after_prompt = false;
    if (stop) break;
    if (kv.n_past() + 1 > kv.ctx()) {
      st.stop_reason = "context full (" + std::to_string(kv.ctx()) + " tokens)";
      break;
    }
    step_start = clock::now();
    // The next forward: `id`, and the drafts that fit the context and the
    // tokens still to generate (a verify emits at most one more than it drafts).
    int64_t k = ctl.plan();
    k = std::min<int64_t>(k, kv.ctx() - kv.n_past() - 1);
    if (params.n_predict >= 0) k = std::min<int64_t>(k, params.n_predict - st.n_generated - 1);
    drafts.clear();
    q.clear();
    tree_step = false;
    if (k >= co.draft_min) {
      drafter.propose(history, static_cast<int>(k), drafts);
      if (static_cast<int64_t>(drafts.size()) > k) drafts.resize(static_cast<size_t>(k));
      // A drafter's token outside the vocabulary ends its proposal there.
      for (size_t j = 0; j < drafts.size(); ++j)
        if (drafts[j] < 0 || drafts[j] >= n_vocab) {
          drafts.resize(j);
          break;
        }
      if (static_cast<int>(drafts.size()) < co.draft_min) drafts.clear();
      const auto& dq = drafter.draft_distributions();
      if (!drafts.empty() && dq.size() >= drafts.size()) q.assign(dq.begin(), dq.begin() + static_cast<std::ptrdiff_t>(drafts.size()));
      if (trees && !drafts.empty()) {
        // The budget scales with the depth asked for (N at --draft-max, at
        // least the chain): a narrow K is then a small tree, so the
        // controller's T(K) grows with K as a chain's does, rather than a
        // shallow fan of N nodes that costs N tokens for one position.
        const int64_t depth = static_cast<int64_t>(drafts.size());
        const int64_t scaled = std::max<int64_t>(depth, (int64_t{params.spec.tree_budget} * depth + co.draft_max - 1) / co.draft_max);
        // Every node takes a slot of the context (the path is compacted after).
        const int64_t room = std::min<int64_t>(kv.ctx() - kv.n_past(), backend.max_token_tree(kv)) - 1;
        const int budget = static_cast<int>(std::min({int64_t{params.spec.tree_budget}, scaled, room}));
        // The drafter's chain first (its probabilities may be flat where its
        // argmax is right), the rest of the budget best-first.
        tree = build_draft_tree(id, drafter.candidates(), budget, static_cast<int>(drafts.size()), V, /*spine=*/true);
        tree_step = static_cast<int>(tree.size()) - 1 >= co.draft_min;
        if (!tree_step) drafts.clear();
      }
    }
    p0 = kv.n_past();
    if (tree_step) {
      const SeqTokens entry{&kv, tree.tokens, true, true, tree.parents};
      backend.forward_seqs(std::span<const SeqTokens>(&entry, 1), logits);
      continue;
    }
    batch.assign(1, id);
    batch.insert(batch.end(), drafts.begin(), drafts.end());
    if (!drafts.empty() && !replay) kv.keep_token_states();
    if (!drafts.empty()) backend.mark_drafts(kv, static_cast<int>(drafts.size()));
    backend.forward(kv, batch, logits, /*all_logits=*/!drafts.empty());
    if (drafts.empty()) ++ss.plain_steps;
  }
}

}  // namespace ms
