// Backend's default multi-sequence step: the entries one after another.
#include "engine/backend.h"

#include <string>

#include "util/error.h"

namespace ms {

// The checks every forward_seqs makes before computing anything: entries with
// tokens, distinct caches, room in each, ids inside the vocabulary.
void check_seq_tokens(std::span<const SeqTokens> seqs, int64_t n_vocab) {
  if (seqs.empty()) throw Error("forward_seqs: no sequences");
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqTokens& s = seqs[i];
    if (s.kv == nullptr) throw Error("forward_seqs: entry " + std::to_string(i) + " has no cache");
    if (s.tokens.empty()) throw Error("forward_seqs: entry " + std::to_string(i) + " has no tokens");
    for (size_t j = 0; j < i; ++j)
      if (seqs[j].kv == s.kv)
        throw Error("forward_seqs: entries " + std::to_string(j) + " and " + std::to_string(i) + " share a cache");
    s.kv->check_room(static_cast<int64_t>(s.tokens.size()));
    for (int32_t id : s.tokens)
      if (id < 0 || id >= n_vocab)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n_vocab) +
                    " tokens)");
  }
}

void Backend::forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) {
  const int64_t V = config().n_vocab;
  check_seq_tokens(seqs, V);
  logits.clear();
  std::vector<float> one;
  for (const SeqTokens& s : seqs) {
    forward(*s.kv, s.tokens, one, s.all_logits);
    if (s.all_logits) logits.insert(logits.end(), one.begin(), one.end());
    else if (s.want_logits) logits.insert(logits.end(), one.begin(), one.begin() + V);
  }
}

}  // namespace ms
