// One engine serving many requests: a FIFO queue of jobs, --parallel slots
// (each a sequence with its own KV cache), and one worker thread that owns
// the backend.
//
// Each turn of the worker is one step: every decoding slot samples its next
// token, and those tokens go through the backend in ONE forward_seqs call
// together with the next chunk of the prompts being read (continuous batching
// with chunked prefill: projections, router and experts run once over the
// step's tokens, attention per sequence). Jobs join and leave between steps.
//
// Chunk policy (step_prompt_budget): a step carries at most prefill_chunk
// tokens, the decode tokens first; the rest of that budget -- never less than
// a quarter of prefill_chunk -- goes to prompts, the earliest admitted job
// first, each taking min(what is left of its prompt, what is left of the
// budget). So a long prompt takes a chunk per step while every decoding slot
// still gets its token in that same step (a prompt stalls the others for at
// most one chunk's time per step), and several short prompts arriving
// together are read in one step.
//
// Each entry is checked on its own before the step (its cache's room, its
// token ids): one that fails ends its request only. A step that fails in the
// backend ends the requests in it.
//
// Slots: --parallel, capped by the backend's max_sequences() when it has one
// (parallel() says what was kept, requested_parallel() what was asked).
//
// KV memory (Options::ctx). A backend with paged KV (Backend::paged_kv(): the
// CPU) gives every slot's cache pages of ONE pool of ctx tokens, as
// llama-server's unified KV: --ctx is the tokens all slots share, and one
// request may hold up to ctx_per_request of them (0: all ctx). A job is
// admitted when the pages for its prompt (and its first answer token) are
// free -- idle slots' cached prompts give theirs back first, least recently
// used first -- and otherwise waits in the queue until pages free. When a
// step's decode tokens need pages that no idle slot can give back (or no
// entry of the step can go on at all), the most recently admitted job gives
// its pages back and later re-reads what it had (its prompt and the answer
// so far, which is not sent again) before it goes on sampling: the earliest
// admitted jobs always progress. A backend without paged KV (CUDA, until its
// kernels read through block tables) gives each slot a cache of ctx tokens
// of its own, as before.
//
// Prompt cache: a slot keeps the tokens its KV cache holds after a request.
// A new job takes the free slot whose tokens share the longest prefix with
// its prompt and prefills only the rest, so a multi-turn chat re-reads only
// the new turn. (Hybrids go back to the longest prefix that a recurrent-state
// checkpoint holds: Options::checkpoints.) (At least the prompt's last token is always run again: its
// logits give the first sampled token.)
//
// The backend's expert telemetry reaches /metrics as a snapshot the worker
// takes after each turn (the backend is not safe to ask while a pass runs on
// another thread); a job's passes are in it before the job reports its end.
//
// Jobs report to their Request (a thread-safe mailbox the HTTP thread waits
// on); cancel() from the client side (a disconnect) frees the slot at the
// worker's next turn.
//
// Speculative decoding (Options::spec, `serve --spec`; scheduler_spec.cpp):
// a decoding slot's entry is its token and up to K drafts, verified in the
// same step as everything else; the next turn samples its rows through the
// per-token path while the drafts match and truncates its cache to what was
// emitted, so every answer is plain decoding's.
//
// Choices (`n`): the n jobs of one request are admitted together; choice 0
// prefills, the others wait in their slots and take its state by a fork when
// its prompt is in (one prefill for all), then decode as sequences of the
// same steps.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "grammar/token_mask.h"
#include "server/metrics.h"
#include "server/structured_output.h"
#include "tokenizer/harmony.h"

namespace ms {
class Tokenizer;
}

