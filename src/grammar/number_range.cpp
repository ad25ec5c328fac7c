#include "grammar/number_range.h"

#include <algorithm>
#include <cctype>
#include <functional>

namespace ms::grammar {

namespace {

constexpr int64_t kClamp = 100000000000000000LL;  // 10^17

int64_t pow10(int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

std::string padded(int64_t n, size_t width) {
  std::string s = std::to_string(n);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

size_t digits_of(int64_t n) { return std::to_string(n).size(); }

// |d| * 10^k as an integer part and whether a fraction is left, clamped.
void scaled_abs(const Decimal& d, int k, int64_t& whole, bool& frac) {
  whole = 0;
  frac = false;
  if (d.mantissa == "0") return;
  const int s = d.exp + k;
  if (s >= 0) {
    if (static_cast<int>(d.mantissa.size()) + s > 17) {
      whole = kClamp;
      return;
    }
    whole = std::stoll(d.mantissa) * pow10(s);
    return;
  }
  const int cut = static_cast<int>(d.mantissa.size()) + s;  // digits left of the point
  if (cut <= 0) {
    frac = true;
    return;
  }
  if (cut > 17) {
    whole = kClamp;
    return;
  }
  whole = std::stoll(d.mantissa.substr(0, static_cast<size_t>(cut)));
  frac = d.mantissa.find_first_not_of('0', static_cast<size_t>(cut)) != std::string::npos;
}

}  // namespace

std::optional<Decimal> parse_decimal(const std::string& text) {
  size_t i = 0;
  Decimal d;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) d.neg = text[i++] == '-';
  std::string digits;
  int exp = 0;
  bool seen = false, point = false;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i) {
    if (text[i] == '.') {
      if (point) return std::nullopt;
      point = true;
      continue;
    }
    seen = true;
    digits += text[i];
    if (point) --exp;
  }
  if (!seen) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) eneg = text[i++] == '-';
    if (i >= text.size()) return std::nullopt;
    int e = 0;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      e = e * 10 + (text[i] - '0');
      if (e > 100000) return std::nullopt;
    }
    exp += eneg ? -e : e;
  }
  if (i != text.size()) return std::nullopt;
  const size_t nz = digits.find_first_not_of('0');
  if (nz == std::string::npos) {
    d.mantissa = "0";
    d.exp = 0;
    d.neg = false;
    return d;
  }
  digits.erase(0, nz);
  // Trailing zeros move into the exponent (short mantissas stay in range).
  while (digits.size() > 1 && digits.back() == '0') {
    digits.pop_back();
    ++exp;
  }
  if (digits.size() > 40) return std::nullopt;
  d.mantissa = digits;
  d.exp = exp;
  return d;
}

int64_t scaled_floor(const Decimal& d, int k) {
  int64_t w;
  bool f;
  scaled_abs(d, k, w, f);
  if (!d.neg) return w;
  return w >= kClamp ? -kClamp : -w - (f ? 1 : 0);
}

int64_t scaled_ceil(const Decimal& d, int k) {
  int64_t w;
  bool f;
  scaled_abs(d, k, w, f);
  if (d.neg) return -w;
  return w >= kClamp ? kClamp : w + (f ? 1 : 0);
}

std::string NumberRanges::text(int64_t n, int k) {
  const bool neg = n < 0;
  std::string s = padded(neg ? -n : n, static_cast<size_t>(k) + 1);
  if (k > 0) s.insert(s.size() - static_cast<size_t>(k), ".");
  return neg ? "-" + s : s;
}

uint32_t NumberRanges::fixed(const std::string& x, const std::string& y, int point) {
  const std::string key = x + "|" + y + "|" + std::to_string(point);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  uint32_t r;
  if (x.empty()) {
    r = b_.rule("digits-end", {Seq{}});
  } else {
    const Seq dot = point == 0 ? literal(".") : Seq{};
    const int next = point > 0 ? point - 1 : -1;
    const std::string xs = x.substr(1), ys = y.substr(1);
    const std::string zeros(xs.size(), '0'), nines(ys.size(), '9');
    const uint8_t x0 = static_cast<uint8_t>(x[0]), y0 = static_cast<uint8_t>(y[0]);
    std::vector<Seq> alts;
    if (x0 == y0) {
      alts.push_back(dot + byte_sym(x0) + rule_sym(fixed(xs, ys, next)));
    } else if (xs == zeros && ys == nines) {
      alts.push_back(dot + range_sym(x0, y0) + rule_sym(fixed(zeros, nines, next)));
    } else {
      alts.push_back(dot + byte_sym(x0) + rule_sym(fixed(xs, nines, next)));
      if (x0 + 1 <= y0 - 1)
        alts.push_back(dot + range_sym(static_cast<uint8_t>(x0 + 1), static_cast<uint8_t>(y0 - 1)) +
                       rule_sym(fixed(zeros, nines, next)));
      alts.push_back(dot + byte_sym(y0) + rule_sym(fixed(zeros, ys, next)));
    }
    r = b_.rule("digits", alts);
  }
  memo_[key] = r;
  return r;
}

