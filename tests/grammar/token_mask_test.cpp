// The token mask against a brute-force reference (each token's bytes walked
// through a copy of the matcher), on random small vocabularies and states
// reached by random walks through several schemas' grammars.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "grammar/json_schema.h"
#include "grammar/token_mask.h"

namespace ms::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<uint8_t> brute_force(const Matcher& m, const std::vector<std::string>& pieces, const std::vector<bool>& eog) {
  std::vector<uint8_t> out(pieces.size(), 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (eog[i]) {
      out[i] = m.can_end();
    } else if (!pieces[i].empty()) {
      Matcher copy = m;
      out[i] = copy.advance(pieces[i]);
    }
  }
  return out;
}

TEST(TokenMask, MatchesBruteForceOnRandomVocabularies) {
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":, \n0123456789.-eE\\abcdefghijklmnopqrstuvwxyz";
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","bc"]}}},"required":["name","n"]})",
      R"({"type":"array","items":{"type":"number"},"maxItems":4})",
      R"({"anyOf":[{"type":"boolean"},{"type":"null"},{"type":"string","maxLength":3}]})",
      R"({})",
  };
  for (int v = 0; v < 4; ++v) {
    // Tokens: single bytes (so every text can be spelled), random runs,
    // a few multi-byte UTF-8 pieces, a partial UTF-8 piece, empties, EOG.
    std::vector<std::string> pieces;
    for (char c : alphabet) pieces.push_back(std::string(1, c));
    for (int i = 0; i < 300; ++i) {
      std::string p;
      const int len = 1 + static_cast<int>(rng() % 6);
      for (int k = 0; k < len; ++k) p += alphabet[rng() % alphabet.size()];
      pieces.push_back(p);
    }
    for (const char* s : {"\xC3\xA9", "\xE2\x82\xAC", "\xC3", "\xA9\"", "\"\xF0\x9F\x98\x80", "true", "false", "null", "\": \""})
      pieces.push_back(s);
    pieces.push_back("");  // a control token
    pieces.push_back("");  // the end-of-turn token
    std::vector<bool> eog(pieces.size(), false);
    eog.back() = true;
    std::shuffle(pieces.begin(), pieces.end() - 2, rng);
    const TokenMask mask(pieces, eog);
    for (const char* text : schemas) {
      SCOPED_TRACE(text);
      const Grammar g = compile_json_schema(ojson::parse(text));
      for (int walk = 0; walk < 6; ++walk) {
        Matcher m(g);
        std::vector<uint8_t> got;
        for (int step = 0; step < 40; ++step) {
          const size_t n = mask.fill(m, got);
          const std::vector<uint8_t> want = brute_force(m, pieces, eog);
          ASSERT_EQ(got, want) << "step " << step;
          // One token at a time, in a random order, through one memo.
          StepMemo memo(m);
          std::vector<int32_t> order(pieces.size());
          std::iota(order.begin(), order.end(), 0);
          std::shuffle(order.begin(), order.end(), rng);
          for (int32_t id : order)
            ASSERT_EQ(mask.allows(m, memo, id), want[static_cast<size_t>(id)] != 0) << "token " << id << " step " << step;
          EXPECT_FALSE(mask.allows(m, memo, -1));
          EXPECT_FALSE(mask.allows(m, memo, static_cast<int32_t>(pieces.size())));
          size_t count = 0;
          for (uint8_t a : want) count += a;
          EXPECT_EQ(n, count);
          // Take a random allowed non-EOG token, if any.
          std::vector<size_t> ok;
          for (size_t i = 0; i + 1 < got.size(); ++i)
            if (got[i]) ok.push_back(i);
          if (ok.empty()) {
            EXPECT_TRUE(m.can_end()) << "no token allowed but the value is not complete";
            break;
          }
          ASSERT_TRUE(m.advance(pieces[ok[rng() % ok.size()]]));
        }
      }
    }
  }
}

TEST(TokenMask, EndOfTurnOnlyWhereTheValueIsComplete) {
  const Grammar g = compile_json_schema(ojson::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
  const std::vector<std::string> pieces = {"{", "\"a\":", "1", "}", "", "x"};
  const std::vector<bool> eog = {false, false, false, false, true, false};
  const TokenMask mask(pieces, eog);
  Matcher m(g);
  std::vector<uint8_t> a;
  mask.fill(m, a);
  EXPECT_EQ(a, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(m.advance("{\"a\":1"));
  mask.fill(m, a);
  EXPECT_EQ(a, (std::vector<uint8_t>{0, 0, 1, 1, 0, 0}));
  ASSERT_TRUE(m.advance("}"));
  mask.fill(m, a);
  EXPECT_EQ(a, (std::vector<uint8_t>{0, 0, 0, 0, 1, 0}));
  EXPECT_FALSE(m.can_continue());
}

TEST(TokenMask, CachedMasksAreKeptApartByGrammar) {
  // Same shape, so the same parse positions: only the grammar tells them apart.
  const Grammar a = compile_json_schema(ojson::parse(R"({"const":"a"})"));
  const Grammar b = compile_json_schema(ojson::parse(R"({"const":"b"})"));
  const std::vector<std::string> pieces = {"\"a\"", "\"b\"", ""};
  const TokenMask mask(pieces, {false, false, true});
  Matcher ma(a), mb(b);
  ASSERT_EQ(ma.state(), mb.state());
  std::vector<uint8_t> got;
  for (int round = 0; round < 3; ++round) {  // the second and third are cache hits
    mask.fill(ma, got);
    EXPECT_EQ(got, (std::vector<uint8_t>{1, 0, 0}));
    mask.fill(mb, got);
    EXPECT_EQ(got, (std::vector<uint8_t>{0, 1, 0}));
  }
}

TEST(TokenMask, RejectsMismatchedFlags) {
  EXPECT_THROW(TokenMask({"a", "b"}, {false}), std::exception);
}

}  // namespace
}  // namespace ms::grammar
