#include <gtest/gtest.h>

#include <random>

#include "tiny_vocabs.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ms {
namespace {

using test::id_of;
using test::tiny_bpe;

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  PreTokenizer p(pre_tokenizer_spec(pre).regex);
  std::vector<std::string_view> words;
  p.split(text, words);
  return {words.begin(), words.end()};
}

TEST(ByteLevel, KnownCharactersAndRoundTripOfAllBytes) {
  EXPECT_EQ(byte_level_encode(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level_encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level_encode("a!~"), "a!~");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(byte_level_decode(byte_level_encode(all), back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(byte_level_decode("\xE4\xBD\xA0", back));  // 你 is outside the mapping
}

TEST(BpeModel, MergesApplyByRankNotByPosition) {
  // "hello": e+l has the best rank, then h+e can no longer apply, then l+o.
  Vocab v = tiny_bpe({{"e", "l"}, {"h", "e"}, {"l", "o"}});
  BpeModel m(v, false);
  std::vector<int32_t> ids;
  m.encode_word("hello", ids);
  const std::vector<int32_t> want = {'h', id_of(v, "el"), id_of(v, "lo")};
  EXPECT_EQ(ids, want);
}

TEST(BpeModel, ChainedMergesAndLeftmostTieBreak) {
  Vocab v = tiny_bpe({{"a", "a"}, {"aa", "a"}, {"aa", "aa"}});
  BpeModel m(v, false);
  std::vector<int32_t> ids;
  m.encode_word("aaa", ids);  // a+a at position 0 first, then aa+a
  EXPECT_EQ(ids, (std::vector<int32_t>{id_of(v, "aaa")}));
  ids.clear();
  m.encode_word("aaaaa", ids);  // aa aa a -> (aa+a ranks before aa+aa) -> aa aaa
  EXPECT_EQ(ids, (std::vector<int32_t>{id_of(v, "aa"), id_of(v, "aaa")}));
}

TEST(BpeModel, IgnoreMergesTakesWholeWordTokens) {
  Vocab v = tiny_bpe({{"a", "b"}});
  v.tokens.push_back("abc");
  v.types.push_back(TokenType::Normal);
  std::vector<int32_t> merged, whole;
  BpeModel(v, false).encode_word("abc", merged);
  BpeModel(v, true).encode_word("abc", whole);
  EXPECT_EQ(merged, (std::vector<int32_t>{id_of(v, "ab"), 'c'}));
  EXPECT_EQ(whole, (std::vector<int32_t>{id_of(v, "abc")}));
}

TEST(BpeModel, CacheGivesSameAnswer) {
  Vocab v = tiny_bpe({{"e", "l"}, {"h", "e"}, {"l", "o"}});
  BpeModel m(v, false);
  std::vector<int32_t> a, b;
  m.encode_word("hello", a);
  m.encode_word("hello", b);
  EXPECT_EQ(a, b);
}

TEST(PreTokenizer, Gpt2Splits) {
  EXPECT_EQ(split("gpt2", "Hello world's  123"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " 123"}));
  // \s+(?!\S) leaves the last whitespace character to the next word.
  EXPECT_EQ(split("gpt2", "a\n\nb"), (std::vector<std::string>{"a", "\n", "\n", "b"}));
}

TEST(PreTokenizer, DigitsDifferBetweenLlama3AndQwen2) {
  EXPECT_EQ(split("llama3", "12345"), (std::vector<std::string>{"123", "45"}));
  EXPECT_EQ(split("qwen2", "12345"), (std::vector<std::string>{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("gpt2", "12345"), (std::vector<std::string>{"12345"}));
}

TEST(PreTokenizer, Llama3Punctuation_Newlines_Contractions) {
  EXPECT_EQ(split("llama3", "Hi!\n\nI'M ok."),
            (std::vector<std::string>{"Hi", "!\n\n", "I", "'M", " ok", "."}));
  // Case-insensitive contractions are ASCII only: U+017F is a letter, not 's'.
  // (With a Unicode-caseless match it would split as "'ſ" + "t".)
  EXPECT_EQ(split("llama3", "x'\xC5\xBFt"), (std::vector<std::string>{"x", "'\xC5\xBFt"}));
}

TEST(PreTokenizer, Qwen35KeepsCombiningMarksWithLetters) {
  const std::string text = "nai\xCC\x88ve";  // i + U+0308 COMBINING DIAERESIS
  // qwen2: the mark is not a letter; it becomes the optional prefix of "ve".
  EXPECT_EQ(split("qwen2", text), (std::vector<std::string>{"nai", "\xCC\x88ve"}));
  EXPECT_EQ(split("qwen35", text), (std::vector<std::string>{text}));
  // Devanagari vowel signs are marks too.
  const std::string hindi = "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8";  // हिन
  EXPECT_EQ(split("qwen35", " " + hindi), (std::vector<std::string>{" " + hindi}));
  EXPECT_GT(split("qwen2", " " + hindi).size(), 1u);
}

TEST(PreTokenizer, InvalidUtf8BytesAreWordsOfTheirOwn) {
  EXPECT_EQ(split("qwen2", "ab\xFF" "cd"), (std::vector<std::string>{"ab", "\xFF", "cd"}));
}

TEST(PreTokenizer, PiecesAlwaysConcatenateToTheInput) {
  std::mt19937 rng(7);
  const char* alphabet[] = {"a", "Z", "1", " ", "\n", "\t", "'", "s", "!", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80",
                            "\xCC\x88", "\xFF", "\xC3", "\r"};
  for (const char* pre : {"gpt2", "llama3", "qwen2", "qwen35", "gpt4o"}) {
    PreTokenizer p(pre_tokenizer_spec(pre).regex);
    for (int iter = 0; iter < 300; ++iter) {
      std::string text;
      const int n = static_cast<int>(rng() % 40);
      for (int k = 0; k < n; ++k) text += alphabet[rng() % std::size(alphabet)];
      std::vector<std::string_view> words;
      p.split(text, words);
      std::string joined;
      for (auto w : words) {
        EXPECT_FALSE(w.empty());
        joined += w;
      }
      ASSERT_EQ(joined, text) << pre;
    }
  }
}

TEST(PreTokenizer, UnknownNameListsSupported) {
  try {
    pre_tokenizer_spec("falcon");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen35"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(pre_tokenizer_spec("llama-bpe").name, "llama3");
  EXPECT_STREQ(pre_tokenizer_spec("").name, "gpt2");
  Vocab v = tiny_bpe({});
  v.pre = "nonsense";
  EXPECT_THROW(Tokenizer{v}, Error);
}

TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  Tokenizer tok(tiny_bpe({{"h", "e"}, {"l", "l"}, {" ", "w"}}));
  std::mt19937 rng(3);
  for (int iter = 0; iter < 200; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 30);
    for (int k = 0; k < n; ++k) text.push_back(static_cast<char>(rng() % 256));
    const auto ids = tok.encode(text, false, false);
    ASSERT_EQ(tok.decode(ids), text);
  }
}

TEST(BpeTokenizer, NfcForQwenPreTokenizers) {
  Vocab v = tiny_bpe({}, {}, "qwen2");
  Tokenizer tok(v);
  // e + U+0301 becomes é (C3 A9) before tokenizing: two byte tokens.
  EXPECT_EQ(tok.encode("e\xCC\x81", false), (std::vector<int32_t>{0xC3, 0xA9}));
  v.pre = "llama3";
  Tokenizer no_nfc(v);
  EXPECT_EQ(no_nfc.encode("e\xCC\x81", false), (std::vector<int32_t>{'e', 0xCC, 0x81}));
}

TEST(BpeTokenizer, Qwen35KeepsMarksInWordsWithoutNormalising) {
  // qwen35 does not compose i + U+0308 (CC 88) to ï, unlike qwen2, and keeps
  // the mark in the word: "nai\u0308ve" is one word, so the merges below
  // join "i" and its mark, then "na" with them.
  Vocab v = tiny_bpe({{"\xCC", "\x88"}, {"i", "\xCC\x88"}, {"n", "a"}, {"na", "i\xCC\x88"}}, {}, "qwen35");
  Tokenizer tok(v);
  const auto ids = tok.encode("nai\xCC\x88ve", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{id_of(v, byte_level_encode("nai\xCC\x88")), 'v', 'e'}));
  EXPECT_STREQ(tok.pre_name(), "qwen35");
  // The decomposed é stays decomposed: "e" then the mark's two bytes.
  Vocab plain = tiny_bpe({}, {}, "qwen35");
  EXPECT_EQ(Tokenizer(plain).encode("e\xCC\x81", false), (std::vector<int32_t>{'e', 0xCC, 0x81}));
}

}  // namespace
}  // namespace ms
