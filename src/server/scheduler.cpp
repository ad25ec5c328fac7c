#include "server/scheduler.h"

#include <algorithm>
#include <optional>
#include <span>
#include <system_error>
#include <tuple>

#include "server/grammar_filter.h"
#include "server/scheduler_slot.h"
#include "server/text_stream.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ms::server {

// ------------------------------------------------------------------ Request

Update Request::take(std::chrono::milliseconds timeout) {
  std::unique_lock lk(m_);
  cv_.wait_for(lk, timeout, [&] {
    return finished_ || !pending_.content.empty() || !pending_.reasoning.empty() || !pending_.tool_calls.empty() ||
           !pending_.logprobs.empty();
  });
  Update u = std::move(pending_);
  pending_ = Update{};
  if (u.done) {  // a later take() sees the end again, with no text
    pending_ = u;
    pending_.content.clear();
    pending_.reasoning.clear();
    pending_.tool_calls.clear();
    pending_.logprobs.clear();
  }
  return u;
}

void Request::post(const std::string& content, const std::string& reasoning, std::vector<HarmonyToolCall> calls) {
  if (content.empty() && reasoning.empty() && calls.empty()) return;
  {
    std::lock_guard lk(m_);
    pending_.content += content;
    pending_.reasoning += reasoning;
    for (HarmonyToolCall& c : calls) pending_.tool_calls.push_back(std::move(c));
  }
  cv_.notify_all();
}

void Request::post_logprob(LogprobEntry e) {
  {
    std::lock_guard lk(m_);
    pending_.logprobs.push_back(std::move(e));
  }
  cv_.notify_all();
}

void Request::finish(const std::string& reason, const std::string& error, int n_prompt, int n_cached,
                     int n_completion) {
  {
    std::lock_guard lk(m_);
    pending_.done = true;
    pending_.finish_reason = reason;
    pending_.error = error;
    pending_.n_prompt = n_prompt;
    pending_.n_cached = n_cached;
    pending_.n_completion = n_completion;
    finished_ = true;
  }
  cv_.notify_all();
}

// ------------------------------------------------------------------ slot choice

std::pair<int, size_t> choose_slot(const std::vector<SlotView>& slots, const std::vector<int32_t>& prompt) {
  int best = -1;
  size_t best_len = 0;
  uint64_t best_used = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const SlotView& s = slots[i];
    if (s.busy) continue;
    const std::vector<int32_t>& t = *s.tokens;
    const size_t n = std::min(t.size(), prompt.size());
    size_t len = 0;
    while (len < n && t[len] == prompt[len]) ++len;
    if (best < 0 || len > best_len || (len == best_len && s.last_used < best_used)) {
      best = static_cast<int>(i);
      best_len = len;
      best_used = s.last_used;
    }
  }
  if (best < 0) return {-1, 0};
  // The last prompt token is always run: its logits choose the first token.
  if (best_len >= prompt.size()) best_len = prompt.empty() ? 0 : prompt.size() - 1;
  return {best, best_len};
}

// ------------------------------------------------------------------ Scheduler

