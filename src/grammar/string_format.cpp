#include "grammar/string_format.h"

namespace ms::grammar {

namespace {

Sym digit() { return range_sym('0', '9'); }

Sym hex_digit() {
  ByteSet s;
  for (int c = '0'; c <= '9'; ++c) s.set(static_cast<size_t>(c));
  for (int c = 'a'; c <= 'f'; ++c) s.set(static_cast<size_t>(c)), s.set(static_cast<size_t>(c - 'a' + 'A'));
  return set_sym(s);
}

uint32_t date(Builder& b) {
  // Months of 31, 30 and 28 days (29 February needs the year: left out).
  const uint32_t d31 = b.rule("day31", {Seq{byte_sym('0'), range_sym('1', '9')}, Seq{range_sym('1', '2'), digit()},
                                        Seq{byte_sym('3'), range_sym('0', '1')}});
  const uint32_t d30 = b.rule("day30", {Seq{byte_sym('0'), range_sym('1', '9')}, Seq{range_sym('1', '2'), digit()},
                                        literal("30")});
  const uint32_t d28 = b.rule("day28", {Seq{byte_sym('0'), range_sym('1', '9')}, Seq{byte_sym('1'), digit()},
                                        Seq{byte_sym('2'), range_sym('0', '8')}});
  ByteSet m31a, m30a;  // 01 03 05 07 08 / 04 06 09
  for (char c : std::string("13578")) m31a.set(static_cast<uint8_t>(c));
  for (char c : std::string("469")) m30a.set(static_cast<uint8_t>(c));
  ByteSet m31b;  // 10 12
  m31b.set('0'), m31b.set('2');
  const uint32_t month_day = b.rule(
      "month-day", {Seq{byte_sym('0'), set_sym(m31a), byte_sym('-'), rule_sym(d31)},
                    Seq{byte_sym('1'), set_sym(m31b), byte_sym('-'), rule_sym(d31)},
                    Seq{byte_sym('0'), set_sym(m30a), byte_sym('-'), rule_sym(d30)},
                    literal("11-") + rule_sym(d30), literal("02-") + rule_sym(d28)});
  return b.rule("date", {Seq{digit(), digit(), digit(), digit(), byte_sym('-'), rule_sym(month_day)}});
}

uint32_t time(Builder& b) {
  const uint32_t hour = b.rule("hour", {Seq{range_sym('0', '1'), digit()}, Seq{byte_sym('2'), range_sym('0', '3')}});
  const Seq minute = {range_sym('0', '5'), digit()};
  const uint32_t frac_digits = b.repeat("time-frac-digits", {digit()}, 1, 9);
  const uint32_t frac = b.rule("time-frac", {Seq{}, literal(".") + rule_sym(frac_digits)});
  ByteSet sign;
  sign.set('+'), sign.set('-');
  const uint32_t offset = b.rule("time-offset", {literal("Z"), Seq{set_sym(sign), rule_sym(hour), byte_sym(':')} + minute});
  return b.rule("time", {Seq{rule_sym(hour), byte_sym(':')} + minute + byte_sym(':') + minute + rule_sym(frac) +
                         rule_sym(offset)});
}

uint32_t uuid(Builder& b) {
  Seq s;
  for (int group : {8, 4, 4, 4, 12}) {
    if (!s.empty()) s.push_back(byte_sym('-'));
    for (int i = 0; i < group; ++i) s.push_back(hex_digit());
  }
  return b.rule("uuid", {s});
}

uint32_t email(Builder& b) {
  // local: dot-atoms of RFC 5322's atext (less the characters JSON or
  // shells make awkward: none of them need escaping in JSON anyway).
  ByteSet atext;
  for (int c = 'a'; c <= 'z'; ++c) atext.set(static_cast<size_t>(c)), atext.set(static_cast<size_t>(c - 'a' + 'A'));
  for (int c = '0'; c <= '9'; ++c) atext.set(static_cast<size_t>(c));
  for (char c : std::string("!#$%&'*+-/=?^_`{|}~")) atext.set(static_cast<uint8_t>(c));
  const uint32_t atom = b.repeat("email-atom", {set_sym(atext)}, 1, 32);
  const uint32_t more_atoms = b.repeat("email-atoms", Seq{byte_sym('.'), rule_sym(atom)}, 0, 3);
  // domain: labels of letters, digits and inner hyphens, two to four of them.
  ByteSet alnum;
  for (int c = 'a'; c <= 'z'; ++c) alnum.set(static_cast<size_t>(c)), alnum.set(static_cast<size_t>(c - 'a' + 'A'));
  for (int c = '0'; c <= '9'; ++c) alnum.set(static_cast<size_t>(c));
  ByteSet inner = alnum;
  inner.set('-');
  const uint32_t middle = b.repeat("label-middle", {set_sym(inner)}, 0, 30);
  const uint32_t label = b.rule("label", {Seq{set_sym(alnum)}, Seq{set_sym(alnum), rule_sym(middle), set_sym(alnum)}});
  const uint32_t more_labels = b.repeat("labels", Seq{byte_sym('.'), rule_sym(label)}, 1, 3);
  return b.rule("email", {Seq{rule_sym(atom), rule_sym(more_atoms), byte_sym('@'), rule_sym(label), rule_sym(more_labels)}});
}

uint32_t ipv4(Builder& b) {
  // 0..255 without leading zeros.
  const uint32_t octet = b.rule("octet", {Seq{digit()}, Seq{range_sym('1', '9'), digit()},
                                          Seq{byte_sym('1'), digit(), digit()},
                                          Seq{byte_sym('2'), range_sym('0', '4'), digit()},
                                          literal("25") + range_sym('0', '5')});
  return b.rule("ipv4", {Seq{rule_sym(octet), byte_sym('.'), rule_sym(octet), byte_sym('.'), rule_sym(octet),
                             byte_sym('.'), rule_sym(octet)}});
}

}  // namespace

const char* constrained_formats() { return "date, time, date-time, uuid, email, ipv4"; }

std::optional<uint32_t> string_format_rule(Builder& b, const std::string& format) {
  if (format == "date") return date(b);
  if (format == "time") return time(b);
  if (format == "date-time") return b.rule("date-time", {Seq{rule_sym(date(b)), byte_sym('T'), rule_sym(time(b))}});
  if (format == "uuid") return uuid(b);
  if (format == "email") return email(b);
  if (format == "ipv4") return ipv4(b);
  return std::nullopt;
}

}  // namespace ms::grammar
