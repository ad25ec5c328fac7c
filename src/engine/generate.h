// The generation loop: prompt (one batched forward), then sample, emit and
// feed back one token at a time until the token budget, an end-of-generation
// token, or a full context. With a drafter (GenerateParams::spec) the tokens
// after the prompt come from speculative decoding (engine/speculative.h):
// the same tokens, fewer forward passes.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/speculative.h"

namespace ms {

class Tokenizer;

// Speculative decoding: off without a drafter.
struct SpecDecoding {
  Drafter* drafter = nullptr;  // not owned; null: plain decoding
  SpecControllerOptions control;
  // How a recurrent (hybrid) state goes back past rejected drafts:
  // TokenStates: the verify keeps the state after each of its tokens
  //   (KvCache::keep_token_states; the CPU's recurrence runs token by token
  //   anyway, and keeping a state is a host copy);
  // Replay: the verify runs as one plain batch; a rejection rolls back to the
  //   newest checkpoint at or below the tokens kept and runs them again (one
  //   more batched forward, of the kept drafts and any plain steps since that
  //   checkpoint). For backends where a token state costs a copy off the
  //   device and a pass of its own (CUDA's). Attention-only models need neither.
  enum class Rollback { TokenStates, Replay } rollback = Rollback::TokenStates;
  // Draft trees (--spec-tree N; engine/draft_tree.h, docs/speculative.md
  // "Draft trees"): > 0, each verify feeds a tree of at most this many drafts
  // grown best-first from the drafter's candidates, to the depth the
  // controller asks for; 0: chains. Used where spec_tree_refusal() says
  // nothing; elsewhere the drafts are verified as chains.
  int tree_budget = 0;
};

struct GenerateParams {
  int n_predict = 128;        // tokens to generate at most (-1: until end of text or a full context)
  bool stop_at_eog = true;    // stop at the tokenizer's end-of-generation tokens
  SpecDecoding spec;
  // Throws ms::Error for n_predict < -1 (the one negative value means "until
  // end of text"). Shared by `run` and the server.
  void validate() const;
};

struct GenerateStats {
  int n_prompt = 0;
  int n_generated = 0;
  double prompt_seconds = 0;  // the prompt's forward pass
  double decode_seconds = 0;  // every later forward pass and sampling
  std::string stop_reason;    // "length", "eog", "context full (N tokens)", "stopped"
  SpecStats spec;             // with GenerateParams::spec's drafter
  double prompt_tps() const { return prompt_seconds > 0 ? n_prompt / prompt_seconds : 0; }
  // Decode rate over the forwards after the prompt (the first token comes from the prompt's logits).
  double decode_tps() const { return decode_seconds > 0 ? (n_generated - 1) / decode_seconds : 0; }
};

// Throws ms::Error if any of the n_vocab logits is NaN or infinite: weights
// full of NaN/Inf (a corrupt download) would otherwise give garbage text and
// a clean exit. The message names the first bad id and points at
// `moestream inspect --check`; `where` (and step, when >= 0) says which
// forward ("prompt", "decode step 7"). Costs one pass over the floats.
void check_finite_logits(std::span<const float> logits, const char* where, int64_t step = -1);

// on_token(id) is called for each generated token (EOG included when it ends
// the run); returning false stops. Throws ms::Error if the prompt alone does
// not fit the cache ("context full (N tokens)").
GenerateStats generate(Backend& backend, KvCache& kv, Sampler& sampler, const Tokenizer* tok,
                       std::span<const int32_t> prompt, const GenerateParams& params,
                       const std::function<bool(int32_t)>& on_token);

// generate()'s loop after the prompt with a drafter (engine/speculative.cpp):
// `logits` holds the prompt's last row and `history` the prompt. Each step
// verifies the last sampled token and up to K drafts in one forward (the
// logits of each, the state after each kept), samples token by token until
// the first draft that is not kept (not the sampled token; with the drafter's
// distributions, rejected by speculative_pick), and rolls the cache back to
// the tokens kept. The controller is fed each step's whole time (drafting,
// forward, sampling). Sets its checkpoint capacity to at least draft_max + 1.
void decode_speculative(Backend& backend, KvCache& kv, Sampler& sampler, const Tokenizer* tok,
                        std::vector<int32_t> history, std::vector<float>& logits, const GenerateParams& params,
                        const std::function<bool(int32_t)>& on_token, GenerateStats& st);

}  // namespace ms