Scheduler::Scheduler(Backend& backend, const Tokenizer& tok, Options opt, Metrics* metrics)
    : be_(backend), tok_(tok), opt_(opt), metrics_(metrics) {
  if (opt_.parallel < 1) throw Error("--parallel must be >= 1");
  if (opt_.ctx < 2) throw Error("--ctx must be at least 2 tokens");
  // A backend that holds a fixed number of sequences: no more slots than that.
  const int max_seq = be_.max_sequences();
  if (max_seq > 0 && opt_.parallel > max_seq) {
    requested_parallel_ = opt_.parallel;
    opt_.parallel = max_seq;
  }
  if (opt_.spec.make_drafter) {
    opt_.spec.control.validate();
    // A verify keeps a hybrid's state after each of its tokens (the last
    // token and draft_max drafts) beside the prompt cache's checkpoints.
    opt_.checkpoints.capacity = std::max(opt_.checkpoints.capacity, opt_.spec.control.draft_max + 2);
  }
  request_ctx_ = opt_.ctx;
  if (be_.paged_kv()) {
    if (opt_.ctx_per_request < 0 || opt_.ctx_per_request > opt_.ctx)
      throw Error("--ctx-per-request " + std::to_string(opt_.ctx_per_request) + " must be in 0..--ctx (" +
                  std::to_string(opt_.ctx) + ": the tokens all slots share; 0: all of them)");
    if (opt_.ctx_per_request > 0) request_ctx_ = opt_.ctx_per_request;
    if (request_ctx_ < 2) throw Error("--ctx-per-request must be at least 2 tokens");
    kv_pages_ = be_.make_kv_pages(opt_.ctx, opt_.kv_type, std::max(1, opt_.kv_page_tokens));
  }
  auto mib = [](uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20) + " MiB"; };
  for (int i = 0; i < opt_.parallel; ++i) {
    slots_.push_back(std::make_unique<Slot>(kv_pages_ ? be_.make_paged_cache(kv_pages_, request_ctx_, opt_.kv_type)
                                                      : be_.make_cache(opt_.ctx, opt_.kv_type)));
    slots_.back()->index = i;
    // Hybrids: recurrent-state checkpoints, so that the prompt cache can
    // return a slot to a shared prefix (each prompt chunk's end is one).
    slots_.back()->kv.set_checkpoints(opt_.checkpoints);
    if (i > 0 || opt_.max_kv_bytes == 0) continue;
    // Paged: the shared pool, and per slot its recurrent state (hybrids).
    const uint64_t per_slot = slots_[0]->kv.bytes();  // paged: no pages yet, the recurrent state only
    const uint64_t pool = kv_pages_ ? kv_pages_->bytes() : 0;
    if (pool + per_slot * static_cast<uint64_t>(opt_.parallel) <= opt_.max_kv_bytes) continue;
    if (kv_pages_)
      throw Error("--ctx " + std::to_string(opt_.ctx) + " needs " + mib(pool) + " of KV cache (shared by the slots)" +
                  (per_slot > 0 ? " and " + mib(per_slot) + " per slot of recurrent state" : std::string()) +
                  " but " + mib(opt_.max_kv_bytes) + " of memory are free for it: lower --ctx or --parallel");
    throw Error("--parallel " + std::to_string(opt_.parallel) + " needs " +
                mib(per_slot * static_cast<uint64_t>(opt_.parallel)) + " of KV cache (" + mib(per_slot) +
                " per slot at --ctx " + std::to_string(opt_.ctx) + ") but " + mib(opt_.max_kv_bytes) +
                " of memory are free for it: at most " + std::to_string(opt_.max_kv_bytes / std::max<uint64_t>(1, per_slot)) +
                " slots fit (or lower --ctx)");
  }
  try {
    worker_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    throw Error(std::string("cannot start the scheduler's thread: ") + e.what());
  }
}

Scheduler::~Scheduler() { stop(); }

std::shared_ptr<Request> Scheduler::submit(Job job) {
  auto req = std::make_shared<Request>();
  job.submitted = std::chrono::steady_clock::now();
  // A JSON answer is content from its first byte: no <think> section to split off.
  if (job.grammar) job.separate_reasoning = job.starts_in_reasoning = false;
  if (job.prompt.empty()) {
    req->finish("error", "the prompt has no tokens", 0, 0, 0);
    return req;
  }
  {
    std::lock_guard lk(m_);
    if (stopping_) {
      req->finish("cancelled", "the server is shutting down", static_cast<int>(job.prompt.size()), 0, 0);
      return req;
    }
    queue_.emplace_back(std::move(job), req);
    if (metrics_) metrics_->set_queue(queue_.size(), active_);
  }
  cv_.notify_all();
  return req;
}

std::vector<std::shared_ptr<Request>> Scheduler::submit_choices(Job job, int n) {
  if (n < 1) throw Error("n must be at least 1");
  if (n > opt_.parallel)
    throw Error("'n' = " + std::to_string(n) + " choices need as many slots; this server has " +
                std::to_string(opt_.parallel) + " (--parallel)");
  if (n == 1) return {submit(std::move(job))};
  job.submitted = std::chrono::steady_clock::now();
  if (job.grammar) job.separate_reasoning = job.starts_in_reasoning = false;
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < n; ++i) reqs.push_back(std::make_shared<Request>());
  if (job.prompt.empty()) {
    for (auto& r : reqs) r->finish("error", "the prompt has no tokens", 0, 0, 0);
    return reqs;
  }
  {
    std::lock_guard lk(m_);
    if (stopping_) {
      for (auto& r : reqs)
        r->finish("cancelled", "the server is shutting down", static_cast<int>(job.prompt.size()), 0, 0);
      return reqs;
    }
    // Consecutive in the queue: admit() takes them together.
    for (int i = 0; i < n; ++i) {
      Job j = job;
      j.n_choices = n;
      j.choice = i;
      j.sampling.seed = job.sampling.seed + static_cast<uint64_t>(i);
      queue_.emplace_back(std::move(j), reqs[static_cast<size_t>(i)]);
    }
    if (metrics_) metrics_->set_queue(queue_.size(), active_);
  }
  cv_.notify_all();
  return reqs;
}

