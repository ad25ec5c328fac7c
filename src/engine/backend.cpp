// Backend's default multi-sequence step: the entries one after another.
#include "engine/backend.h"

#include <string>

#include "util/error.h"

namespace ms {

// The checks every forward_seqs makes before computing anything: entries with
// tokens, distinct caches, room in each, ids inside the vocabulary.
void check_token_tree(std::span<const int32_t> parents, size_t n_tokens, const std::string& what,
                      std::vector<int32_t>* depth) {
  if (parents.size() != n_tokens)
    throw Error(what + ": the ancestor set has " + std::to_string(parents.size()) + " parents for " +
                std::to_string(n_tokens) + " tokens (one per token)");
  if (depth) depth->resize(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) {
    const int32_t p = parents[i];
    if (p < -1 || p >= static_cast<int64_t>(i))
      throw Error(what + ": token " + std::to_string(i) + "'s parent is " + std::to_string(p) +
                  "; a parent must be -1 (the cached prefix) or an earlier token of the same entry (an index below " +
                  std::to_string(i) + ")");
    if (depth) (*depth)[i] = p < 0 ? 0 : (*depth)[static_cast<size_t>(p)] + 1;
  }
}

void check_seq_tokens(std::span<const SeqTokens> seqs, int64_t n_vocab, int max_tree, const std::string& backend) {
  if (seqs.empty()) throw Error("forward_seqs: no sequences");
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqTokens& s = seqs[i];
    if (s.kv == nullptr) throw Error("forward_seqs: entry " + std::to_string(i) + " has no cache");
    if (s.tokens.empty()) throw Error("forward_seqs: entry " + std::to_string(i) + " has no tokens");
    for (size_t j = 0; j < i; ++j)
      if (seqs[j].kv == s.kv)
        throw Error("forward_seqs: entries " + std::to_string(j) + " and " + std::to_string(i) + " share a cache");
    if (!s.parents.empty()) {
      const std::string what = "forward_seqs: entry " + std::to_string(i);
      const std::string be = backend.empty() ? "this backend" : "the " + backend + " backend";
      if (max_tree <= 0)
        throw Error(what + " carries an ancestor set (a token tree), which " + be +
                    " does not run (the CPU backend does; speculative decoding "
                    "verifies chains here)");
      if (s.tokens.size() > static_cast<size_t>(max_tree))
        throw Error(what + ": a token tree of " + std::to_string(s.tokens.size()) + " tokens; " + be +
                    " runs trees of at most " + std::to_string(max_tree));
      check_token_tree(s.parents, s.tokens.size(), what);
    }
    s.kv->check_room(static_cast<int64_t>(s.tokens.size()));
    for (int32_t id : s.tokens)
      if (id < 0 || id >= n_vocab)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n_vocab) +
                    " tokens)");
  }
}

void Backend::forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) {
  const int64_t V = config().n_vocab;
  check_seq_tokens(seqs, V, 0, name());
  logits.clear();
  std::vector<float> one;
  for (const SeqTokens& s : seqs) {
    forward(*s.kv, s.tokens, one, s.all_logits);
    if (s.all_logits) logits.insert(logits.end(), one.begin(), one.end());
    else if (s.want_logits) logits.insert(logits.end(), one.begin(), one.begin() + V);
  }
}

void Backend::keep_tree_path(KvCache&, int64_t, std::span<const int32_t>) {
  throw Error("the " + name() + " backend does not run token trees (no tree path to keep)");
}

const char* const kNoMtpBlock =
    "the model has no MTP block (no blk.N.nextn.* tensors, nextn_predict_layers 0): --spec mtp needs a Qwen3.5/3.6 "
    "file converted with its MTP weights";

namespace {
[[noreturn]] void no_mtp(const Backend& b) {
  throw Error("the " + b.name() + " backend cannot run a model's MTP block (speculative decoding with --spec mtp)");
}
}  // namespace

void Backend::set_hidden_hook(HiddenHook hook) {
  if (hook) no_mtp(*this);
}

void Backend::set_hidden_layers(std::vector<int> layers) {
  if (!layers.empty())
    throw Error("the " + name() + " backend cannot hand out layer inputs (the DFlash drafter runs on the CPU backend)");
}

KvCache Backend::make_mtp_cache(int64_t, KvType) const { no_mtp(*this); }

void Backend::forward_mtp(KvCache&, std::span<const float>, std::span<const int32_t>, std::vector<float>&,
                          std::vector<float>&) {
  no_mtp(*this);
}

void check_mtp_inputs(const ModelWeights& w, const KvCache& kv, std::span<const float> hidden,
                      std::span<const int32_t> tokens) {
  const ModelConfig& c = w.cfg;
  if (w.mtp.empty()) throw Error(kNoMtpBlock);
  if (tokens.empty()) throw Error("forward_mtp: no tokens");
  if (hidden.size() != tokens.size() * static_cast<size_t>(c.n_embd))
    throw Error("forward_mtp: " + std::to_string(hidden.size()) + " hidden floats for " +
                std::to_string(tokens.size()) + " tokens of n_embd " + std::to_string(c.n_embd));
  if (kv.n_layer() != c.n_layer_mtp)
    throw Error("forward_mtp: the cache has " + std::to_string(kv.n_layer()) + " layers, not the model's " +
                std::to_string(c.n_layer_mtp) + " MTP blocks (make it with make_mtp_cache)");
  kv.check_room(static_cast<int64_t>(tokens.size()));
  for (int32_t id : tokens)
    if (id < 0 || id >= c.n_vocab)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(c.n_vocab) +
                  " tokens)");
}

std::shared_ptr<KvPages> Backend::make_kv_pages(int64_t, KvType, int32_t) const {
  throw Error("the " + name() + " backend keeps each sequence's keys and values in one region (no shared pages)");
}

KvCache Backend::make_paged_cache(std::shared_ptr<KvPages>, int64_t, KvType) const {
  throw Error("the " + name() + " backend keeps each sequence's keys and values in one region (no shared pages)");
}

}  // namespace ms
