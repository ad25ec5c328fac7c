#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tiny_vocabs.h"
#include "tokenizer/special.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

using test::id_of;
using test::tiny_bpe;

Vocab chat_vocab() {
  Vocab v = tiny_bpe({{"u", "s"}}, {"<|im_start|>", "<|im_end|>", "<|im_start|>x"});
  v.tokens.push_back("<think>");
  v.types.push_back(TokenType::UserDefined);
  v.eos_id = id_of(v, "<|im_end|>");
  return v;
}

TEST(SpecialSplitter, SplitsLongestLeftmost) {
  Vocab v = chat_vocab();
  SpecialSplitter s(v);
  std::vector<Fragment> f;
  s.split("a<|im_start|>b<|im_start|>xy<|im_end|>", true, f);
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f[0].text, "a");
  EXPECT_EQ(f[0].token, -1);
  EXPECT_EQ(f[1].token, id_of(v, "<|im_start|>"));
  EXPECT_EQ(f[2].text, "b");
  EXPECT_EQ(f[3].token, id_of(v, "<|im_start|>x"));  // the longer token wins
  EXPECT_EQ(f[4].text, "y");
  EXPECT_EQ(f[5].token, id_of(v, "<|im_end|>"));
}

TEST(SpecialSplitter, ControlOnlyWhenParsingSpecialUserDefinedAlways) {
  Vocab v = chat_vocab();
  SpecialSplitter s(v);
  std::vector<Fragment> f;
  s.split("<|im_end|><think>", false, f);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].token, -1);
  EXPECT_EQ(f[0].text, "<|im_end|>");
  EXPECT_EQ(f[1].token, id_of(v, "<think>"));
}

// The splitter's rule by its definition: at each position, the longest allowed
// special text that follows; among tokens of one text, the lowest id.
std::vector<Fragment> split_by_definition(const Vocab& v, std::string_view text, bool parse_control) {
  std::vector<Fragment> out;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    int32_t best = -1;
    size_t best_len = 0;
    for (size_t id = 0; id < v.tokens.size(); ++id) {
      const TokenType t = v.types[id];
      const bool control = t == TokenType::Control || t == TokenType::Unknown;
      if ((!control && t != TokenType::UserDefined) || (control && !parse_control)) continue;
      const std::string& s = v.tokens[id];
      if (s.empty() || s.size() <= best_len || text.substr(i, s.size()) != s) continue;
      best = static_cast<int32_t>(id);
      best_len = s.size();
    }
    if (best < 0) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({text.substr(start, i - start), -1});
    out.push_back({text.substr(i, best_len), best});
    i += best_len;
    start = i;
  }
  if (text.size() > start) out.push_back({text.substr(start), -1});
  return out;
}

TEST(SpecialSplitter, AgreesWithItsDefinitionOnRandomVocabularies) {
  std::mt19937 rng(7);
  const std::string alphabet = "<|ab>\xff";
  auto random_text = [&](size_t max_len) {
    std::string s(1 + rng() % max_len, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    return s;
  };
  for (int trial = 0; trial < 200; ++trial) {
    Vocab v = tiny_bpe({});
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) {
      // Short texts over a small alphabet: shared prefixes, texts inside
      // texts, the same text twice (control and user-defined), empty ones.
      v.tokens.push_back(rng() % 20 == 0 ? std::string() : random_text(6));
      const int kind = static_cast<int>(rng() % 4);
      v.types.push_back(kind == 0 ? TokenType::UserDefined : kind == 1 ? TokenType::Unknown
                        : kind == 2 ? TokenType::Control : TokenType::Normal);
    }
    SpecialSplitter s(v);
    for (int t = 0; t < 10; ++t) {
      const std::string text = random_text(60);
      for (const bool parse_control : {false, true}) {
        std::vector<Fragment> got;
        s.split(text, parse_control, got);
        const std::vector<Fragment> want = split_by_definition(v, text, parse_control);
        ASSERT_EQ(got.size(), want.size()) << "trial " << trial << " text '" << text << "'";
        for (size_t f = 0; f < got.size(); ++f) {
          EXPECT_EQ(got[f].text, want[f].text) << "trial " << trial << " fragment " << f;
          EXPECT_EQ(got[f].token, want[f].token) << "trial " << trial << " fragment " << f;
        }
      }
    }
  }
}

TEST(SpecialSplitter, ManyTokensSharingAPrefix) {
  // As gpt-oss's "<|reserved_N|>" tokens, but 50000 of them: each is found by
  // its own text, and a near miss is left as text.
  Vocab v = tiny_bpe({});
  for (int k = 0; k < 50000; ++k) {
    v.tokens.push_back("<|reserved_" + std::to_string(k) + "|>");
    v.types.push_back(TokenType::Control);
  }
  SpecialSplitter s(v);
  EXPECT_EQ(s.n_special(), 50000u);
  std::vector<Fragment> f;
  s.split("x<|reserved_49999|><|reserved_|><|reserved_7|>", true, f);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[1].token, id_of(v, "<|reserved_49999|>"));
  EXPECT_EQ(f[2].text, "<|reserved_|>");
  EXPECT_EQ(f[2].token, -1);
  EXPECT_EQ(f[3].token, id_of(v, "<|reserved_7|>"));
}

TEST(SpecialTokens, EncodeWithAndWithoutParsing) {
  Vocab v = chat_vocab();
  Tokenizer tok(v);
  const int32_t start = id_of(v, "<|im_start|>");
  EXPECT_EQ(tok.encode("<|im_start|>us", false, true),
            (std::vector<int32_t>{start, id_of(v, "us")}));
  const auto raw = tok.encode("<|im_start|>", false, false);
  EXPECT_EQ(raw.size(), std::string("<|im_start|>").size());  // plain bytes, no merges for them
  EXPECT_EQ(tok.decode(raw), "<|im_start|>");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{start}), "");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{start}, true), "<|im_start|>");
  EXPECT_EQ(tok.token_to_piece(id_of(v, "<think>"), false), "<think>");
  EXPECT_TRUE(tok.is_eog(id_of(v, "<|im_end|>")));
  EXPECT_FALSE(tok.is_eog(start));
}

TEST(SpecialTokens, BosEosAddedOnlyWhenAsked) {
  Vocab v = chat_vocab();
  v.bos_id = id_of(v, "<|im_start|>");
  v.add_bos = true;
  v.add_eos = true;
  Tokenizer tok(v);
  const auto ids = tok.encode("a", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{v.bos_id, 'a', v.eos_id}));
  EXPECT_EQ(tok.encode("a", false), (std::vector<int32_t>{'a'}));
}

}  // namespace
}  // namespace ms
