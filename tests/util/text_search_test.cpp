// TextSearch / find_text against std::string::find (the definition) on
// random texts over small alphabets (many partial matches), every start.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "util/text_search.h"

namespace ms {
namespace {

std::string random_text(std::mt19937& rng, size_t n, int alphabet) {
  std::uniform_int_distribution<int> c(0, alphabet - 1);
  std::string s(n, 'a');
  for (char& ch : s) ch = static_cast<char>('a' + c(rng));
  return s;
}

TEST(TextSearch, AgreesWithStdFindFromEveryStart) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int alphabet = 1 + trial % 3;
    const std::string text = random_text(rng, rng() % 200, alphabet);
    const std::string pat = random_text(rng, rng() % 9, alphabet);
    const TextSearch search(pat);
    for (size_t from = 0; from <= text.size() + 1; ++from) {
      ASSERT_EQ(search.find(text, from), text.find(pat, from)) << "text " << text << " pattern " << pat << " from " << from;
      ASSERT_EQ(find_text(text, pat, from), text.find(pat, from));
    }
  }
}

TEST(TextSearch, FindsEveryOccurrenceWhenWalked) {
  const std::string text = "abababab";
  const TextSearch search("abab");
  std::vector<size_t> at;
  for (size_t p = search.find(text); p != std::string::npos; p = search.find(text, p + 1)) at.push_back(p);
  EXPECT_EQ(at, (std::vector<size_t>{0, 2, 4}));
}

TEST(TextSearch, BinaryBytesAndEmptyPattern) {
  const std::string text("\0\xff\0\xff\x80", 5);
  EXPECT_EQ(find_text(text, std::string("\xff\0\xff\x80", 4)), 1u);
  EXPECT_EQ(find_text(text, std::string("\0\xff\0\xff\x80\x01", 6)), std::string::npos);
  EXPECT_EQ(TextSearch("").find(text, 3), 3u);
  EXPECT_EQ(TextSearch("").find(text, 6), std::string::npos);
}

// The definition: the longest n < |pattern| with text's last n bytes equal to
// the pattern's first n.
size_t pending_prefix_by_definition(const std::string& text, const std::string& pat) {
  for (size_t n = std::min(text.size(), pat.empty() ? 0 : pat.size() - 1); n > 0; --n)
    if (text.compare(text.size() - n, n, pat, 0, n) == 0) return n;
  return 0;
}

TEST(TextSearch, PendingPrefixAgreesWithItsDefinition) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const int alphabet = 1 + trial % 3;
    const std::string text = random_text(rng, rng() % 40, alphabet);
    const std::string pat = random_text(rng, rng() % 9, alphabet);
    ASSERT_EQ(TextSearch(pat).pending_prefix(text), pending_prefix_by_definition(text, pat))
        << "text " << text << " pattern " << pat;
  }
}

}  // namespace
}  // namespace ms
