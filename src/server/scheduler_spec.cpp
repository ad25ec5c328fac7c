// The scheduler's speculative decoding (Scheduler::Options::spec,
// docs/speculative.md "serve"): drafts per slot within the step's budget,
// the verify's bookkeeping, and the cache's rollback past rejected drafts.
// Sampling the verify's rows is sample_next's (scheduler.cpp): the same
// per-token path as plain decoding.
//
// One SpecController per slot, made for each job: acceptance is a property
// of the text being written (a request that quotes its prompt drafts well
// with n-grams, free chat does not), so each job turns speculation on and
// off on its own counts. The time each controller sees is the whole step's,
// shared by every slot in it: what one token of that slot costs while the
// others run beside it.
#include <algorithm>
#include <utility>
#include <vector>

#include "server/scheduler.h"
#include "server/scheduler_slot.h"

namespace ms::server {

void Scheduler::plan_drafts(const std::vector<Slot*>& going, size_t reserve) {
  for (Slot* s : going) {
    s->drafts.clear();
    s->feed.assign(1, s->next);
  }
  if (!opt_.spec.make_drafter) return;
  std::vector<std::pair<Slot*, int64_t>> want;
  for (Slot* sp : going) {
    Slot& s = *sp;
    if (!s.drafter) continue;
    // K as the controller plans it, within the context (the feed holds
    // s.next and the drafts) and the tokens still to generate (a verify
    // emits at most one more than it drafts).
    int64_t k = s.ctl->plan();
    k = std::min<int64_t>(k, s.kv.ctx() - s.kv.n_past() - 1);
    if (s.job.gen.n_predict > 0) k = std::min<int64_t>(k, s.job.gen.n_predict - s.n_generated - 1);
    if (k >= opt_.spec.control.draft_min) want.emplace_back(&s, k);
  }
  if (want.empty()) return;
  // The step carries at most prefill_chunk tokens: the decode tokens, the
  // prompts' reserve, and the drafts shared evenly between the slots that
  // want them (the remainder to the first).
  const size_t chunk = static_cast<size_t>(std::max(1, opt_.prefill_chunk));
  const size_t used = going.size() + reserve;
  const size_t spare = chunk > used ? chunk - used : 0;
  const size_t share = spare / want.size(), extra = spare % want.size();
  std::vector<std::pair<Slot*, int64_t>> asks;
  for (size_t j = 0; j < want.size(); ++j) {
    const int64_t cap = static_cast<int64_t>(share + (j < extra ? 1 : 0));
    const int64_t k = std::min(want[j].second, cap);
    if (k >= opt_.spec.control.draft_min) asks.emplace_back(want[j].first, k);
  }
  propose_drafts(asks);
}

// Once per job, at its first step (an MTP drafter must see the prompt's
// forwards).
void Scheduler::make_drafter(Slot& s) {
  if (s.spec_ready || !opt_.spec.make_drafter) return;
  s.spec_ready = true;
  try {
    s.drafter = opt_.spec.make_drafter(s.job, s.kv);
  } catch (const std::exception&) {
    s.drafter.reset();  // no drafter (an oracle's reference run failed): the job decodes plainly
  }
  if (s.drafter) s.ctl = std::make_unique<SpecController>(opt_.spec.control);
}

// The slots' drafters propose together (propose_all: a draft model's
// passes for all of them batched), each reading its sequence so far: the
// cache's tokens and s.next.
void Scheduler::propose_drafts(const std::vector<std::pair<Slot*, int64_t>>& asks) {
  std::vector<Proposal> ps;
  for (const auto& [sp, k] : asks) {
    sp->tokens.push_back(sp->next);
    ps.push_back({sp->drafter.get(), sp->tokens, static_cast<int>(k), &sp->drafts, {}});
  }
  propose_all(ps);  // a drafter's failure costs its drafts (error set, drafts cleared), not the request
  const int64_t V = be_.config().n_vocab;
  for (const auto& [sp, k] : asks) {
    Slot& s = *sp;
    s.tokens.pop_back();
    if (static_cast<int64_t>(s.drafts.size()) > k) s.drafts.resize(static_cast<size_t>(k));
    // A token outside the vocabulary ends the proposal there.
    for (size_t j = 0; j < s.drafts.size(); ++j)
      if (s.drafts[j] < 0 || s.drafts[j] >= V) {
        s.drafts.resize(j);
        break;
      }
    // Drafts drawn from distributions (a sampling draft model) keep them in
    // the drafter until sample_next has judged them (spec_rule).
    if (static_cast<int>(s.drafts.size()) < opt_.spec.control.draft_min) s.drafts.clear();
    s.feed.insert(s.feed.end(), s.drafts.begin(), s.drafts.end());
  }
}

// Whether the slot's drafts go through the rejection rule (speculative_pick
// against their distributions q) rather than the point-mass comparison: the
// drafter drew them from distributions (a draft model at a temperature) and
// the job's distribution p is the sampler's alone. A grammar narrows p by a
// mask the sampler's distribution() does not apply, and logprobs come from
// sample(): those jobs sample each row as plain decoding does and keep a
// draft when it is the token drawn (the rule with q one-hot, which holds
// whatever law the draft came from).
bool Scheduler::spec_rule(const Slot& s) const {
  return !s.drafts.empty() && s.drafter && s.drafter->draft_distributions().size() >= s.drafts.size() &&
         !s.matcher && s.job.top_logprobs < 0;
}

// A verify of `drafted` drafts emitted `emitted` tokens, the last of them
// the draft at its row (kept) or not; `ended`: the job finished among them
// (the drafts after that token were never judged).
void Scheduler::record_spec(Slot& s, size_t drafted, size_t emitted, bool kept, bool ended) {
  const size_t i = emitted - 1;  // drafts emitted before the last token
  const size_t judged = std::min(drafted, emitted), accepted = i + (kept ? 1 : 0);
  if (s.ctl && !ended) s.ctl->record_verify(static_cast<int>(drafted), static_cast<int>(i), last_step_seconds_);
  if (metrics_) metrics_->spec_verify(drafted, judged, accepted, emitted);
}

void Scheduler::roll_back(Slot& s, int64_t n) {
  if (n >= s.kv.n_past()) return;
  try {
    s.kv.truncate(n);
    s.tokens.resize(static_cast<size_t>(n));
  } catch (const std::exception& e) {
    // A recurrent state without the verify's token states cannot go back.
    s.kv.clear();
    s.tokens.clear();
    if (s.req) fail(s, std::string("speculative decoding: ") + e.what());
  }
}

}  // namespace ms::server
