// The gpt-4o (o200k) pre-tokenizer split, as gpt-oss's o200k_harmony uses it.
// The expected words are derived by hand from the regex's alternatives (and
// cross-checked with Python's `regex` module on the published pattern); the
// Hugging Face parity on a 1358-line corpus is TokenizerParity.Gpt4o, which
// needs the fixtures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tiny_vocabs.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

using Words = std::vector<std::string>;

Words split(const std::string& pre, const std::string& text) {
  PreTokenizer p(pre_tokenizer_spec(pre).regex);
  std::vector<std::string_view> words;
  p.split(text, words);
  return {words.begin(), words.end()};
}

TEST(Gpt4oSplit, NamesAndAliases) {
  EXPECT_STREQ(pre_tokenizer_spec("gpt-4o").name, "gpt4o");  // what gpt-oss GGUFs carry
  EXPECT_STREQ(pre_tokenizer_spec("gpt4o").name, "gpt4o");
  EXPECT_NE(supported_pre_tokenizers().find("gpt4o"), std::string::npos);
  Vocab v = test::tiny_bpe({}, {}, "gpt-4o");
  EXPECT_STREQ(Tokenizer(v).pre_name(), "gpt4o");
}

TEST(Gpt4oSplit, CaseChangesStartWords) {
  // A word is upper-case letters then lower-case ones: "camel|Case"; an
  // upper-case run takes the lower-case run after it ("HTTPServer" whole);
  // "iPhone" is "i" then "Phone". Llama 3's \p{L}+ keeps each whole.
  EXPECT_EQ(split("gpt4o", "camelCase HTTPServer iPhone"),
            (Words{"camel", "Case", " HTTPServer", " i", "Phone"}));
  EXPECT_EQ(split("llama3", "camelCase"), (Words{"camelCase"}));
}

TEST(Gpt4oSplit, ContractionsStayOnTheirWord) {
  // Case-insensitively, after the letters; "'Neil" is not a contraction, so
  // the apostrophe is the optional prefix of the next word.
  EXPECT_EQ(split("gpt4o", "DON'T I'm we'VE O'Neil"), (Words{"DON'T", " I'm", " we'VE", " O", "'Neil"}));
  // Llama 3 makes a contraction a word of its own.
  EXPECT_EQ(split("llama3", "I'm"), (Words{"I", "'m"}));
  // ASCII only, as in the other pre-tokenizers: U+017F (long s) is a letter, not 's'.
  EXPECT_EQ(split("gpt4o", "x'\xC5\xBFt"), (Words{"x", "'\xC5\xBFt"}));
}

TEST(Gpt4oSplit, NumbersInGroupsOfThree) {
  EXPECT_EQ(split("gpt4o", "1234567 3.14 x12345y"),
            (Words{"123", "456", "7", " ", "3", ".", "14", " x", "123", "45", "y"}));
}

TEST(Gpt4oSplit, PunctuationKeepsTrailingSlashesAndNewlines) {
  // A punctuation run takes the newlines and '/' after it; a lone '/' is the
  // optional prefix of the next word.
  EXPECT_EQ(split("gpt4o", "a/b/c!!/\n\nd"), (Words{"a", "/b", "/c", "!!/\n\n", "d"}));
  EXPECT_EQ(split("gpt4o", "Hello, World!\r\n"), (Words{"Hello", ",", " World", "!\r\n"}));
  // After a newline, Llama 3 leaves '/' to the next word.
  EXPECT_EQ(split("gpt4o", "!\n/x"), (Words{"!\n/", "x"}));
  EXPECT_EQ(split("llama3", "!\n/x"), (Words{"!\n", "/x"}));
}

TEST(Gpt4oSplit, WhitespaceRuns) {
  // \s+(?!\S) leaves the last space to the next word; spaces before newlines
  // go with them.
  EXPECT_EQ(split("gpt4o", "  hello   world  \n\n  x"),
            (Words{" ", " hello", "  ", " world", "  \n\n", " ", " x"}));
}

TEST(Gpt4oSplit, CjkEmojiAndTitlecase) {
  // Han, hiragana and katakana are \p{Lo}: one word per run, a space in front.
  EXPECT_EQ(split("gpt4o", "\xE4\xBD\xA0\xE5\xA5\xBD \xE3\x81\xAE\xE3\x83\x86"),
            (Words{"\xE4\xBD\xA0\xE5\xA5\xBD", " \xE3\x81\xAE\xE3\x83\x86"}));
  // Emoji (and a skin-tone modifier) are punctuation-like symbols: one run.
  EXPECT_EQ(split("gpt4o", "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD ok"),
            (Words{"\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", " ok"}));
  // U+01C5 (titlecase Dz) is \p{Lt}: it may start a word, then lower case follows.
  EXPECT_EQ(split("gpt4o", "\xC7\x85" "emal"), (Words{"\xC7\x85" "emal"}));
}

TEST(Gpt4oSplit, CombiningMarksStayWithLetters) {
  // \p{M} is in both letter classes: "nai" + U+0308 + "ve" is one word.
  const std::string text = "nai\xCC\x88ve";
  EXPECT_EQ(split("gpt4o", text), (Words{text}));
}

}  // namespace
}  // namespace ms