void Scheduler::stop() {
  {
    std::lock_guard lk(m_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

size_t Scheduler::queue_depth() const {
  std::lock_guard lk(m_);
  return queue_.size();
}

int Scheduler::active_slots() const { return active_; }

std::string Scheduler::ctx_limit_name() const {
  if (!kv_pages_) return "--ctx " + std::to_string(opt_.ctx) + " (per slot)";
  if (request_ctx_ < opt_.ctx) return "--ctx-per-request " + std::to_string(request_ctx_);
  return "--ctx " + std::to_string(opt_.ctx) + " (shared by " + std::to_string(opt_.parallel) + " slots)";
}

// Paged KV: idle slots' cached tokens give their pages back, least recently
// used first, until `need` pages are free (or none is left to give).
void Scheduler::evict_idle(int64_t need, const Slot* spare) {
  if (!kv_pages_ || kv_pages_->free_pages() >= need) return;
  std::vector<Slot*> idle;
  for (auto& sl : slots_)
    if (!sl->req && sl.get() != spare && !sl->kv.page_table().empty()) idle.push_back(sl.get());
  std::sort(idle.begin(), idle.end(), [](const Slot* a, const Slot* b) { return a->last_used < b->last_used; });
  for (Slot* s : idle) {
    if (kv_pages_->free_pages() >= need) break;
    s->kv.clear();
    s->tokens.clear();
  }
}

// Paged KV, pages short: the job gives its pages back and re-reads what its
// cache held (its prompt; a decoding job: the prompt and the answer so far,
// with the token sampled for this step) when pages free, then samples on
// from there. Its sampler, decoder and grammar state stay: what it sent is
// not sent again.
void Scheduler::preempt(Slot& s) {
  std::vector<int32_t> replay;
  if (s.prefilled < s.job.prompt.size()) {
    replay = std::move(s.job.prompt);
  } else {
    replay = std::move(s.tokens);
    replay.push_back(s.next);
  }
  s.kv.clear();
  s.tokens.clear();
  s.job.prompt = std::move(replay);
  s.prefilled = 0;
  s.logits_row = Slot::kNoRow;
  s.pick = Slot::Pick{};
  s.drafts.clear();  // speculation: the drafts go with the step's entry (the token is in the replay)
  s.feed.clear();
  if (s.drafter) s.drafter->release();  // a draft model's cache gives its pages back too
  s.decoded = false;
  ++preemptions_;
}

void Scheduler::admit() {
  std::lock_guard lk(m_);
  while (!queue_.empty()) {
    if (queue_.front().second->cancelled()) {
      auto& [job, req] = queue_.front();
      req->finish("cancelled", "", static_cast<int>(job.prompt.size()), 0, 0);
      if (metrics_) metrics_->cancelled();
      queue_.pop_front();
      continue;
    }
    const Job& front = queue_.front().first;
    // A job's choices come in together, into as many free slots.
    if (front.n_choices > 1 && front.choice == 0) {
      int n_free = 0;
      for (auto& sl : slots_) n_free += sl->req ? 0 : 1;
      if (n_free < front.n_choices) break;
    }
    int idx = -1;
    size_t keep = 0;
    Slot* leader = nullptr;  // a later choice's: choice 0's slot, admitted just before
    if (front.choice > 0 && choice_leader_ && choice_leader_->req && choice_leader_->job.n_choices == front.n_choices &&
        choice_leader_->prefilled < choice_leader_->job.prompt.size())
      leader = choice_leader_;
    if (leader) {
      // Its state comes from the leader's: the least recently used free slot.
      for (auto& sl : slots_)
        if (!sl->req && (idx < 0 || sl->last_used < slots_[static_cast<size_t>(idx)]->last_used)) idx = sl->index;
    } else {
      std::vector<SlotView> views;
      for (auto& sl : slots_) views.push_back({&sl->tokens, sl->req != nullptr, sl->last_used});
      std::tie(idx, keep) = choose_slot(views, front.prompt);
    }
    if (idx < 0) break;
    Slot& s = *slots_[static_cast<size_t>(idx)];
    // A recurrent state (hybrid models) returns to a shorter prefix only
    // through a checkpoint: keep the longest prefix one holds (else none).
    keep = static_cast<size_t>(s.kv.restorable_at_or_below(static_cast<int64_t>(keep)));
    s.kv.truncate(static_cast<int64_t>(keep));
    s.tokens.resize(keep);
    if (kv_pages_) {
      // Paged KV: the pages of the rest of its prompt and its first answer
      // token (a later choice: its first own page), else it waits for them.
      const int64_t need =
          leader ? 1 : s.kv.pages_needed(static_cast<int64_t>(front.prompt.size() - keep) + 1);
      evict_idle(need, &s);
      if (kv_pages_->free_pages() < need) break;
    }
    s.job = std::move(queue_.front().first);
    s.req = std::move(queue_.front().second);
    queue_.pop_front();
    s.n_prompt = s.job.prompt.size();
    s.prefilled = keep;
    s.n_cached = static_cast<int>(keep);
    s.n_generated = 0;
    s.logits_row = Slot::kNoRow;
    s.last_used = ++clock_;
    s.admitted = clock_;
    s.sampler = std::make_unique<Sampler>(s.job.sampling);
    for (int32_t id : s.job.prompt) s.sampler->accept(id);
    StreamDecoder::Options dec_opt;
    dec_opt.render_special = s.job.render_special;
    s.dec = std::make_unique<StreamDecoder>(tok_, dec_opt);
    s.stop = std::make_unique<StopMatcher>(s.job.stop);
    s.think = s.job.separate_reasoning ? std::make_unique<ThinkSplitter>(s.job.starts_in_reasoning) : nullptr;
    s.harmony.reset();
    s.matcher.reset();
    if (s.job.grammar) {
      if (!token_mask_) {  // once per server: the vocabulary's bytes in a trie
        const int32_t n = tok_.n_tokens();
        std::vector<std::string> pieces(static_cast<size_t>(n));
        std::vector<bool> eog(static_cast<size_t>(n));
        for (int32_t id = 0; id < n; ++id) {
          eog[static_cast<size_t>(id)] = tok_.is_eog(id);
          pieces[static_cast<size_t>(id)] = tok_.token_to_piece(id, false);
        }
        token_mask_ = std::make_unique<grammar::TokenMask>(pieces, eog);
      }
      s.matcher = std::make_unique<grammar::Matcher>(*s.job.grammar);
    }
    if (s.job.harmony)
      if (const auto markers = harmony_markers(tok_)) s.harmony = std::make_unique<HarmonyParser>(tok_, *markers);
    s.fork_of = leader;
    s.drafter.reset();
    s.ctl.reset();
    s.spec_ready = false;
    s.drafts.clear();
    s.decoded = false;
    if (s.job.n_choices > 1 && s.job.choice == 0) choice_leader_ = &s;
    ++active_;
  }
  if (metrics_) metrics_->set_queue(queue_.size(), active_);
}

void Scheduler::finish(Slot& s, const std::string& reason, const std::string& error) {
  // Choices still waiting for this one's prompt read it themselves.
  for (auto& sp : slots_)
    if (sp->fork_of == &s) sp->fork_of = nullptr;
  s.fork_of = nullptr;
  if (choice_leader_ == &s) choice_leader_ = nullptr;
  if (reason != "error" && reason != "cancelled" && s.harmony) {
    emit_harmony(s, s.harmony->flush());
    s.req->post(s.stop->flush(), "");
  } else if (reason != "error" && reason != "cancelled") {
    // Text held back for a stop string that never came, and the decoder's tail.
    std::string tail = s.stop->push(s.dec->flush());
    tail += s.stop->flush();
    if (s.think) {
      ThinkSplitter::Out o = s.think->push(tail), f = s.think->flush();
      s.req->post(o.content + f.content, o.reasoning + f.reasoning);
    } else {
      s.req->post(tail, "");
    }
  }
  const int n_prompt = static_cast<int>(s.n_prompt);
  if (metrics_) {
    metrics_->tokens(n_prompt, s.n_cached, s.n_generated);
    if (reason == "cancelled") metrics_->cancelled();
  }
  // The slot is free before the client hears that the job ended.
  std::shared_ptr<Request> req = std::move(s.req);
  const int n_cached = s.n_cached, n_generated = s.n_generated;
  s.sampler.reset();
  s.dec.reset();
  s.stop.reset();
  s.think.reset();
  s.harmony.reset();
  s.matcher.reset();
  s.drafter.reset();
  s.ctl.reset();
  if (metrics_ && n_generated > 1) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.first_token).count();
    if (secs > 0) metrics_->slot_tokens_per_second(s.index, (n_generated - 1) / secs);
  }
  s.job = Job{};
  s.last_used = ++clock_;
  --active_;
  if (metrics_) metrics_->set_queue(queue_depth(), active_);
  req->finish(reason, error, n_prompt, n_cached, n_generated);
}

std::span<const float> Scheduler::logits_of(const Slot& s) const {
  const size_t V = static_cast<size_t>(be_.config().n_vocab);
  if (s.logits_row == Slot::kNoRow || (s.logits_row + 1) * V > step_logits_.size())
    throw Error("internal: a decoding slot has no logits");
  return std::span<const float>(step_logits_.data() + s.logits_row * V, V);
}

// The next token of a decoding slot from its logits, kept in s.pick (an
// error too): nothing but the slot's own state is touched (a grammar job's
// whole mask goes through token_mask_'s cache under mask_mutex_), so slots
// run this side by side.
void Scheduler::pick_token(Slot& s) {
  s.pick = Slot::Pick{};
  try {
    const std::span<const float> logits = logits_of(s);
    // Corrupt weights (NaN/Inf) end the request with the reason, not with garbage text.
    check_finite_logits(logits, "decode step", s.n_generated);
    SampleOptions opt;
    // A grammar job: the sampler asks its best tokens one by one, and the
    // vocabulary's whole mask (a walk of its trie: tens of ms inside a
    // string, bench/results/grammar.md) only where it needs every answer.
    std::optional<GrammarFilter> filter;
    if (s.matcher) opt.filter = &filter.emplace(*token_mask_, *s.matcher, s.allowed, &mask_mutex_);
    if (s.job.top_logprobs >= 0) {
      opt.logprobs = &s.pick.lp;
      opt.top_logprobs = s.job.top_logprobs;
    }
    s.pick.id = s.sampler->sample(logits.data(), static_cast<int32_t>(logits.size()), opt);
  } catch (const std::exception& e) {
    s.pick.error = e.what();
  }
  s.pick.ready = true;
}

// Every decoding slot picks its token, several at once when there are
// several: each reads its own logit row and its own sampler (and grammar
// state), and the serial scan of 8 rows of a 152k vocabulary took a share of
// a multi-sequence step (bench/results/serve.md, "session 6").
void Scheduler::pick_tokens(const std::vector<Slot*>& slots) {
  std::vector<Slot*> todo;
  for (Slot* s : slots)  // (rows judged by the rejection rule draw in sample_next)
    if (s->job.gen.n_predict != 0 && !spec_rule(*s)) todo.push_back(s);
  if (todo.size() < 2) return;  // sample_next picks on its own
  if (!pick_pool_) {
    ThreadPool::Options o;
    o.n_threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, std::min(opt_.parallel, 8));
    o.spin_us = 0;  // idle between steps: sleep, leave the cores to the backend
    pick_pool_ = std::make_unique<ThreadPool>(o);
  }
  pick_pool_->parallel_for(static_cast<int64_t>(todo.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pick_token(*todo[static_cast<size_t>(i)]);
  });
}