std::optional<uint32_t> NumberRanges::nonneg(int64_t a, int64_t b, int k, int max_digits) {
  b = std::min(b, pow10(max_digits) - 1);
  if (a > b) return std::nullopt;
  std::vector<Seq> alts;
  // One length at a time: L digits in all, at least k + 1 ("0.05").
  const size_t l_min = std::max(digits_of(a), static_cast<size_t>(k) + 1);
  const size_t l_max = std::max(digits_of(b), static_cast<size_t>(k) + 1);
  for (size_t l = l_min; l <= l_max; ++l) {
    const int64_t lowest = l == static_cast<size_t>(k) + 1 ? 0 : pow10(static_cast<int>(l) - 1);
    const int64_t x = std::max(a, lowest), y = std::min(b, pow10(static_cast<int>(l)) - 1);
    if (x > y) continue;
    const int point = k > 0 ? static_cast<int>(l) - k : -1;
    alts.push_back({rule_sym(fixed(padded(x, l), padded(y, l), point))});
  }
  if (alts.empty()) return std::nullopt;
  return b_.rule("number-range", alts);
}

std::optional<uint32_t> NumberRanges::range(const NumberBounds& bounds, int k_min, int k_max, int max_digits) {
  std::vector<Seq> alts;
  const int64_t cap = pow10(max_digits) - 1;
  for (int k = k_min; k <= k_max; ++k) {
    int64_t lo = -cap, hi = cap;
    if (bounds.lo) lo = std::max(lo, bounds.lo_exclusive ? scaled_floor(*bounds.lo, k) + 1 : scaled_ceil(*bounds.lo, k));
    if (bounds.hi) hi = std::min(hi, bounds.hi_exclusive ? scaled_ceil(*bounds.hi, k) - 1 : scaled_floor(*bounds.hi, k));
    if (lo > hi) continue;
    if (hi >= 0)
      if (auto r = nonneg(std::max<int64_t>(lo, 0), hi, k, max_digits)) alts.push_back({rule_sym(*r)});
    if (lo <= -1)
      if (auto r = nonneg(std::max<int64_t>(-hi, 1), -lo, k, max_digits)) alts.push_back(literal("-") + rule_sym(*r));
  }
  if (alts.empty()) return std::nullopt;
  return b_.rule("number-in-range", alts);
}

std::optional<uint32_t> NumberRanges::multiples(int64_t n_lo, int64_t n_hi, int64_t step, int k, size_t max_values,
                                                size_t* count) {
  *count = 0;
  if (step <= 0 || n_lo > n_hi) return std::nullopt;
  // The first multiple at or above n_lo (n_lo may be negative).
  int64_t first = n_lo % step == 0 ? n_lo : n_lo + ((n_lo > 0 ? step : 0) - n_lo % step);
  if (first < n_lo) first += step;
  if (first > n_hi) return std::nullopt;
  const uint64_t n = static_cast<uint64_t>((n_hi - first) / step) + 1;
  *count = static_cast<size_t>(std::min<uint64_t>(n, max_values + 1));
  if (n > max_values) return std::nullopt;
  std::vector<Seq> alts;
  for (int64_t v = first; v <= n_hi; v += step) {
    alts.push_back(literal(text(v, k)));
    if (n_hi - v < step) break;
  }
  return b_.rule("multiples", alts);
}

}  // namespace ms::grammar

