// The scheduler's slot: one sequence's cache and the job decoding in it
// (private to scheduler.cpp and scheduler_spec.cpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "server/scheduler.h"
#include "server/text_stream.h"
#include "tokenizer/harmony.h"
#include "tokenizer/stream_decoder.h"

namespace ms::server {

struct Scheduler::Slot {
  explicit Slot(KvCache cache) : kv(std::move(cache)) {}
  KvCache kv;
  std::vector<int32_t> tokens;  // what kv holds
  uint64_t last_used = 0;
  // The job in this slot (none: free).
  std::shared_ptr<Request> req;
  Job job;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamDecoder> dec;
  std::unique_ptr<StopMatcher> stop;
  std::unique_ptr<ThinkSplitter> think;
  std::unique_ptr<HarmonyParser> harmony;  // harmony jobs: in place of dec and think
  size_t prefilled = 0;  // prompt tokens in kv
  size_t n_prompt = 0;   // the job's prompt as submitted (a preempted job re-reads more: preempt())
  int n_cached = 0;
  int n_generated = 0;
  // Its logits: this row of step_logits_ (set by the step that ran its last
  // token; read before the next step's forward pass overwrites the rows).
  size_t logits_row = kNoRow;
  static constexpr size_t kNoRow = static_cast<size_t>(-1);
  // The token picked from them (pick_token), before it is emitted.
  struct Pick {
    bool ready = false;
    int32_t id = -1;
    StepLogprobs lp;
    std::string error;
  } pick;
  int32_t next = 0;  // the sampled token the turn's forward pass feeds
  // response_format jobs: where the answer is in the grammar, and the mask
  // of the tokens that may come next.
  std::unique_ptr<grammar::Matcher> matcher;
  std::vector<uint8_t> allowed;
  std::chrono::steady_clock::time_point first_token{};  // when the job's first token was sampled
  int index = 0;  // in slots_, for per-slot metrics
  uint64_t admitted = 0;  // admission order: prompt chunks go to the earliest admitted first
  // A later choice of a job waiting for choice 0's prompt: that slot (null:
  // not waiting).
  Slot* fork_of = nullptr;
  // Speculative decoding (Options::spec): the job's drafter and controller,
  // made when it first decodes (spec_ready). `feed` is what the step feeds
  // after the prompt: `next`, then `drafts`; with drafts, the forward gives a
  // logit row for each (logits_row onwards) and the next turn keeps the
  // drafts that sampling confirms (sample_next).
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<SpecController> ctl;
  bool spec_ready = false;
  std::vector<int32_t> drafts, feed;
  bool decoded = false;  // the last step fed this slot a decode (its time is the controller's sample)
};

}  // namespace ms::server
