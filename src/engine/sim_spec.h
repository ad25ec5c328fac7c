// `moestream sim --spec oracle:ALPHA` (issue #42): a trace's decode tokens
// replayed as speculative verifies through the engine's MoE step and
// scheduler, to measure what drafts' routes do to the expert cache.
//
// Each verify is one pass of K + 1 tokens, as a verify's forward is: the fed
// token (the trace's next decode token), then K drafts, each right with
// probability ALPHA (seeded) while the ones before it were. A right draft
// routes as the trace's next token does (it is that token, in that
// context); the first wrong draft and every draft after it route as a
// decode token of the trace drawn at random (a wrong token, or a token in a
// wrong context: routes unrelated to the sequence's). The next verify starts
// after the accepted drafts (their target-sampled successor is its fed
// token), as decode_speculative does. Prompt passes run as in `moestream
// sim`. Decode passes must be one token each (a single-sequence trace).
//
// The verifies mark their drafts (MoeStep::set_draft_ranks) and confirm the
// accepted ones (confirm_drafts) as the engine's do; the scheduler's
// StepTuning::draft_credit then decides: the accepted drafts' routes count
// once confirmed and the rejected ones' never, or every routed token counts
// when routed (before issue #42).
#pragma once
#include <cstdint>
#include <string>

#include "engine/simulator.h"

namespace ms {

struct SpecSimOptions {
  double alpha = 0.8;  // a draft is right with this probability
  int draft_max = 4;   // drafts per verify (0: plain decoding)
  uint64_t seed = 1;
  // StepTuning::draft_credit (the engine's --no-draft-credit when false):
  // false, every token's route counts in the policy when routed.
  bool exclude_rejected = true;
};

struct SpecSimResult {
  std::string policy, capacity;
  uint64_t decode_passes = 0, emitted = 0, drafted = 0, accepted = 0;
  // Per distinct expert per decode layer step (the verify's union of experts).
  uint64_t accesses = 0, hits = 0;
  // Of those, the experts the fed token or an accepted draft chose (the
  // sequence's own routes, the ones a cache is for).
  uint64_t kept_accesses = 0, kept_hits = 0;
  uint64_t admitted = 0, evicted = 0;   // decode layer steps
  uint64_t pcie_bytes = 0;              // decode demand copies
  uint64_t streamed = 0, host = 0;      // decode experts computed by tier
  double decode_time_s = 0;             // predicted expert time of the decode passes
  double hit_rate() const { return accesses ? double(hits) / double(accesses) : 0; }
  double kept_hit_rate() const { return kept_accesses ? double(kept_hits) / double(kept_accesses) : 0; }
  double tokens_per_s() const { return decode_time_s > 0 ? double(emitted) / decode_time_s : 0; }
};

// opts: the cache, policy and cost as `moestream sim` takes them (no
// prefetch, no gated plan: ms::Error otherwise). Throws ms::Error for a trace
// whose decode passes hold more than one token, alpha outside [0, 1] or
// draft_max outside 0..64.
SpecSimResult simulate_speculative(const Trace& trace, const SimOptions& opts, const SpecSimOptions& spec);
// simulate_speculative's checks of its options alone (the CLI runs them
// before printing anything).
void check_spec_sim(const SimOptions& opts, const SpecSimOptions& spec);

// "plain / all routes / rejected excluded" rows of one policy and capacity.
std::string spec_table_header();
std::string spec_table_row(const std::string& mode, const SpecSimResult& r);

}  // namespace ms
