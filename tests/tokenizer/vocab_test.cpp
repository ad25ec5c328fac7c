#include <gtest/gtest.h>

#include "tiny_vocabs.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ms {
namespace {

void expect_error_mentions(const Vocab& v, const std::string& what) {
  try {
    v.validate("test");
    FAIL() << "expected an error mentioning " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Vocab, ValidateCatchesInconsistencies) {
  Vocab good = test::tiny_bpe({{"a", "b"}});
  EXPECT_NO_THROW(good.validate());

  Vocab v = good;
  v.types.pop_back();
  expect_error_mentions(v, "token_type");
  v = good;
  v.scores = {1.0f};
  expect_error_mentions(v, "scores");
  v = good;
  v.eos_id = v.n_tokens();
  expect_error_mentions(v, "eos_token_id");
  v = good;
  v.merges.push_back("nospace");
  expect_error_mentions(v, "merges");
  v = good;
  v.add_bos = true;
  expect_error_mentions(v, "bos");
  v = good;
  v.tokens.clear();
  v.types.clear();
  v.merges.clear();
  expect_error_mentions(v, "no tokens");
  Vocab spm = test::tiny_spm({{"a", 0}});
  EXPECT_NO_THROW(spm.validate());
  spm.scores.clear();
  expect_error_mentions(spm, "scores");
}

TEST(Vocab, TokenizerRejectsOutOfRangeIds) {
  Tokenizer tok(test::tiny_bpe({}));
  EXPECT_THROW(tok.token_to_piece(-1), Error);
  EXPECT_THROW(tok.token_to_piece(tok.n_tokens()), Error);
  EXPECT_FALSE(tok.is_eog(-5));
  EXPECT_EQ(tok.find_token("a"), 'a');
  EXPECT_EQ(tok.find_token(" "), ' ');
  EXPECT_EQ(tok.find_token("\xC4\xA0"), ' ');  // Ġ, as stored
}

}  // namespace
}  // namespace ms
