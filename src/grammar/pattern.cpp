#include "grammar/pattern.h"

#include <bitset>
#include <cctype>
#include <optional>
#include <vector>

namespace ms::grammar {

namespace {

using Ascii = std::bitset<128>;

Ascii ascii_range(int lo, int hi) {
  Ascii s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return s;
}
Ascii digit_set() { return ascii_range('0', '9'); }
Ascii word_set() { return ascii_range('0', '9') | ascii_range('a', 'z') | ascii_range('A', 'Z') | ascii_range('_', '_'); }
Ascii space_set() {
  Ascii s;
  for (char c : std::string(" \t\n\v\f\r")) s.set(static_cast<size_t>(c));
  return s;
}

// Appends `cp` (a code point) as UTF-8.
void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// One character as it appears inside a JSON string.
std::string json_char(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
  }
  if (cp < 0x20) {
    static const char* hex = "0123456789abcdef";
    return std::string("\\u00") + hex[cp >> 4] + hex[cp & 15];
  }
  std::string out;
  put_utf8(out, cp);
  return out;
}

class PatternCompiler {
 public:
  PatternCompiler(Builder& b, std::string_view p, uint32_t any_char, int64_t max_count)
      : b_(b), p_(p), any_char_(any_char), max_count_(max_count) {}

  uint32_t run() {
    std::vector<Seq> alts;
    for (;;) {
      bool start = false, end = false;
      if (peek('^')) {
        ++i_;
        start = true;
      }
      Seq seq = concat(true, &end);
      if (!start) seq = Seq{rule_sym(any_string())} + seq;
      if (!end) seq = seq + rule_sym(any_string());
      alts.push_back(seq);
      if (i_ >= p_.size()) break;
      if (p_[i_] == '|') {
        ++i_;
        continue;
      }
      fail("unbalanced ')'");
    }
    return b_.rule("pattern", alts);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::string shown(p_.substr(0, 80));
    if (p_.size() > 80) shown += "...";
    throw PatternError("'" + shown + "': " + what + " (at offset " + std::to_string(i_) + ")");
  }
  bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }

  uint32_t any_string() {
    if (!any_string_) any_string_ = b_.repeat("pattern-any", {rule_sym(any_char_)}, 0, -1);
    return *any_string_;
  }

  // The rule of one character out of `set` (ASCII), as JSON writes it.
  uint32_t set_rule(const Ascii& set) {
    if (set.none()) fail("a class that matches no character");
    ByteSet plain;
    std::vector<Seq> alts;
    for (uint32_t c = 0; c < 128; ++c) {
      if (!set[c]) continue;
      if (c >= 0x20 && c != '"' && c != '\\') plain.set(c);
      else alts.push_back(literal(json_char(c)));
    }
    if (plain.any()) alts.insert(alts.begin(), Seq{set_sym(plain)});
    return b_.rule("pattern-class", alts);
  }

