// Byte counts as users write and read them: "12G", "1.5GiB", "800M", "4096".
#pragma once
#include <cstdint>
#include <string>

namespace ms {

// Parses a byte count. Suffixes K, M, G, T (optionally followed by "i", "B" or
// "iB", any case) are powers of 1024; a bare number is bytes. Throws ms::Error
// on anything else (negative, empty, unknown suffix, overflow).
uint64_t parse_bytes(const std::string& text);

// "16.1 GiB", "812.0 MiB", "512 B".
std::string format_bytes(uint64_t bytes);

}  // namespace ms
