#include <gtest/gtest.h>

#include "tiny_vocabs.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

using test::id_of;
using test::tiny_spm;

const std::string S = "\xE2\x96\x81";  // ▁

Vocab hello_vocab() {
  return tiny_spm({{S, 0}, {"h", 0}, {"e", 0}, {"l", 0}, {"o", 0}, {"w", 0}, {"r", 0}, {"d", 0},
                   {"ll", -1}, {"he", -2}, {S + "he", -3}, {"llo", -4}, {S + "hello", -5},
                   {"el", -10}, {"wor", -6}, {"or", -7}});
}

TEST(Spm, MergesByScore) {
  Vocab v = hello_vocab();
  Tokenizer tok(v);
  // ▁ h e l l o: ll (-1) first, then he (-2), ▁he (-3), llo (-4), ▁hello (-5).
  // "el" (-10) would have been taken first by a left-to-right greedy merge.
  EXPECT_EQ(tok.encode("hello", false), (std::vector<int32_t>{id_of(v, S + "hello")}));
  // ▁ w o r: "or" (-7) is in the vocabulary but "wor" (-6) is only reachable
  // from w + or, so: or first, then wor.
  EXPECT_EQ(tok.encode("wor", false), (std::vector<int32_t>{id_of(v, S), id_of(v, "wor")}));
}

TEST(Spm, BosAndSpacePrefix) {
  Vocab v = hello_vocab();
  Tokenizer tok(v);
  const auto ids = tok.encode("hello", true);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);  // <s>
  v.add_space_prefix = false;
  Tokenizer no_prefix(v);
  EXPECT_EQ(no_prefix.encode("he", false), (std::vector<int32_t>{id_of(v, "he")}));
}

TEST(Spm, ByteFallbackForUnknownCharacters) {
  Vocab v = hello_vocab();
  Tokenizer tok(v);
  // € = E2 82 AC is not a piece: three byte tokens (ids 3 + byte).
  const auto ids = tok.encode("\xE2\x82\xAC", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{id_of(v, S), 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(tok.decode(ids), "\xE2\x82\xAC");
  EXPECT_EQ(tok.token_to_piece(3 + 0x41), "A");
}

TEST(Spm, DecodeStripsOnlyThePrefixSpace) {
  Vocab v = hello_vocab();
  Tokenizer tok(v);
  for (const std::string text : {"hello", " hello", "hello  hello", "   ", "d\xE2\x82\xAC"}) {
    EXPECT_EQ(tok.decode(tok.encode(text, true, false)), text) << text;
  }
}

TEST(Spm, SpecialTokensSplitAndRestartThePrefix) {
  Vocab v = hello_vocab();
  Tokenizer tok(v);
  const auto ids = tok.encode("he</s>he", false, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{id_of(v, S + "he"), 2, id_of(v, S + "he")}));
  const auto raw = tok.encode("</s>", false, false);
  EXPECT_EQ(std::count(raw.begin(), raw.end(), 2), 0);
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_FALSE(tok.is_eog(1));
}

TEST(Spm, EscapeSpaces) {
  EXPECT_EQ(spm_escape_spaces("a b", true), S + "a" + S + "b");
  EXPECT_EQ(spm_escape_spaces("", false), "");
  EXPECT_EQ(parse_byte_piece("<0x0A>"), 10);
  EXPECT_EQ(parse_byte_piece("<0xZZ>"), -1);
}

}  // namespace
}  // namespace ms
