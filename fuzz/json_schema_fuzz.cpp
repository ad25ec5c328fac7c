// libFuzzer target: a client's response_format schema compiled to a grammar
// (grammar/json_schema.h), then a walk of the byte matcher driven by the
// input. Properties: compiling either succeeds or throws SchemaError /
// ms::Error (no crash, no hang); every byte the matcher offers is accepted;
// a walk that ends where the grammar may end has written one JSON value, as
// a JSON parser reads it. Input: the schema's JSON text, a NUL byte, then the
// walk's choices (one byte each). Run by scripts/fuzz.sh (clang, ASan+UBSan).
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  if (nul == std::string::npos) return 0;
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(input.substr(0, nul), nullptr, false);
  if (schema.is_discarded()) return 0;
  ms::grammar::Grammar g;
  try {
    g = ms::grammar::compile_json_schema(schema);
  } catch (const ms::grammar::SchemaError&) {
    return 0;
  } catch (const ms::Error&) {
    return 0;
  }
  ms::grammar::Matcher m(g);
  std::string text;
  for (size_t i = nul + 1; i < input.size(); ++i) {
    const uint8_t choice = static_cast<uint8_t>(input[i]);
    if (m.can_end() && (choice & 0x80)) break;  // stop here: the value is whole
    const ms::grammar::ByteSet next = m.next_bytes();
    const size_t n = next.count();
    if (n == 0) break;
    size_t k = choice % n;  // the k-th allowed byte
    int byte = 0;
    for (; byte < 256; ++byte)
      if (next[static_cast<size_t>(byte)] && k-- == 0) break;
    if (!m.advance(static_cast<uint8_t>(byte))) std::abort();  // offered, then refused
    text.push_back(static_cast<char>(byte));
  }
  if (!m.can_end()) return 0;  // the walk stopped inside the value
  if (nlohmann::ordered_json::parse(text, nullptr, false).is_discarded()) std::abort();  // not JSON
  return 0;
}
