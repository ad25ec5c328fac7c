#include "tokenizer/vocab.h"

#include <cstdint>
#include <string_view>

#include "util/error.h"

namespace ms {

const char* Vocab::model_name() const {
  return kind == VocabKind::SentencePiece ? "llama" : "gpt2";
}

void Vocab::validate(const std::string& where) const {
  const size_t n = tokens.size();
  if (n == 0) throw Error(where + ": the vocabulary has no tokens (tokenizer.ggml.tokens is empty)");
  if (n > static_cast<size_t>(INT32_MAX))
    throw Error(where + ": " + std::to_string(n) + " tokens is more than token ids can hold");
  if (types.size() != n)
    throw Error(where + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                " entries but tokenizer.ggml.tokens has " + std::to_string(n) +
                "; the file is inconsistent, re-convert the model");
  if (!scores.empty() && scores.size() != n)
    throw Error(where + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                " entries but tokenizer.ggml.tokens has " + std::to_string(n) +
                "; the file is inconsistent, re-convert the model");
  if (kind == VocabKind::SentencePiece && scores.empty())
    throw Error(where + ": a SentencePiece ('llama') vocabulary needs tokenizer.ggml.scores "
                "(the piece scores decide the merge order); re-convert the model with scores");
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = static_cast<int32_t>(types[i]);
    if (t < 0 || t > 6)
      throw Error(where + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] = " +
                  std::to_string(t) + " is not a known token type (0..6)");
  }
  auto check_id = [&](int32_t id, const char* key) {
    if (id < -1 || id >= static_cast<int32_t>(n))
      throw Error(where + ": " + key + " = " + std::to_string(id) + " is outside the vocabulary (" +
                  std::to_string(n) + " tokens)");
  };
  check_id(bos_id, "tokenizer.ggml.bos_token_id");
  check_id(eos_id, "tokenizer.ggml.eos_token_id");
  check_id(eot_id, "tokenizer.ggml.eot_token_id");
  check_id(eom_id, "tokenizer.ggml.eom_token_id");
  check_id(unk_id, "tokenizer.ggml.unknown_token_id");
  check_id(pad_id, "tokenizer.ggml.padding_token_id");
  if (add_bos && bos_id < 0)
    throw Error(where + ": tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
  if (add_eos && eos_id < 0)
    throw Error(where + ": tokenizer.ggml.add_eos_token is true but there is no eos_token_id");
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    // The separator is the first space after the first character, so a left
    // part that itself starts with a space (possible in SentencePiece vocabs) works.
    if (m.size() < 3 || m.find(' ', 1) == std::string::npos || m.find(' ', 1) + 1 >= m.size())
      throw Error(where + ": tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + m +
                  "' is not of the form 'left right'");
  }
}

}  // namespace ms
