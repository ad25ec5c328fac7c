// A JSON schema's `pattern` (an ECMA-262 regular expression, a subset) as a
// grammar rule for a JSON string's content: the bytes between the quotes,
// characters written as JSON writes them (`"` as \", a newline as \n).
//
// Supported: literals, escapes (\d \w \s and their negations, \t \n \r \f
// \v, \xHH, \uHHHH, escaped punctuation), classes ([a-z_], [^...]), `.`,
// groups ((...), (?:...), (?<name>...)), alternation, quantifiers (* + ?
// {n} {n,} {n,m}, lazy or not: the same strings match), and ^ / $ at the
// start / end of a top-level alternative. A pattern is searched, not
// matched whole: a side without its anchor may have any characters there.
// Refused (PatternError saying what): lookaround, backreferences, \b \B,
// \p{...}, anchors elsewhere, non-ASCII characters inside classes, counts
// above the limit.
//
// Generated text is a subset of what the pattern matches: `.`, negated
// classes and \D \S \W give ASCII characters only (Unicode's extra spaces
// and line terminators make their non-ASCII part a question of the regex
// engine), which is sound whatever engine validates.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace ms::grammar {

struct PatternError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `any_char`: the rule of one JSON string character (escapes and UTF-8
// included), for the unanchored ends. `max_count`: the largest {n,m} count.
uint32_t pattern_rule(Builder& b, std::string_view pattern, uint32_t any_char, int64_t max_count);

}  // namespace ms::grammar
