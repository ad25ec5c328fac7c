// `serve --spec`: the drafter each job of the scheduler gets
// (Scheduler::Options::Spec::make_drafter).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/speculative.h"
#include "server/scheduler.h"

namespace ms {
class Tokenizer;
}

namespace ms::server {

using DrafterFactory = std::function<std::unique_ptr<Drafter>(const Job&, const KvCache&)>;

// --spec ngram: an NgramDrafter per job (it keeps no state between calls).
DrafterFactory ngram_drafters();

// --spec mtp: an MtpDrafter per job over the slot's cache (the model's MTP
// block, engine/speculative_mtp.h), each with its own MTP cache. One hidden
// hook on the backend (installed here; the backend keeps it) hands every
// forward's hidden states to the live drafters, each keeping its own
// sequence's. The CUDA backend's forward_seqs hands out none yet (its
// drafters would not propose; `serve` refuses --spec mtp there).
// Throws ms::Error when the backend cannot run the block.
DrafterFactory mtp_drafters(Backend& be, KvType kv_type);

// --spec oracle:ALPHA (tests and benchmarks): each job's reference is a
// plain run of its prompt first (generate(), the job's sampler and seed, its
// max_tokens; no stop strings or grammar, which only end it sooner), in a
// cache of `ctx` tokens made once and kept; its OracleDrafter proposes that
// continuation, right with probability ALPHA per position. The run happens
// on the scheduler's worker thread, when the job first decodes: every other
// slot waits for it. A reference that fails (the cache cannot be made) leaves
// the job plain.
DrafterFactory oracle_drafters(Backend& be, const Tokenizer& tok, int64_t ctx, KvType kv_type, double alpha);

}  // namespace ms::server
