#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace ms::utf8 {

size_t valid_char_length(std::string_view s) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  if (p[0] < 0x80) return 1;
  utf8proc_int32_t cp = 0;
  const utf8proc_ssize_t n = utf8proc_iterate(p, static_cast<utf8proc_ssize_t>(s.size()), &cp);
  return n > 0 ? static_cast<size_t>(n) : 0;
}

size_t valid_prefix_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_char_length(s.substr(i));
    if (n == 0) break;
    i += n;
  }
  return i;
}

size_t incomplete_tail_length(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t lookback = s.size() < 3 ? s.size() : 3;
  for (size_t k = 1; k <= lookback; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[s.size() - k]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int len = sequence_length(b);
    if (len <= static_cast<int>(k)) return 0;  // complete (or not a lead byte at all)
    // The bytes seen so far must be a valid start: check by padding with the
    // smallest continuation bytes the lead allows and asking the validator.
    std::string probe(s.substr(s.size() - k));
    static const char kCont[] = "\x80\x80\x80";
    uint8_t lead = b;
    probe.append(kCont, static_cast<size_t>(len) - k);
    // Fix the second byte's lower bound for leads with a restricted range
    // (E0: A0.., F0: 90..), only when that byte is part of the padding.
    if (k == 1 && lead == 0xE0) probe[1] = static_cast<char>(0xA0);
    if (k == 1 && lead == 0xF0) probe[1] = static_cast<char>(0x90);
    return valid_char_length(probe) == static_cast<size_t>(len) ? k : 0;
  }
  return 0;
}

namespace {

void append_nfc_valid(std::string& out, std::string_view run) {
  bool ascii = true;
  for (char c : run) ascii &= static_cast<uint8_t>(c) < 0x80;
  if (ascii) {  // ASCII is already in NFC
    out.append(run);
    return;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &dst,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(dst, &std::free);
  if (n < 0) {  // cannot happen for valid input; keep the text as it was
    out.append(run);
    return;
  }
  out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
}

}  // namespace

std::string nfc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t run = valid_prefix_length(s.substr(i));
    if (run > 0) {
      append_nfc_valid(out, s.substr(i, run));
      i += run;
    }
    if (i < s.size()) out.push_back(s[i++]);  // an invalid byte, kept as is
  }
  return out;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace ms::utf8
