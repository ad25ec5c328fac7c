#include <gtest/gtest.h>

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
