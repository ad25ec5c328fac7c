// Small UTF-8 helpers for the tokenizer (validation, splitting into valid
// runs, NFC through utf8proc). Text is bytes; invalid sequences are never
// "repaired" silently here, callers decide what to do with them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ms::utf8 {

// Length of the sequence a lead byte announces (1..4), or 0 for a byte that
// cannot start a sequence (a continuation byte or 0xF8..0xFF).
inline int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte, or overlong 0xC0/0xC1
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

// Number of bytes of a valid, complete code point at the start of `s`, or 0
// when `s` starts with an invalid or truncated sequence (or is empty).
size_t valid_char_length(std::string_view s);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t valid_prefix_length(std::string_view s);

// Number of bytes at the end of `s` that form the start of a multi-byte
// character that is not complete yet but could still become valid (0..3).
size_t incomplete_tail_length(std::string_view s);

// Unicode NFC of `s`. Invalid stretches are kept byte for byte; only the
// valid runs around them are normalised. ASCII is returned unchanged quickly.
std::string nfc(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` to `out`.
void append(std::string& out, uint32_t cp);

}  // namespace ms::utf8