// A slot whose prompt is in its cache: the next token sampled from its
// logits (by pick_tokens, or here), emitted, and (when the job goes on) left
// in s.next for the step's forward pass. Returns whether the slot decodes in
// this step.
//
// After a verify (the last forward fed s.next and D drafts, a logit row
// each) the rows are sampled in turn, as plain decoding would sample them,
// each after the tokens before it are emitted (sampler, grammar, stop
// strings), while the draft at a row IS the token sampled there: the same
// tokens as plain decoding, greedy or seeded (decode_speculative's rule for
// point-mass drafts). Drafts drawn from distributions (spec_rule) go through
// speculative_pick instead: the tokens have plain decoding's law, not its
// draws. The cache then goes back to what was emitted (the rejected drafts,
// and any drafts past a stop or max_tokens, leave it).
bool Scheduler::sample_next(Slot& s) {
  const size_t D = s.drafts.size();
  const int64_t p0 = s.kv.n_past() - static_cast<int64_t>(D) - 1;  // the cache before s.next (with drafts)
  const size_t row0 = s.logits_row;
  const bool rule = spec_rule(s);
  static const std::vector<std::vector<TokenProb>> no_q;
  const std::vector<std::vector<TokenProb>>& q = rule ? s.drafter->draft_distributions() : no_q;
  size_t i = 0;
  bool kept = false, going = false;
  try {
    if (s.job.gen.n_predict == 0) {
      finish(s, "length");
      return false;
    }
    for (;; ++i) {
      if (i > 0) s.logits_row = row0 + i;
      Slot::Pick pick;
      if (rule && i < D) {
        // Drafts drawn from q: kept with probability min(1, p/q), else a
        // draw from max(0, p - q) (the row's token is distributed as p).
        const std::span<const float> logits = logits_of(s);
        check_finite_logits(logits, "verify step", s.n_generated);
        s.sampler->distribution(logits.data(), static_cast<int32_t>(logits.size()), p_dist_);
        const SpecPick sp = speculative_pick(p_dist_, q[i], s.drafts[i], *s.sampler);
        pick.id = sp.token;
        kept = sp.accepted;
      } else {
        if (!s.pick.ready) pick_token(s);
        pick = std::move(s.pick);
        s.pick = Slot::Pick{};
        if (!pick.error.empty()) throw Error(pick.error);
        kept = i < D && pick.id == s.drafts[i];
      }
      // Row i follows s.next and drafts [0, i): what the cache keeps.
      going = emit_token(s, pick.id, pick.lp, D > 0 ? p0 + 1 + static_cast<int64_t>(i) : s.kv.n_past());
      if (!going) break;
      s.next = pick.id;
      if (!kept) break;
    }
  } catch (const std::exception& e) {
    if (s.req) fail(s, e.what());
    return false;
  }
  if (D > 0) {
    record_spec(s, D, i + 1, kept, !going);
    // The cache keeps the token fed before the drafts and the drafts emitted
    // (those before row i): every emitted token but the last, as after a
    // plain step. Also when the job ended: the prompt cache reuses it.
    roll_back(s, p0 + 1 + static_cast<int64_t>(i));
    s.drafts.clear();
    return going && s.req;  // roll_back fails the job when the cache cannot go back
  }
  if (going && s.ctl && s.decoded) s.ctl->record_plain(last_step_seconds_);
  return going;
}

