// Numbers with bounds as grammar rules: the decimal texts of the values in a
// range, digit by digit (as llama.cpp's json-schema-to-grammar builds integer
// ranges), for JSON schemas' minimum / maximum / exclusiveMinimum /
// exclusiveMaximum / multipleOf (grammar/json_schema.h).
//
// Bounds are compared exactly, in decimal: a bound is the shortest decimal
// text of its double (what nlohmann's dump writes), and a text the grammar
// gives is a decimal of at most 15 digits (no exponent). Parsing decimals to
// doubles is monotone, and two different decimals of at most 15 significant
// digits never parse to the same double, so a text above a bound parses to a
// double above it: the output validates however the client compares.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "grammar/grammar.h"

namespace ms::grammar {

// A finite decimal: (-1)^neg * mantissa * 10^exp, mantissa digits without
// leading zeros ("0" for zero).
struct Decimal {
  bool neg = false;
  std::string mantissa = "0";
  int exp = 0;
};
// From a JSON number's text ("1.5", "-2e-07", "12"); nullopt when not one.
std::optional<Decimal> parse_decimal(const std::string& text);

// floor / ceil of d * 10^k, clamped to +-10^17 (beyond every cap here).
int64_t scaled_floor(const Decimal& d, int k);
int64_t scaled_ceil(const Decimal& d, int k);

struct NumberBounds {
  std::optional<Decimal> lo, hi;
  bool lo_exclusive = false, hi_exclusive = false;
};

// Builds the rules. `max_digits`: digits a text may have in all (integer and
// fraction part); values past it are not generated.
class NumberRanges {
 public:
  explicit NumberRanges(Builder& b) : b_(b) {}

  // Texts N / 10^k for every k in [k_min, k_max] and integer N with the
  // value within `bounds`, written with exactly k fraction digits ("-0.50"
  // for N = -50, k = 2; no "-0"). Returns nullopt when there is none.
  std::optional<uint32_t> range(const NumberBounds& bounds, int k_min, int k_max, int max_digits);

  // Decimal texts ("12", "12.5", "-0.25"; no exponent, no "-0") of the values
  // within `bounds`, with at most `int_digits` digits before the point and
  // `frac_digits` after it. Read left to right, the integer part decides
  // first and the fraction is constrained only where the integer part is a
  // bound's own, so few alternatives are alive at once. nullopt: none.
  std::optional<uint32_t> decimal(const NumberBounds& bounds, int int_digits, int frac_digits);

  // N / 10^k written with k fraction digits, for the integers N in
  // [n_lo, n_hi] that are multiples of `step` (at most `max_values` of them,
  // else nullopt: too many to list). Empty (no value) is an error to the caller:
  // *count gets how many there were.
  std::optional<uint32_t> multiples(int64_t n_lo, int64_t n_hi, int64_t step, int k, size_t max_values,
                                    size_t* count);

  // Integers of up to `max_digits` digits that are multiples of `step`,
  // digit by digit over the remainder (a deterministic automaton: step x
  // digits rules): positive ones, negative ones, zero, as asked.
  uint32_t multiples_of(int64_t step, int max_digits, bool negative, bool zero, bool positive);

  // The text of N / 10^k with exactly k fraction digits.
  static std::string text(int64_t n, int k);

 private:
  // Texts of the non-negative N in [a, b] (N < 10^max_digits), k fraction digits.
  std::optional<uint32_t> nonneg(int64_t a, int64_t b, int k, int max_digits);
  // Digit strings of X's length between X and Y (same length), with a '.'
  // before digit `point` (-1: none).
  uint32_t fixed(const std::string& x, const std::string& y, int point);

  // Magnitudes (no sign) from lo to hi (hi nullopt: up to the cap).
  std::optional<uint32_t> magnitude(const Decimal& lo, bool lo_excl, const std::optional<Decimal>& hi, bool hi_excl,
                                    int int_digits, int frac_digits);
  // Fraction digit strings F of 0..n digits (1..n when !empty_ok) with 0.F
  // at or above 0.lo (kind 'g'), at or below 0.hi ('l'), or both ('b');
  // *_excl: strictly.
  std::optional<uint32_t> fraction(char kind, const std::string& lo, bool lo_excl, const std::string& hi,
                                   bool hi_excl, int n, bool empty_ok);
  uint32_t any_digits(int n);  // 0..n digits

  Builder& b_;
  std::map<std::string, uint32_t> memo_;
};

}  // namespace ms::grammar
