// The draft-model drafter and its vocabulary check (engine/speculative.h).
#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/draft_tree.h"
#include "engine/kv_cache.h"
#include "engine/speculative.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ms {

// ---------------------------------------------------------------- draft model

DraftCache::DraftCache() = default;
DraftCache::~DraftCache() = default;

void DraftCache::clear() {
  if (kv) kv->clear();
  fed.clear();
}

ModelDrafter::ModelDrafter(Backend& draft, Options o, std::shared_ptr<DraftCache> cache)
    : be_(draft), opt_(o), cache_(std::move(cache)), sampler_([&] {
        // The draft's own sampler: the target's cut (temperature, top-k,
        // top-p, min-p), no penalties (its q is what it draws from), its own
        // stream of random numbers.
        SamplerParams sp = o.sampling;
        sp.repeat_penalty = 1.0f;
        sp.presence_penalty = sp.frequency_penalty = 0.0f;
        sp.logit_bias.clear();
        sp.seed = o.sampling.seed ^ 0x9e3779b97f4a7c15ULL;
        return sp;
      }()) {
  if (!(o.p_min >= 0.0 && o.p_min <= 1.0)) throw Error("--draft-p-min: must be in [0, 1]");
  if (o.ctx < 1) throw Error("draft model: the context must be >= 1 token");
  if (!cache_) cache_ = std::make_shared<DraftCache>();
  if (cache_->kv) {
    if (cache_->kv->ctx() < o.ctx)
      throw Error("draft model: its cache holds " + std::to_string(cache_->kv->ctx()) + " tokens, fewer than the " +
                  std::to_string(o.ctx) + " asked for");
    return;
  }
  cache_->kv = std::make_unique<KvCache>(be_.make_cache(o.ctx));
  cache_->fed.clear();
  // Recurrent draft models go back through checkpoints (one per verify depth).
  KvCache& kv = *cache_->kv;
  if (kv.has_recurrent()) kv.set_checkpoints({66, kv.checkpoints().options().spacing});
}

int64_t ModelDrafter::n_cached() const { return cache_->kv->n_past(); }

void ModelDrafter::run(std::span<const int32_t> tokens) {
  try {
    be_.forward(*cache_->kv, tokens, logits_);
  } catch (...) {
    // What the cache holds is unknown after a failed pass: start over.
    cache_->clear();
    throw;
  }
  fed(tokens);
}

void ModelDrafter::fed(std::span<const int32_t> tokens) {
  ++forwards_;
  cache_->fed.insert(cache_->fed.end(), tokens.begin(), tokens.end());
}

std::span<const int32_t> ModelDrafter::start(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  dists_.clear();
  cands_.clear();
  want_ = 0;
  const int64_t H = static_cast<int64_t>(h.size());
  if (max_tokens <= 0 || H == 0) return {};
  max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, opt_.ctx - H));
  if (max_tokens <= 0) return {};  // no room for drafts in the draft's context
  KvCache& kv = *cache_->kv;
  std::vector<int32_t>& fed = cache_->fed;
  // Back to the longest prefix shared with the history, keeping at least the
  // last history token to run (its logits are the first draft's).
  int64_t keep = 0;
  const int64_t n_fed = static_cast<int64_t>(fed.size());
  while (keep < std::min(n_fed, H - 1) && fed[static_cast<size_t>(keep)] == h[static_cast<size_t>(keep)]) ++keep;
  keep = kv.restorable_at_or_below(keep);
  kv.truncate(keep);
  fed.resize(static_cast<size_t>(keep));
  want_ = max_tokens;
  return h.subspan(static_cast<size_t>(keep));
}

bool ModelDrafter::take(const float* row, std::vector<int32_t>& out) {
  const int64_t V = be_.config().n_vocab;
  int32_t id;
  double prob;
  const bool greedy = opt_.sampling.temperature <= 0;
  if (greedy) {
    id = argmax(row, static_cast<int32_t>(V));
    if (opt_.p_min > 0) {  // softmax at temperature 1 of the argmax
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - row[id]);
      prob = 1.0 / sum;
    } else {
      prob = 1.0;
    }
  } else {
    sampler_.distribution(row, static_cast<int32_t>(V), dist_);
    id = sampler_.draw_from(dist_);
    prob = 0;
    for (const TokenProb& t : dist_)
      if (t.id == id) prob = t.p;
  }
  if (prob < opt_.p_min) return false;
  out.push_back(id);
  if (!greedy) dists_.push_back(dist_);
  if (top_k_ > 0) {  // tree drafts: the top of what this position was drawn from
    std::vector<TokenProb> c;
    if (greedy) {
      top_candidates(row, V, top_k_, c);
    } else {
      c = dist_;
      std::stable_sort(c.begin(), c.end(), [](const TokenProb& a, const TokenProb& b) { return a.p > b.p; });
      if (c.size() > static_cast<size_t>(top_k_)) c.resize(static_cast<size_t>(top_k_));
    }
    cands_.push_back(std::move(c));
  }
  return static_cast<int>(out.size()) < want_;
}

