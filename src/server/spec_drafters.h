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
class ThreadPool;
struct DFlashWeights;
struct ModelWeights;
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

// --spec draft -md FILE: a ModelDrafter per job (its sampler: the job's
// temperature, top-k/p, min-p and seed; greedy jobs get greedy drafts, sampled
// ones drafts with their distributions, which sample_next puts through the
// rejection rule) over `draft`, the draft model's one backend. Each slot has
// one draft cache, made at its first job and kept by the slots' drafters in
// turn; the scheduler's propose_all runs the drafting slots' passes together
// (one forward_seqs of the draft per round). On a backend with paged KV (the CPU) the caches take
// pages of one pool of `pool_tokens` positions (sized like the target's
// pool, with room for each slot's drafts), a job's pages go back when it
// ends or is preempted (Drafter::release), and a draft pass that finds the
// pool short costs that step's drafts only. Elsewhere each slot's draft
// cache holds the target slot's context and is kept between jobs (a prompt
// that shares its prefix with the slot's last text reuses it).
// `pages` (tests): set to the draft caches' pool (null without paged KV).
DrafterFactory model_drafters(Backend& draft, double p_min, int64_t pool_tokens,
                              std::shared_ptr<const KvPages>* pages = nullptr);

// --spec dflash -md FILE: a DFlash block drafter (engine/speculative_dflash.h)
// per slot, kept between the slot's jobs (its context follows the slot's
// cache through every forward, so a prompt read partly from the prompt cache
// still has its features); a job that is a later choice of `n` (its state
// forked, never run here) gets a fresh one and drafts nothing until its
// sequence is past what it holds. The backend must hand out layer inputs
// (Backend::set_hidden_layers: the CPU backend's); one hook hands each
// forward's rows to the slots' drafters. w and target_w outlive the factory.
// Throws ms::Error when the backend cannot.
DrafterFactory dflash_drafters(Backend& be, const DFlashWeights& w, const ModelWeights& target_w, ThreadPool& pool,
                               KvType kv_type);

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
