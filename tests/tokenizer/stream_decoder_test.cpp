#include <gtest/gtest.h>

#include "tiny_vocabs.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ms {
namespace {

// With a byte-only vocabulary, token id b is byte b.
TEST(StreamDecoder, HoldsBackSplitMultiByteCharacters) {
  Tokenizer tok(test::tiny_bpe({}));
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push('a'), "a");
  EXPECT_EQ(dec.push(0xC3), "");  // first byte of é
  EXPECT_EQ(dec.pending_bytes(), 1u);
  EXPECT_EQ(dec.push(0xA9), "\xC3\xA9");
  // A 4-byte emoji, byte by byte: nothing until the last.
  const unsigned char emoji[] = {0xF0, 0x9F, 0x98, 0x80};
  EXPECT_EQ(dec.push(emoji[0]), "");
  EXPECT_EQ(dec.push(emoji[1]), "");
  EXPECT_EQ(dec.push(emoji[2]), "");
  EXPECT_EQ(dec.push(emoji[3]), "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  Tokenizer tok(test::tiny_bpe({}));
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(0xFF), "\xEF\xBF\xBD");            // never valid
  EXPECT_EQ(dec.push(0xC3), "");
  EXPECT_EQ(dec.push('x'), "\xEF\xBF\xBDx");            // C3 then x: C3 can no longer complete
  EXPECT_EQ(dec.push(0xE4), "");
  EXPECT_EQ(dec.push(0xBD), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");               // the stream ended inside a character
  EXPECT_EQ(dec.pending_bytes(), 0u);
}

TEST(StreamDecoder, ConcatenationEqualsDecodeForValidText) {
  Tokenizer tok(test::tiny_bpe({{"\xE4", "\xBD"}, {"\xE4\xBD", "\xA0"}}));
  const std::string text = "x \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD end";
  const auto ids = tok.encode(text, false);
  StreamDecoder dec(tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    EXPECT_EQ(utf8::valid_prefix_length(piece), piece.size());  // never half a character
    out += piece;
  }
  out += dec.flush();
  EXPECT_EQ(out, text);
}

TEST(StreamDecoder, SentencePieceByteTokens) {
  Tokenizer tok(test::tiny_spm({{"\xE2\x96\x81", 0}, {"a", 0}}));
  StreamDecoder::Options opt;
  opt.strip_leading_space = true;
  StreamDecoder dec(tok, opt);
  const auto ids = tok.encode("a\xE2\x82\xAC", true);  // <s> ▁ a <E2> <82> <AC>
  std::string out;
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(dec.push(id));
  ASSERT_EQ(pieces.size(), 6u);
  EXPECT_EQ(pieces[1], "");  // the prefix space is stripped
  EXPECT_EQ(pieces[3], "");
  EXPECT_EQ(pieces[4], "");
  EXPECT_EQ(pieces[5], "\xE2\x82\xAC");
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8::incomplete_tail_length("a\xE4\xBD"), 2u);
  EXPECT_EQ(utf8::incomplete_tail_length("a\xE4\xBD\xA0"), 0u);
  EXPECT_EQ(utf8::incomplete_tail_length("\xE0\x80"), 0u);  // overlong: can never complete
  EXPECT_EQ(utf8::incomplete_tail_length("\xED\xA0"), 0u);  // surrogate
  EXPECT_EQ(utf8::incomplete_tail_length("\xF0"), 1u);
  EXPECT_EQ(utf8::incomplete_tail_length("\xF5"), 0u);
  EXPECT_EQ(utf8::incomplete_tail_length(""), 0u);
}

}  // namespace
}  // namespace ms