// One sampled token out through the job's per-token path (usage, logprobs,
// grammar, harmony or text with stop strings and reasoning); returns whether
// the job goes on (else it finished). n_kept: the tokens the cache holds
// before this one once rejected drafts are gone (the context check).
bool Scheduler::emit_token(Slot& s, int32_t id, const StepLogprobs& lp, int64_t n_kept) {
  const bool want_logprobs = s.job.top_logprobs >= 0;
  s.sampler->accept(id);
  ++s.n_generated;
  if (metrics_) {
    metrics_->generated_token();
    if (s.n_generated == 1) {
      s.first_token = std::chrono::steady_clock::now();
      metrics_->time_to_first_token(std::chrono::duration<double>(s.first_token - s.job.submitted).count());
    } else if (s.n_generated % 16 == 0) {  // the running request's rate, refreshed as it goes
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.first_token).count();
      if (secs > 0) metrics_->slot_tokens_per_second(s.index, (s.n_generated - 1) / secs);
    }
  }
  // Under a grammar an end-of-turn token is only allowed once the value is
  // complete, and it always ends the answer.
  if ((s.job.gen.stop_at_eog || s.matcher) && tok_.is_eog(id)) {
    finish(s, "stop");
    return false;
  }
  if (want_logprobs) {
    LogprobEntry e;
    e.token = tok_.token_to_piece(id, true);
    e.logprob = lp.sampled.logprob;
    for (const TokenLogprob& t : lp.top) e.top.emplace_back(tok_.token_to_piece(t.token, true), t.logprob);
    s.req->post_logprob(std::move(e));
  }
  if (s.matcher && !s.matcher->advance(tok_.token_to_piece(id, false)))
    throw Error("internal: the sampled token does not continue the JSON answer");
  if (s.harmony) {
    emit_harmony(s, s.harmony->push(id));
  } else {
    const std::string text = s.stop->push(s.dec->push(id));
    if (s.think) {
      ThinkSplitter::Out o = s.think->push(text);
      s.req->post(o.content, o.reasoning);
    } else {
      s.req->post(text, "");
    }
  }
  // The JSON value closed and nothing may follow it: the answer is whole.
  const bool closed = s.matcher && s.matcher->can_end() && !s.matcher->can_continue();
  if (closed || s.stop->stopped() || (s.job.gen.n_predict > 0 && s.n_generated >= s.job.gen.n_predict) ||
      n_kept + 1 > s.kv.ctx()) {
    finish(s, closed || s.stop->stopped() ? "stop" : "length");
    return false;
  }
  return true;
}