void ModelDrafter::propose(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) {
  const std::span<const int32_t> feed = start(h, max_tokens, out);
  if (feed.empty()) return;
  run(feed);
  while (take(logits_.data(), out)) {
    const int32_t one[1] = {out.back()};
    run(one);
  }
}

namespace {

// Draft-model proposals of one backend, their passes batched (propose_all).
void propose_together(Backend& be, const std::vector<Proposal*>& ps, const std::vector<ModelDrafter*>& ds) {
  const size_t n = ps.size();
  std::vector<std::vector<int32_t>> feed(n);
  std::vector<size_t> active;
  for (size_t i = 0; i < n; ++i) {
    try {
      const std::span<const int32_t> f = ds[i]->start(ps[i]->history, ps[i]->max_tokens, *ps[i]->out);
      feed[i].assign(f.begin(), f.end());
      if (!feed[i].empty()) active.push_back(i);
    } catch (const std::exception& e) {
      ps[i]->out->clear();
      ps[i]->error = e.what();
    }
  }
  std::vector<SeqTokens> seqs;
  std::vector<size_t> in_pass;
  std::vector<float> logits;
  const size_t V = static_cast<size_t>(be.config().n_vocab);
  while (!active.empty()) {
    seqs.clear();
    in_pass.clear();
    for (size_t i : active) {
      KvCache& kv = *ds[i]->cache().kv;
      // A paged cache takes its pages now: one that cannot drafts no further
      // (what it drafted stays; its cache holds what it ran).
      if (kv.paged() && kv.reserve(static_cast<int64_t>(feed[i].size())) != PageStatus::Ok) continue;
      seqs.push_back({&kv, feed[i], true});
      in_pass.push_back(i);
    }
    if (seqs.empty()) break;
    try {
      be.forward_seqs(seqs, logits);
    } catch (const std::exception& e) {
      for (size_t i : in_pass) {
        ds[i]->cache().clear();  // what the caches hold is unknown after a failed pass
        ps[i]->out->clear();
        ps[i]->error = e.what();
      }
      break;
    }
    active.clear();
    for (size_t j = 0; j < in_pass.size(); ++j) {
      const size_t i = in_pass[j];
      ds[i]->fed(feed[i]);
      if (!ds[i]->take(logits.data() + j * V, *ps[i]->out)) continue;
      feed[i].assign(1, ps[i]->out->back());
      active.push_back(i);
    }
  }
}

}  // namespace

void propose_all(std::span<Proposal> proposals) {
  // Draft-model drafters grouped by backend; the rest one by one.
  std::vector<std::pair<Backend*, std::pair<std::vector<Proposal*>, std::vector<ModelDrafter*>>>> groups;
  for (Proposal& p : proposals) {
    p.error.clear();
    auto* md = dynamic_cast<ModelDrafter*>(p.drafter);
    if (!md) {
      try {
        p.drafter->propose(p.history, p.max_tokens, *p.out);
      } catch (const std::exception& e) {
        p.out->clear();
        p.error = e.what();
      }
      continue;
    }
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == &md->backend(); });
    if (g == groups.end()) g = groups.insert(groups.end(), {&md->backend(), {}});
    g->second.first.push_back(&p);
    g->second.second.push_back(md);
  }
  for (auto& [be, g] : groups) propose_together(*be, g.first, g.second);
}

void check_draft_vocab(const Tokenizer& target, const Tokenizer& draft, int64_t target_n_vocab,
                       int64_t draft_n_vocab) {
  if (target_n_vocab != draft_n_vocab)
    throw Error("draft model: its vocabulary has " + std::to_string(draft_n_vocab) + " tokens, the model's " +
                std::to_string(target_n_vocab) + " (a draft model must share the model's vocabulary)");
  const auto& a = target.vocab().tokens;
  const auto& b = draft.vocab().tokens;
  if (a.size() != b.size())
    throw Error("draft model: its tokenizer has " + std::to_string(b.size()) + " tokens, the model's " +
                std::to_string(a.size()) + " (a draft model must share the model's vocabulary)");
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      throw Error("draft model: token " + std::to_string(i) + " is \"" + b[i] + "\" in the draft model and \"" +
                  a[i] + "\" in the model (a draft model must share the model's vocabulary)");
}

}  // namespace ms