namespace ms::grammar {

namespace {

bool all_zero(const std::string& s) { return s.find_first_not_of('0') == std::string::npos; }

// The integer part and the fraction digits of a non-negative decimal.
void split(const Decimal& d, std::string& int_part, std::string& frac) {
  if (d.exp >= 0) {
    int_part = d.mantissa == "0" ? "0" : d.mantissa + std::string(static_cast<size_t>(d.exp), '0');
    frac.clear();
    return;
  }
  const size_t f = static_cast<size_t>(-d.exp);
  std::string m = d.mantissa;
  if (m.size() <= f) m.insert(0, f - m.size() + 1, '0');
  int_part = m.substr(0, m.size() - f);
  frac = m.substr(m.size() - f);
  const size_t nz = int_part.find_first_not_of('0');
  int_part = nz == std::string::npos ? "0" : int_part.substr(nz);
}

Decimal negated(Decimal d) {
  if (d.mantissa != "0") d.neg = !d.neg;
  return d;
}

}  // namespace

uint32_t NumberRanges::any_digits(int n) {
  const std::string key = "any|" + std::to_string(n);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  const uint32_t r = b_.repeat("frac-digits", {range_sym('0', '9')}, 0, n);
  memo_[key] = r;
  return r;
}

std::optional<uint32_t> NumberRanges::fraction(char kind, const std::string& lo, bool lo_excl, const std::string& hi,
                                               bool hi_excl, int n, bool empty_ok) {
  const std::string key = std::string("frac|") + kind + lo + "|" + (lo_excl ? "x" : "i") + hi + "|" +
                          (hi_excl ? "x" : "i") + std::to_string(n) + (empty_ok ? "e" : "n");
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second == UINT32_MAX ? std::nullopt : std::optional<uint32_t>(it->second);
  const bool low = kind != 'l', high = kind != 'g';
  std::vector<Seq> alts;
  // F empty is 0.
  const bool empty_fits = (!low || (all_zero(lo) && !lo_excl)) && (!high || !(hi_excl && all_zero(hi)));
  if (empty_ok && empty_fits) alts.push_back(Seq{});
  if (n > 0) {
    // An exhausted bound reads as zeros: 0.F <= 0.000... leaves only zeros.
    const char l0 = low && !lo.empty() ? lo[0] : '0', h0 = high ? (hi.empty() ? '0' : hi[0]) : '9';
    const std::string lrest = lo.empty() ? "" : lo.substr(1), hrest = hi.empty() ? "" : hi.substr(1);
    // A first digit strictly inside: any rest.
    const char from = low ? static_cast<char>(l0 + 1) : '0', to = high ? static_cast<char>(h0 - 1) : '9';
    if (from <= to) alts.push_back(Seq{range_sym(static_cast<uint8_t>(from), static_cast<uint8_t>(to)), rule_sym(any_digits(n - 1))});
    if (low && high && l0 == h0) {
      if (auto r = fraction('b', lrest, lo_excl, hrest, hi_excl, n - 1, true))
        alts.push_back(Seq{byte_sym(static_cast<uint8_t>(l0)), rule_sym(*r)});
    } else {
      if (low)
        if (auto r = fraction('g', lrest, lo_excl, "", false, n - 1, true))
          alts.push_back(Seq{byte_sym(static_cast<uint8_t>(l0)), rule_sym(*r)});
      if (high) {
        // hi empty means 0.000...: below it only zeros, which the 'l' rule of "" gives.
        if (auto r = fraction('l', "", false, hrest, hi_excl, n - 1, true))
          alts.push_back(Seq{byte_sym(static_cast<uint8_t>(h0)), rule_sym(*r)});
      }
    }
  }
  std::optional<uint32_t> out;
  if (!alts.empty()) out = b_.rule("fraction", alts);
  memo_[key] = out ? *out : UINT32_MAX;
  return out;
}

std::optional<uint32_t> NumberRanges::magnitude(const Decimal& lo, bool lo_excl, const std::optional<Decimal>& hi,
                                                bool hi_excl, int int_digits, int frac_digits) {
  std::string a_int, a_frac, b_int, b_frac;
  split(lo, a_int, a_frac);
  if (a_int.size() > static_cast<size_t>(int_digits)) return std::nullopt;
  const int64_t a = std::stoll(a_int);
  const int64_t cap = pow10(int_digits) - 1;
  int64_t b = cap;
  bool has_hi = hi.has_value();
  if (has_hi) {
    split(*hi, b_int, b_frac);
    if (b_int.size() > static_cast<size_t>(int_digits)) has_hi = false;  // past the cap: the cap bounds it
    else b = std::stoll(b_int);
  }
  if (b < a) return std::nullopt;
  // The fraction, with its point: "" or "." and 1..frac_digits digits.
  auto frac_text = [&](char kind, bool with_lo, bool with_hi) -> std::optional<Seq> {
    std::vector<Seq> alts;
    const bool le = with_lo && lo_excl, he = with_hi && hi_excl;
    const bool empty_fits = (!with_lo || (all_zero(a_frac) && !le)) && (!with_hi || !(he && all_zero(b_frac)));
    if (empty_fits) alts.push_back(Seq{});
    if (frac_digits > 0)
      if (auto r = fraction(kind, with_lo ? a_frac : "", le, with_hi ? b_frac : "", he, frac_digits, false))
        alts.push_back(literal(".") + rule_sym(*r));
    if (alts.empty()) return std::nullopt;
    return Seq{rule_sym(b_.rule("fraction-part", alts))};
  };
  std::vector<Seq> alts;
  if (a == b && has_hi) {
    if (auto f = frac_text('b', true, true)) alts.push_back(literal(std::to_string(a)) + *f);
  } else {
    if (auto f = frac_text('g', true, false)) alts.push_back(literal(std::to_string(a)) + *f);
    const int64_t mid_hi = has_hi ? b - 1 : b;
    if (a + 1 <= mid_hi)
      if (auto r = nonneg(a + 1, mid_hi, 0, int_digits))
        if (auto f = frac_text('g', false, false)) alts.push_back(Seq{rule_sym(*r)} + *f);
    if (has_hi)
      if (auto f = frac_text('l', false, true)) alts.push_back(literal(std::to_string(b)) + *f);
  }
  if (alts.empty()) return std::nullopt;
  return b_.rule("magnitude", alts);
}

std::optional<uint32_t> NumberRanges::decimal(const NumberBounds& bounds, int int_digits, int frac_digits) {
  const Decimal zero;
  std::vector<Seq> alts;
  auto below_zero = [](const Decimal& d) { return d.neg && d.mantissa != "0"; };
  // Non-negative values: from max(lo, 0) to hi.
  if (!bounds.hi || !below_zero(*bounds.hi)) {
    const bool lo_pos = bounds.lo && !below_zero(*bounds.lo);
    const bool hi_zero_excl = bounds.hi && bounds.hi->mantissa == "0" && bounds.hi_exclusive;
    if (!hi_zero_excl)
      if (auto r = magnitude(lo_pos ? *bounds.lo : zero, lo_pos && bounds.lo_exclusive, bounds.hi,
                             bounds.hi_exclusive, int_digits, frac_digits))
        alts.push_back({rule_sym(*r)});
  }
  // Negative values: magnitudes from max(-hi, 0) (0 itself excluded: no
  // "-0") to -lo.
  if (!bounds.lo || below_zero(*bounds.lo)) {
    const bool hi_neg = bounds.hi && below_zero(*bounds.hi);
    std::optional<Decimal> top;
    if (bounds.lo) top = negated(*bounds.lo);
    if (auto r = magnitude(hi_neg ? negated(*bounds.hi) : zero, hi_neg ? bounds.hi_exclusive : true, top,
                           bounds.lo_exclusive, int_digits, frac_digits))
      alts.push_back(literal("-") + rule_sym(*r));
  }
  if (alts.empty()) return std::nullopt;
  return b_.rule("number-in-range", alts);
}

uint32_t NumberRanges::multiples_of(int64_t step, int max_digits, bool negative, bool zero, bool positive) {
  // rest[l][r]: l more digits allowed, the digits so far leave remainder r.
  std::map<std::pair<int, int64_t>, uint32_t> rest;
  std::function<uint32_t(int, int64_t)> state = [&](int l, int64_t r) -> uint32_t {
    auto it = rest.find({l, r});
    if (it != rest.end()) return it->second;
    std::vector<Seq> alts;
    if (r == 0) alts.push_back(Seq{});
    if (l > 0)
      for (int d = 0; d <= 9; ++d)
        alts.push_back(Seq{byte_sym(static_cast<uint8_t>('0' + d)), rule_sym(state(l - 1, (r * 10 + d) % step))});
    const uint32_t rule = b_.rule("multiple-digits", alts);
    rest[{l, r}] = rule;
    return rule;
  };
  std::vector<Seq> first;
  for (int d = 1; d <= 9; ++d)
    first.push_back(Seq{byte_sym(static_cast<uint8_t>('0' + d)), rule_sym(state(max_digits - 1, d % step))});
  const uint32_t magnitude = b_.rule("multiple", first);
  std::vector<Seq> alts;
  if (zero) alts.push_back(literal("0"));
  if (positive) alts.push_back({rule_sym(magnitude)});
  if (negative) alts.push_back(literal("-") + rule_sym(magnitude));
  return b_.rule("multiples", alts);
}

}  // namespace ms::grammar