// Stop strings apply to the answer only; the analysis is reasoning (sent
// only when the job asked for it), tool calls go as they are.
void Scheduler::emit_harmony(Slot& s, HarmonyParser::Out o) {
  const std::string content = s.stop->push(o.content);
  s.req->post(content, s.job.separate_reasoning && !s.stop->stopped() ? o.reasoning : "",
              s.stop->stopped() ? std::vector<HarmonyToolCall>{} : std::move(o.tool_calls));
}

void Scheduler::fail(Slot& s, const std::string& what) {
  // The cache may hold part of a batch: forget it.
  s.kv.clear();
  s.kv.keep_token_states(false);
  s.tokens.clear();
  finish(s, "error", what);
}

// The prompt tokens a step may carry: the step holds at most prefill_chunk
// tokens (one backend pass when -b is the backend's batch), its decode
// tokens first; what is left goes to prompts, but never less than a quarter
// of prefill_chunk, so prompts make progress however many slots decode.
size_t step_prompt_budget(int prefill_chunk, size_t n_decode) {
  const size_t chunk = static_cast<size_t>(std::max(1, prefill_chunk));
  const size_t floor = std::max<size_t>(1, chunk / 4);
  return std::max(floor, chunk > n_decode ? chunk - n_decode : 0);
}

