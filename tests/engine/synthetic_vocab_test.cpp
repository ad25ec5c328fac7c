#include <gtest/gtest.h>

#include <string>

#include "engine/synthetic_vocab.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

TEST(SyntheticVocab, EncodesAndDecodesText) {
  Vocab v = make_synthetic_vocab(512);
  EXPECT_EQ(v.n_tokens(), 512);
  EXPECT_GT(v.merges.size(), 150u);
  Tokenizer tok(v);
  const std::string text = "The mill wheel turns in the morning light, 123!\nOK";
  auto ids = tok.encode(text, true, true);
  EXPECT_LT(ids.size(), text.size());  // merges make words shorter than bytes
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_TRUE(tok.is_eog(v.eos_id));
  EXPECT_TRUE(tok.is_eog(v.eot_id));
}

TEST(SyntheticVocab, ChatMlTemplateAndSpecialTokens) {
  Vocab v = make_synthetic_vocab(400);
  Tokenizer tok(v);
  ChatTemplate t = ChatTemplate::for_vocab(v);
  EXPECT_EQ(t.format(), ChatFormat::ChatML);
  auto ids = tok.encode(t.apply({{"user", "hi"}}, true), true, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], tok.find_token("<|im_start|>"));
}

TEST(SyntheticVocab, LargeVocabIsFilledAndDeterministic) {
  Vocab a = make_synthetic_vocab(32000), b = make_synthetic_vocab(32000);
  EXPECT_EQ(a.n_tokens(), 32000);
  EXPECT_EQ(a.tokens, b.tokens);
  Tokenizer tok(a);
  const int32_t filler = a.eos_id - 1;
  EXPECT_FALSE(tok.token_to_piece(filler).empty());
}

}  // namespace
}  // namespace ms