  // \xHH / \uHHHH: the code point; i_ is past the letter.
  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k, ++i_) {
      if (i_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) fail("a \\x or \\u escape needs hex digits");
      const char c = p_[i_];
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    return v;
  }

  // After a backslash: a class escape into `set` (true), or one code point.
  bool escape(Ascii& set, uint32_t& cp, bool in_class) {
    if (i_ >= p_.size()) fail("a pattern may not end with a backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': set = digit_set(); return true;
      case 'D': set = ~digit_set(); return true;
      case 'w': set = word_set(); return true;
      case 'W': set = ~word_set(); return true;
      case 's': set = space_set(); return true;
      case 'S': set = ~space_set(); return true;
      case 't': cp = '\t'; return false;
      case 'n': cp = '\n'; return false;
      case 'r': cp = '\r'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0':
        if (i_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_]))) fail("octal escapes are not supported");
        cp = 0;
        return false;
      case 'x': cp = hex(2); return false;
      case 'u':
        if (peek('{')) fail("\\u{...} escapes are not supported");
        cp = hex(4);
        if (cp >= 0xD800 && cp <= 0xDFFF) fail("surrogate \\u escapes are not supported");
        return false;
      case 'b':
        if (in_class) {
          cp = '\b';
          return false;
        }
        fail("word boundaries (\\b) are not supported");
      case 'B': fail("word boundaries (\\B) are not supported");
      case 'p':
      case 'P': fail("Unicode property escapes (\\p{...}) are not supported");
      case 'c': fail("control escapes (\\cX) are not supported");
      case 'k': fail("named backreferences (\\k<...>) are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') fail("backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(c))) fail(std::string("the escape \\") + c + " is not supported");
    if (static_cast<unsigned char>(c) >= 0x80) fail("an escaped non-ASCII character is not supported");
    cp = static_cast<unsigned char>(c);  // escaped punctuation: itself
    return false;
  }

  // [...] ; i_ is past the '['.
  uint32_t char_class() {
    bool negate = false;
    if (peek('^')) {
      negate = true;
      ++i_;
    }
    Ascii set;
    // ECMA: a ']' closes the class even first ("[]" matches nothing, "[^]" anything).
    for (;;) {
      if (i_ >= p_.size()) fail("an unclosed '['");
      if (p_[i_] == ']') {
        ++i_;
        break;
      }
      uint32_t lo;
      if (!class_atom(set, lo)) continue;
      if (peek('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi;
        Ascii dummy;
        if (!class_atom(dummy, hi)) fail("a range in a class ends with a class escape");
        if (hi < lo) fail("a range in a class goes backwards");
        for (uint32_t c = lo; c <= hi; ++c) set.set(c);
      } else {
        set.set(lo);
      }
    }
    if (negate) set = ~set;
    return set_rule(set);
  }
  // One member of a class: false when it was a class escape (merged into set).
  bool class_atom(Ascii& set, uint32_t& cp) {
    const unsigned char c = static_cast<unsigned char>(p_[i_]);
    if (c >= 0x80) fail("non-ASCII characters inside a class are not supported");
    ++i_;
    if (c != '\\') {
      cp = c;
      return true;
    }
    Ascii esc;
    if (escape(esc, cp, true)) {
      set |= esc;
      return false;
    }
    if (cp >= 0x80) fail("non-ASCII characters inside a class are not supported");
    return true;
  }

  // An atom as a sequence (a literal's bytes, or one rule).
  Seq atom() {
    const unsigned char c = static_cast<unsigned char>(p_[i_]);
    if (c == '(') {
      // Groups nest by recursion here: bounded, so a pattern of 100,000 '('
      // is an error, not a stack overflow.
      if (++depth_ > kMaxGroupDepth) fail("groups nest deeper than " + std::to_string(kMaxGroupDepth));
      ++i_;
      if (peek('?')) {
        ++i_;
        if (peek(':')) {
          ++i_;
        } else if (peek('<') && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos) fail("an unclosed group name");
          i_ = close + 1;
        } else {
          fail("lookaround and other (?...) groups are not supported");
        }
      }
      const uint32_t r = alternation();
      if (!peek(')')) fail("an unclosed '('");
      ++i_;
      --depth_;
      return {rule_sym(r)};
    }
    if (c == '[') {
      ++i_;
      return {rule_sym(char_class())};
    }
    if (c == '.') {
      ++i_;
      Ascii s;
      s.set();
      s.reset('\n');
      s.reset('\r');
      return {rule_sym(set_rule(s))};
    }
    if (c == '\\') {
      ++i_;
      Ascii set;
      uint32_t cp;
      if (escape(set, cp, false)) return {rule_sym(set_rule(set))};
      return literal(json_char(cp));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    if (c == ')') fail("unbalanced ')'");
    if (c == ']' || c == '}') {
      ++i_;
      return literal(std::string(1, static_cast<char>(c)));
    }
    if (c < 0x80) {
      ++i_;
      return literal(json_char(c));
    }
    // A UTF-8 character, copied as it is.
    const size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i_ + n > p_.size()) fail("the pattern is not valid UTF-8");
    Seq s = literal(p_.substr(i_, n));
    i_ += n;
    return s;
  }

  int64_t number() {
    if (i_ >= p_.size() || !std::isdigit(static_cast<unsigned char>(p_[i_]))) fail("a {n,m} count needs digits");
    int64_t v = 0;
    while (i_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_]))) {
      v = v * 10 + (p_[i_++] - '0');
      if (v > max_count_) fail("counts above " + std::to_string(max_count_) + " are not supported");
    }
    return v;
  }

  // Reads a quantifier after an atom, if any: {min, max} (max -1: unbounded).
  std::optional<std::pair<int64_t, int64_t>> quantifier() {
    if (i_ >= p_.size()) return std::nullopt;
    std::pair<int64_t, int64_t> q;
    const char c = p_[i_];
    if (c == '*') q = {0, -1};
    else if (c == '+') q = {1, -1};
    else if (c == '?') q = {0, 1};
    else if (c == '{') {
      // {n}, {n,}, {n,m}; a '{' that starts none of them is a literal in ECMA's
      // web syntax, which is refused here rather than guessed.
      ++i_;
      q.first = number();
      q.second = q.first;
      if (peek(',')) {
        ++i_;
        q.second = peek('}') ? -1 : number();
      }
      if (!peek('}')) fail("a '{' count is not closed");
      if (q.second >= 0 && q.second < q.first) fail("a {n,m} count with m below n");
    } else {
      return std::nullopt;
    }
    ++i_;
    if (peek('?')) ++i_;  // lazy: the same strings match
    if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '{' || p_[i_] == '?'))
      fail("a quantifier after a quantifier");
    return q;
  }

  // A sequence up to '|' or ')' (or the end). At the top level a '$' right
  // before those ends the alternative anchored (*end).
  Seq concat(bool top, bool* end) {
    Seq seq;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' || p_[i_] == '^') {
        if (top && p_[i_] == '$' && (i_ + 1 == p_.size() || p_[i_ + 1] == '|')) {
          ++i_;
          *end = true;
          break;
        }
        fail(std::string("'") + p_[i_] + "' is supported only at the start ('^') or end ('$') of the pattern");
      }
      Seq a = atom();
      if (auto q = quantifier()) {
        Seq item = a.size() == 1 && a[0].is_rule ? a : Seq{rule_sym(b_.rule("pattern-item", {a}))};
        seq.push_back(rule_sym(b_.repeat("pattern-repeat", item, q->first, q->second)));
      } else {
        seq = seq + a;
      }
    }
    return seq;
  }

  uint32_t alternation() {
    std::vector<Seq> alts;
    for (;;) {
      bool end = false;
      alts.push_back(concat(false, &end));
      if (!peek('|')) break;
      ++i_;
    }
    return b_.rule("pattern-group", alts);
  }

  Builder& b_;
  std::string_view p_;
  size_t i_ = 0;
  uint32_t any_char_;
  int64_t max_count_;
  std::optional<uint32_t> any_string_;
  static constexpr int kMaxGroupDepth = 64;
  int depth_ = 0;
};

}  // namespace

uint32_t pattern_rule(Builder& b, std::string_view pattern, uint32_t any_char, int64_t max_count) {
  return PatternCompiler(b, pattern, any_char, max_count).run();
}

}  // namespace ms::grammar