struct Scheduler::Entry {
  Slot* slot;
  std::span<const int32_t> tokens;
  bool prompt;       // a prompt chunk (else a decode token, and any drafts after it)
  bool want_logits;  // a decode token, or the chunk that ends the prompt
  bool all_logits = false;  // a verify: a row for the decode token and each draft
};

// Paged KV: the step's entries take their pages -- decode tokens (with their
// drafts) first (idle slots' caches, then the most recently admitted jobs
// give theirs back: preempt), then prompt chunks in admission order, each
// cut to what the free pages hold (none: it waits). When nothing at all
// could run, the most recently admitted job gives its pages back for the
// others.
void Scheduler::fit_pages(std::vector<Entry>& entries) {
  if (!kv_pages_) return;
  auto drop = [&](const Slot* s) {
    std::erase_if(entries, [s](const Entry& e) { return e.slot == s; });
  };
  auto newest_busy = [&]() -> Slot* {
    Slot* v = nullptr;
    for (auto& sl : slots_)
      if (sl->req && !sl->fork_of && !sl->kv.page_table().empty() && (!v || sl->admitted > v->admitted)) v = sl.get();
    return v;
  };
  for (;;) {
    int64_t need = 0;
    for (const Entry& e : entries)
      need += e.prompt ? 0 : e.slot->kv.pages_needed(static_cast<int64_t>(e.tokens.size()));
    evict_idle(need, nullptr);
    if (need <= kv_pages_->free_pages()) break;
    Slot* v = newest_busy();
    if (!v) break;  // the backend reports the shortage
    preempt(*v);
    drop(v);
  }
  for (const Entry& e : entries)
    if (!e.prompt) e.slot->kv.reserve(static_cast<int64_t>(e.tokens.size()));
  std::vector<const Slot*> waiting;
  for (Entry& e : entries) {
    if (!e.prompt) continue;
    KvCache& kv = e.slot->kv;
    int64_t n = static_cast<int64_t>(e.tokens.size());
    evict_idle(kv.pages_needed(n), e.slot);
    while (n > 0 && kv.pages_needed(n) > kv_pages_->free_pages()) --n;
    if (n == 0 || kv.reserve(n) != PageStatus::Ok) {
      waiting.push_back(e.slot);
      continue;
    }
    e.tokens = e.tokens.first(static_cast<size_t>(n));
    e.want_logits = e.slot->prefilled + static_cast<size_t>(n) == e.slot->job.prompt.size();
  }
  for (const Slot* s : waiting) drop(s);
  if (entries.empty() && !waiting.empty()) {
    Slot* v = newest_busy();
    if (v && v->admitted > waiting.front()->admitted) preempt(*v);
  }
}

