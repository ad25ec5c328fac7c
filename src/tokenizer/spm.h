// SentencePiece BPE (the `llama` vocabulary of Llama 2, Mistral, Mixtral):
// text is split into UTF-8 characters, then the adjacent pair whose
// concatenation is a piece with the highest score is merged (leftmost on
// ties) until no pair is a piece. Characters that are not pieces fall back
// to byte tokens <0xXX>.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/text_map.h"
#include "tokenizer/vocab.h"

namespace ms {

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

class SpmModel {
 public:
  explicit SpmModel(const Vocab& vocab);

  // Appends the ids of `text`, which must already be in piece form (spaces
  // replaced by ▁ and the prefix ▁ added where wanted).
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  // Id of the normal piece `text`, or -1.
  int32_t find(std::string_view text) const { return find_id(pieces_, text); }
  // Byte token for byte b (<0xXX>), or -1.
  int32_t byte_token(uint8_t b) const { return byte_token_[b]; }

 private:
  TextToId pieces_;
  std::vector<float> scores_;
  int32_t byte_token_[256];
  int32_t unk_id_ = -1;
};

// "<0x41>" -> 0x41; -1 if `text` is not a byte token's text.
int parse_byte_piece(std::string_view text);

// "Hello world" -> "▁Hello▁world" (with `add_prefix`: a leading ▁).
std::string spm_escape_spaces(std::string_view text, bool add_prefix);

}  // namespace ms
