// The grammar builder and the byte matcher on hand-written grammars:
// repetition bounds, alternatives, recursion, and what finish() refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace ms::grammar {
namespace {

bool accepts(const Grammar& g, const std::string& s) {
  Matcher m(g);
  return m.advance(s) && m.can_end();
}
bool prefix(const Grammar& g, const std::string& s) {
  Matcher m(g);
  return m.advance(s);
}

TEST(Grammar, RepeatHonoursItsBounds) {
  Builder b;
  const uint32_t r = b.repeat("a", literal("ab"), 2, 4);
  const Grammar g = b.finish(r);
  EXPECT_FALSE(accepts(g, "ab"));
  EXPECT_TRUE(accepts(g, "abab"));
  EXPECT_TRUE(accepts(g, "ababab"));
  EXPECT_TRUE(accepts(g, "abababab"));
  EXPECT_FALSE(accepts(g, "ababababab"));
  EXPECT_FALSE(prefix(g, "ababababa"));
  EXPECT_TRUE(prefix(g, "aba"));
  EXPECT_FALSE(accepts(g, "aba"));
  EXPECT_FALSE(prefix(g, "b"));
}

TEST(Grammar, UnboundedRepeatKeepsTheStackFlat) {
  Builder b;
  const uint32_t r = b.repeat("x", {byte_sym('x')}, 1, -1);
  const Grammar g = b.finish(r);
  Matcher m(g);
  EXPECT_FALSE(m.can_end());
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(m.advance('x')) << i;
  EXPECT_TRUE(m.can_end());
  size_t deepest = 0;
  for (const auto& s : m.state()) deepest = std::max(deepest, s.size());
  EXPECT_LE(deepest, 4u);
}

TEST(Grammar, RecursionThroughBytesNests) {
  // p ::= "(" p ")" | ""
  Builder b;
  const uint32_t p = b.declare("p");
  b.add_alt(p, literal("(") + rule_sym(p) + byte_sym(')'));
  b.add_alt(p, {});
  const Grammar g = b.finish(p);
  EXPECT_TRUE(accepts(g, ""));
  EXPECT_TRUE(accepts(g, "((()))"));
  EXPECT_FALSE(accepts(g, "(()"));
  EXPECT_TRUE(prefix(g, "(()"));
  EXPECT_FALSE(prefix(g, "())"));
}

TEST(Grammar, NestingPastTheMatcherDepthIsRefusedNotCrashed) {
  Builder b;
  const uint32_t p = b.declare("p");
  b.add_alt(p, literal("(") + rule_sym(p) + byte_sym(')'));
  b.add_alt(p, {});
  const Grammar g = b.finish(p);
  MatcherLimits lim;
  lim.max_depth = 16;
  Matcher m(g, lim);
  int opened = 0;
  while (opened < 100 && m.advance('(')) ++opened;
  EXPECT_LT(opened, 20);
  EXPECT_GT(opened, 3);
  for (int i = 0; i < opened; ++i) ASSERT_TRUE(m.advance(')'));
  EXPECT_TRUE(m.can_end());
}

TEST(Grammar, LeftRecursionIsRefused) {
  Builder b;
  const uint32_t a = b.declare("a");
  const uint32_t c = b.declare("c");
  b.add_alt(a, {rule_sym(c)});
  b.add_alt(c, Seq{rule_sym(a), byte_sym('x')});
  b.add_alt(c, literal("y"));
  EXPECT_THROW(b.finish(a), GrammarError);
}

TEST(Grammar, LeftRecursionBehindANullableRuleIsRefused) {
  Builder b;
  const uint32_t e = b.rule("e", {Seq{}, literal("z")});
  const uint32_t a = b.declare("a");
  b.add_alt(a, Seq{rule_sym(e), rule_sym(a), byte_sym('x')});
  b.add_alt(a, literal("y"));
  EXPECT_THROW(b.finish(a), GrammarError);
}

TEST(Grammar, UnproductiveRootIsRefusedAndUnproductiveAlternativesDropped) {
  Builder b;
  const uint32_t loop = b.declare("loop");
  b.add_alt(loop, literal("a") + rule_sym(loop));
  EXPECT_THROW(b.finish(loop), GrammarError);

  Builder b2;
  const uint32_t loop2 = b2.declare("loop");
  b2.add_alt(loop2, literal("a") + rule_sym(loop2));
  const uint32_t top = b2.rule("top", {Seq{rule_sym(loop2)}, literal("b")});
  const Grammar g = b2.finish(top);
  EXPECT_TRUE(accepts(g, "b"));
  EXPECT_FALSE(prefix(g, "a"));  // a path that could never end is not offered
}

TEST(Grammar, SizeLimitIsEnforcedBeforeMemoryGrows) {
  GrammarLimits lim;
  lim.max_elements = 1000;
  Builder b(lim);
  EXPECT_THROW(b.repeat("x", literal("abc"), 0, 1000000000), GrammarError);
}

TEST(Grammar, DumpNamesRules) {
  Builder b;
  const uint32_t r = b.rule("greeting", {literal("hi"), literal("yo")});
  const std::string d = b.finish(r).dump();
  EXPECT_NE(d.find("greeting ::="), std::string::npos);
  EXPECT_NE(d.find("\"h\" \"i\""), std::string::npos);
}

// StackSet::normalize against the vector-of-stacks definition: sorted
// lexicographically (a prefix first), duplicates dropped, the first
// max_stacks kept; empty stacks and shared prefixes included.
TEST(StackSet, NormalizeIsSortUniqueTruncate) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<std::vector<uint32_t>> ref;
    StackSet set;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      std::vector<uint32_t> st(rng() % 5);
      for (uint32_t& v : st) v = rng() % 3;
      ref.push_back(st);
      set.push(st);
    }
    const size_t max_stacks = 1 + rng() % 30;
    std::sort(ref.begin(), ref.end());
    ref.erase(std::unique(ref.begin(), ref.end()), ref.end());
    if (ref.size() > max_stacks) ref.resize(max_stacks);
    set.normalize(max_stacks);
    std::vector<std::vector<uint32_t>> got;
    for (const StackSet::Stack st : set) got.emplace_back(st.begin(), st.end());
    ASSERT_EQ(got, ref) << "trial " << trial;
  }
  // A moved-from set reads as empty and takes stacks again.
  StackSet a;
  a.push(std::vector<uint32_t>{1, 2});
  StackSet b = std::move(a);
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): its state is defined
  a.push(std::vector<uint32_t>{3});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].size(), 1u);
}

}  // namespace
}  // namespace ms::grammar