void Scheduler::step() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Entry> entries;
  std::vector<Slot*> prefilling, decoding;
  // Decoding slots sample their next token (cancelled jobs end here).
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req) continue;
    if (s.req->cancelled()) {
      finish(s, "cancelled");
      continue;
    }
    if (s.fork_of) continue;  // waits for choice 0's prompt (fork_choices)
    if (s.prefilled < s.job.prompt.size()) {
      // A prompt longer than the slot's context ends before any chunk of it runs.
      if (static_cast<int64_t>(s.job.prompt.size()) > s.kv.ctx()) {
        fail(s, "the prompt has " + std::to_string(s.job.prompt.size()) + " tokens, more than the context of " +
                    std::to_string(s.kv.ctx()) + " tokens a request may hold (" + ctx_limit_name() + ")");
        continue;
      }
      make_drafter(s);  // before the prompt runs: an MTP drafter reads its forwards
      prefilling.push_back(&s);
      continue;
    }
    make_drafter(s);
    decoding.push_back(&s);
  }
  pick_tokens(decoding);
  std::vector<Slot*> going;
  for (Slot* s : decoding) {
    s->decoded = false;
    if (sample_next(*s)) going.push_back(s);
  }
  // Drafts within the step's budget (a quarter of it stays for prompts when
  // some wait); each slot feeds its token and its drafts.
  const size_t prompt_reserve = std::max<size_t>(1, static_cast<size_t>(std::max(1, opt_.prefill_chunk)) / 4);
  plan_drafts(going, prefilling.empty() ? 0 : prompt_reserve);
  size_t n_decode = 0;
  for (Slot* s : going) {
    s->decoded = true;
    entries.push_back({s, std::span<const int32_t>(s->feed), false, true, !s->drafts.empty()});
    n_decode += s->feed.size();
  }
  // Prompt chunks, earliest admitted first, within the step's prompt budget.
  std::sort(prefilling.begin(), prefilling.end(), [](const Slot* a, const Slot* b) { return a->admitted < b->admitted; });
  size_t budget = step_prompt_budget(opt_.prefill_chunk, n_decode);
  for (Slot* s : prefilling) {
    if (budget == 0) break;
    const std::vector<int32_t>& prompt = s->job.prompt;
    const size_t n = std::min(prompt.size() - s->prefilled, budget);
    budget -= n;
    entries.push_back({s, std::span<const int32_t>(prompt.data() + s->prefilled, n), true,
                       s->prefilled + n == prompt.size()});
  }
  fit_pages(entries);
  // Each entry checked on its own first: one that cannot run (a prompt past
  // its context, a token outside the vocabulary) fails its request only.
  const int64_t V = be_.config().n_vocab;
  std::vector<Entry> ok;
  std::vector<SeqTokens> seqs;
  for (const Entry& e : entries) {
    const SeqTokens st{&e.slot->kv, e.tokens, e.want_logits, e.all_logits};
    try {
      check_seq_tokens(std::span<const SeqTokens>(&st, 1), V);
    } catch (const std::exception& ex) {
      fail(*e.slot, ex.what());
      continue;
    }
    ok.push_back(e);
    seqs.push_back(st);
  }
  if (ok.empty()) return;
  size_t step_drafts = 0;
  for (const Entry& e : ok)
    if (e.all_logits) {
      step_drafts += e.tokens.size() - 1;
      e.slot->kv.keep_token_states();  // a hybrid's state after each, for the rollback
    }
  if (metrics_) {
    size_t decodes = 0, prompt_tokens = 0;
    for (const Entry& e : ok) (e.prompt ? prompt_tokens : decodes) += e.prompt ? e.tokens.size() : 1;
    if (decodes > 0) metrics_->decode_step(decodes);
    metrics_->step_prompt_tokens(prompt_tokens);
  }
  try {
    be_.forward_seqs(seqs, step_logits_);
  } catch (const std::exception& ex) {
    // The step as a whole failed (the backend, not one entry's input): every
    // request in it ends with the reason.
    for (const Entry& e : ok) fail(*e.slot, ex.what());
    return;
  }
  size_t row = 0;
  for (const Entry& e : ok) {
    Slot& s = *e.slot;
    s.tokens.insert(s.tokens.end(), e.tokens.begin(), e.tokens.end());
    if (e.prompt) s.prefilled += e.tokens.size();
    if (e.want_logits) {
      s.logits_row = row;
      row += e.all_logits ? e.tokens.size() : 1;
    }
    if (e.prompt && e.want_logits) fork_choices(s);
  }
  // The whole turn (sampling the last step's rows, drafting, the forward):
  // what a decode costs each slot in it, the controllers' measure.
  last_step_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (metrics_ && opt_.spec.make_drafter) metrics_->spec_step(step_drafts, last_step_seconds_);
}

// Choice 0's prompt is in: every choice waiting for it takes its state (K/V,
// recurrent state, positions) and its logits row, and samples on its own.
void Scheduler::fork_choices(Slot& leader) {
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (s.fork_of != &leader) continue;
    s.fork_of = nullptr;
    if (!s.req) continue;
    try {
      be_.fork(leader.kv, s.kv);
    } catch (const std::exception& ex) {
      fail(s, ex.what());
      continue;
    }
    s.tokens = leader.tokens;
    s.prefilled = leader.prefilled;
    s.n_cached = leader.n_cached;
    s.logits_row = leader.logits_row;
  }
}

void Scheduler::publish_experts() {
  if (metrics_) metrics_->set_experts(expert_metrics(be_.expert_telemetry()));
}

void Scheduler::run() {
  publish_experts();  // whether the backend tiers experts is known before any request
  for (;;) {
    {
      std::unique_lock lk(m_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || active_ > 0; });
      if (stopping_) break;
    }
    admit();
    step();
    publish_experts();
  }
  // Shutting down: everything still open ends as cancelled.
  for (auto& s : slots_)
    if (s->req) finish(*s, "cancelled");
  std::lock_guard lk(m_);
  for (auto& [job, req] : queue_) req->finish("cancelled", "the server is shutting down", 0, 0, 0);
  queue_.clear();
}

}  // namespace ms::server
