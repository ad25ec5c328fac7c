#include "tokenizer/stream_decoder.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ms {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, opt_.render_special);
  if (piece.empty()) return take_complete(false);
  if (first_) {
    first_ = false;
    const Vocab& v = tok_.vocab();
    const TokenType t = v.types[static_cast<size_t>(id)];
    if (opt_.strip_leading_space && v.kind == VocabKind::SentencePiece && v.add_space_prefix &&
        piece[0] == ' ' && (t == TokenType::Normal || t == TokenType::Undefined))
      piece.erase(0, 1);
  }
  pending_ += piece;
  return take_complete(false);
}

std::string StreamDecoder::flush() { return take_complete(true); }

void StreamDecoder::reset() {
  pending_.clear();
  first_ = true;
}

std::string StreamDecoder::take_complete(bool final) {
  std::string out;
  std::string_view p = pending_;
  size_t i = 0;
  while (i < p.size()) {
    const size_t valid = utf8::valid_prefix_length(p.substr(i));
    out.append(p.substr(i, valid));
    i += valid;
    if (i == p.size()) break;
    const std::string_view rest = p.substr(i);
    // The start of a character whose other bytes have not arrived yet: hold it.
    if (utf8::incomplete_tail_length(rest) == rest.size()) {
      if (!final) break;
      out.append(kReplacement);  // the stream ended inside a character
      i = p.size();
      break;
    }
    out.append(kReplacement);  // a byte that can never be part of a valid character
    ++i;
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace ms