namespace ms::server {

struct Job {
  std::vector<int32_t> prompt;
  SamplerParams sampling;
  GenerateParams gen;
  std::vector<std::string> stop;
  bool separate_reasoning = false;  // <think> text to reasoning
  bool starts_in_reasoning = false;  // the prompt opened <think>
  // gpt-oss's harmony format (tokenizer/harmony.h): the final channel is the
  // content, the analysis channel reasoning (kept only with
  // separate_reasoning), messages to a recipient tool calls. Ignored when the
  // tokenizer has no harmony markers.
  bool harmony = false;
  // response_format: the answer is sampled under this grammar (the token
  // mask, grammar/token_mask.h) and ends when its value is complete.
  std::shared_ptr<const grammar::Grammar> grammar;
  int top_logprobs = -1;  // -1: no logprobs; else alternatives per token (0..20)
  std::chrono::steady_clock::time_point submitted{};  // set by submit(): time to first token
  // Control tokens' text goes out with the rest: a Mistral model's
  // [TOOL_CALLS] marker is one, and the tool-call parser reads it.
  bool render_special = false;
  // Set by submit_choices: the job's choices (OpenAI's `n`) and which one
  // this is. Choice 0 reads the prompt; the others take its state by a fork
  // (Backend::fork) once it has, each then sampling with seed + its index.
  int n_choices = 1;
  int choice = 0;
};

// What a job has produced since the last take(), and how it ended.
struct Update {
  std::string content, reasoning;
  std::vector<HarmonyToolCall> tool_calls;  // harmony jobs: calls the model finished
  std::vector<LogprobEntry> logprobs;        // jobs with top_logprobs >= 0: one per token sampled
  bool done = false;
  std::string finish_reason;  // "stop", "length", "cancelled", "error"
  std::string error;          // with "error"
  int n_prompt = 0, n_cached = 0, n_completion = 0;
};

class Request {
 public:
  // Waits until there is new text or the job ended (or `timeout` passed), and
  // takes it: content/reasoning are what came since the last take.
  Update take(std::chrono::milliseconds timeout);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class Scheduler;
  void post(const std::string& content, const std::string& reasoning, std::vector<HarmonyToolCall> calls = {});
  void finish(const std::string& reason, const std::string& error, int n_prompt, int n_cached, int n_completion);
  void post_logprob(LogprobEntry e);

  std::mutex m_;
  std::condition_variable cv_;
  Update pending_;
  bool finished_ = false;
  std::atomic<bool> cancelled_{false};
};

// Which slot a prompt should use: among the free ones, the one whose cached
// tokens share the longest prefix with it (ties: the least recently used).
// Returns the slot index and the number of cached tokens it can keep
// (the common prefix, less one when it covers the whole prompt); -1 when none
// is free.
struct SlotView {
  const std::vector<int32_t>* tokens;
  bool busy;
  uint64_t last_used;
};
std::pair<int, size_t> choose_slot(const std::vector<SlotView>& slots, const std::vector<int32_t>& prompt);

// How many prompt tokens a step with n_decode decode tokens may carry (the
// chunk policy above): prefill_chunk - n_decode, at least prefill_chunk / 4
// (and at least 1).
size_t step_prompt_budget(int prefill_chunk, size_t n_decode);

class Scheduler {
 public:
  struct Options {
    int parallel = 1;         // slots (sequences decoded in turn)
    // Paged KV: tokens of KV all slots share; else tokens per slot (see above).
    int64_t ctx = 4096;
    // Paged KV: the most tokens one request may hold, prompt and answer (0: ctx).
    int64_t ctx_per_request = 0;
    int32_t kv_page_tokens = 64;  // paged KV: positions per page
    KvType kv_type = KvType::F16;  // each slot's cache: f16, f32 or q8_0 (max_kv_bytes counts its real bytes)
    int prefill_chunk = 512;  // tokens per step (decodes first, then prompt chunks: step_prompt_budget)
    // The slots' KV caches together may take at most this many bytes (0: no
    // limit): --parallel is refused, naming how many slots fit, before the
    // caches are allocated past it.
    uint64_t max_kv_bytes = 0;
    // Hybrids (Gated DeltaNet): recurrent-state checkpoints per slot, the
    // prompt cache's way back to a shared prefix shorter than the slot's
    // tokens (KvCache::set_checkpoints; host memory, counted in the KV bytes
    // on the CPU). Capacity 0: such a slot reuses all of its cache or none.
    CheckpointOptions checkpoints{4, 256};
    // Speculative decoding (`serve --spec`, docs/speculative.md): each
    // decoding slot's token goes into the step with up to K drafts, verified
    // in the same forward_seqs as the other slots' decodes and prompt chunks.
    struct Spec {
      // The drafter of a job in the slot whose cache is the second argument
      // (called on the worker thread at the job's first step, before its
      // prompt runs; null, or a null result or a throw: the job decodes
      // plainly). A drafter that reports draft_distributions (a sampling
      // draft model) has its drafts judged by the rejection rule
      // (speculative_pick); point masses (ngram, oracle, MTP, DFlash, greedy
      // draft models) are kept when they are the token sampled.
      std::function<std::unique_ptr<Drafter>(const Job&, const KvCache&)> make_drafter;
      SpecControllerOptions control;
    } spec;
  };
  Scheduler(Backend& backend, const Tokenizer& tok, Options opt, Metrics* metrics = nullptr);
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job (its prompt must fit: prompt.size() < ctx). Thread-safe.
  std::shared_ptr<Request> submit(Job job);
  // OpenAI's `n`: n choices of one prompt, admitted together into n slots.
  // The prompt is read once, then forked into the other slots; choice i
  // samples with job.sampling.seed + i, so it is what a single request with
  // that seed gives (at temperature 0, n identical choices). Throws ms::Error
  // for n < 1 or more choices than slots.
  std::vector<std::shared_ptr<Request>> submit_choices(Job job, int n);
  // Cancels every job, queued or running, and joins the worker.
  void stop();

