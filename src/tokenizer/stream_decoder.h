// Turns generated token ids into text as they arrive, printing only whole
// UTF-8 characters: a byte token or a byte-level token may hold part of a
// character, and the rest comes with the next tokens.
//
//   StreamDecoder dec(tok);
//   for each id: std::fputs(dec.push(id).c_str(), stdout);
//   std::fputs(dec.flush().c_str(), stdout);
#pragma once
#include <cstdint>
#include <string>

namespace ms {

class Tokenizer;

class StreamDecoder {
 public:
  struct Options {
    bool render_special = false;  // show control tokens' text
    // SentencePiece with a space prefix: drop the leading space of the first
    // piece, as Tokenizer::decode does (for decoding a whole prompt).
    bool strip_leading_space = false;
  };
  explicit StreamDecoder(const Tokenizer& tok) : StreamDecoder(tok, Options{}) {}
  StreamDecoder(const Tokenizer& tok, Options opt) : tok_(tok), opt_(opt) {}

  // Adds one token; returns the text that is now complete (maybe empty).
  // Bytes that can never become valid UTF-8 come out as U+FFFD.
  std::string push(int32_t id);
  // Everything still held (an unfinished character becomes U+FFFD).
  std::string flush();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }
  void reset();

 private:
  std::string take_complete(bool final);
  const Tokenizer& tok_;
  Options opt_;
  std::string pending_;
  bool first_ = true;
};

}  // namespace ms
