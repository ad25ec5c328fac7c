// Hand-made vocabularies for the tokenizer unit tests.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/vocab.h"

namespace ms::test {

// Byte-level BPE: ids 0..255 are the single bytes (in byte order), then one
// token per merge result in `merges` order, then `specials` as control tokens.
// Merges are given in raw bytes ("h e" style with '·' standing for a space is
// not needed: pass {"h", "e"} pairs of raw strings).
inline Vocab tiny_bpe(const std::vector<std::pair<std::string, std::string>>& merges,
                      const std::vector<std::string>& specials = {}, const std::string& pre = "gpt2") {
  Vocab v;
  v.kind = VocabKind::BytePairGpt2;
  v.pre = pre;
  v.add_space_prefix = false;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_level_encode(std::string(1, static_cast<char>(b))));
    v.types.push_back(TokenType::Normal);
  }
  for (const auto& [a, b] : merges) {
    v.merges.push_back(byte_level_encode(a) + " " + byte_level_encode(b));
    const std::string joined = byte_level_encode(a + b);
    bool have = false;
    for (const std::string& t : v.tokens) have |= t == joined;
    if (!have) {
      v.tokens.push_back(joined);
      v.types.push_back(TokenType::Normal);
    }
  }
  for (const std::string& s : specials) {
    v.tokens.push_back(s);
    v.types.push_back(TokenType::Control);
  }
  return v;
}

inline int32_t id_of(const Vocab& v, const std::string& stored_text) {
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == stored_text) return static_cast<int32_t>(i);
  return -1;
}

// SentencePiece: <unk> <s> </s>, the 256 byte tokens, then `pieces` with
// their scores (text uses ▁ for spaces).
inline Vocab tiny_spm(const std::vector<std::pair<std::string, float>>& pieces) {
  Vocab v;
  v.kind = VocabKind::SentencePiece;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::Unknown, TokenType::Control, TokenType::Control};
  v.scores = {0, 0, 0};
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.types.push_back(TokenType::Byte);
    v.scores.push_back(0);
  }
  for (const auto& [p, s] : pieces) {
    v.tokens.push_back(p);
    v.types.push_back(TokenType::Normal);
    v.scores.push_back(s);
  }
  return v;
}

}  // namespace ms::test