  // The most tokens one request may hold (prompt and answer): a prompt of
  // ctx() tokens or more can never be served.
  int64_t ctx() const { return request_ctx_; }
  // "--ctx 8192 (shared by 4 slots)", "--ctx-per-request 2048", "--ctx 4096
  // (per slot)": the flag behind ctx(), for error messages.
  std::string ctx_limit_name() const;
  // Paged KV: the pool all slots share (null without paged KV).
  const KvPages* kv_pages() const { return kv_pages_.get(); }
  // Paged KV: how many times a job gave its pages back for others (preempt).
  int preemptions() const { return preemptions_; }
  int parallel() const { return opt_.parallel; }
  // The --parallel asked for, when the backend's max_sequences() capped it (else parallel()).
  int requested_parallel() const { return requested_parallel_ > 0 ? requested_parallel_ : opt_.parallel; }
  size_t queue_depth() const;
  int active_slots() const;

 private:
  struct Slot;
  void run();
  void admit();
  void fork_choices(Slot& leader);
  void publish_experts();
  void step();
  bool sample_next(Slot& s);
  bool emit_token(Slot& s, int32_t id, const StepLogprobs& lp, int64_t n_kept);
  void roll_back(Slot& s, int64_t n);
  void record_spec(Slot& s, size_t drafted, size_t emitted, bool kept, bool ended);
  bool spec_rule(const Slot& s) const;
  void plan_drafts(const std::vector<Slot*>& decoding, size_t reserve);
  void propose_drafts(const std::vector<std::pair<Slot*, int64_t>>& asks);
  void make_drafter(Slot& s);
  void pick_token(Slot& s);
  void pick_tokens(const std::vector<Slot*>& slots);
  std::span<const float> logits_of(const Slot& s) const;
  void fail(Slot& s, const std::string& what);
  void finish(Slot& s, const std::string& reason, const std::string& error = "");
  void emit_harmony(Slot& s, HarmonyParser::Out o);
  void evict_idle(int64_t need, const Slot* spare);
  void preempt(Slot& s);
  struct Entry;
  void fit_pages(std::vector<Entry>& entries);

  Backend& be_;
  const Tokenizer& tok_;
  Options opt_;
  Metrics* metrics_;
  std::vector<std::unique_ptr<Slot>> slots_;
  Slot* choice_leader_ = nullptr;  // the last admitted choice 0 of a job with several (admit)
  std::deque<std::pair<Job, std::shared_ptr<Request>>> queue_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t clock_ = 0;
  std::atomic<int> active_{0};
  int requested_parallel_ = 0;  // set when max_sequences() capped opt_.parallel
  int64_t request_ctx_ = 0;     // ctx()
  std::shared_ptr<KvPages> kv_pages_;  // paged KV: the slots' pool
  std::atomic<int> preemptions_{0};
  double last_step_seconds_ = 0;  // the previous step's time (speculation's controllers)
  std::vector<float> step_logits_;  // the last step's logit rows (each slot that wanted logits: its row)
  std::vector<TokenProb> p_dist_;   // sample_next's target distribution at a row judged by the rejection rule
  // Picks the decoding slots' tokens side by side (pick_tokens); made with the
  // first step that has several.
  std::unique_ptr<ThreadPool> pick_pool_;
  std::unique_ptr<grammar::TokenMask> token_mask_;  // the vocabulary's trie, made for the first grammar job
  // token_mask_'s whole masks share its cache: one at a time (asking single
  // tokens reads only its constant tables, and runs side by side).
  std::mutex mask_mutex_;
  std::thread worker_;
};

}  // namespace ms::server
