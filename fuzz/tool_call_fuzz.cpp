// libFuzzer target: a model's reply through the tool-call parser
// (server/tool_call_parser.h) whole, and streamed in pieces as serve feeds
// it. Both must agree (content, and each call's name, arguments and id), and
// neither may crash or hang. Input: byte 0 picks the format (Qwen JSON, Qwen
// XML, Mistral, generic) and whether the client offered tools; byte 1 seeds the piece
// sizes (1-16 bytes); the rest is the reply. Run by scripts/fuzz.sh (clang,
// ASan+UBSan).
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "server/tool_call_parser.h"

using namespace ms::server;

namespace {

bool same(const ToolCallText& a, const ToolCallText& b) {
  if (a.content != b.content || a.calls.size() != b.calls.size()) return false;
  for (size_t i = 0; i < a.calls.size(); ++i)
    if (a.calls[i].name != b.calls[i].name || a.calls[i].arguments != b.calls[i].arguments ||
        a.calls[i].id != b.calls[i].id)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const ToolCallFormat kFormats[] = {ToolCallFormat::QwenJson, ToolCallFormat::QwenXml, ToolCallFormat::Mistral,
                                            ToolCallFormat::Generic};
  const ToolCallFormat format = kFormats[(data[0] & 0x7f) % 4];
  static const nlohmann::json kTools = nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "hot": {"type": "boolean"}}}}}])");
  const nlohmann::json tools = (data[0] & 0x80) ? kTools : nlohmann::json::array();
  uint32_t seed = data[1] * 2654435761u + 1;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);

  const ToolCallText whole = parse_tool_calls(format, tools, text);
  ToolCallParser p(format, tools);
  ToolCallText streamed;
  auto take = [&](ToolCallText o) {
    streamed.content += o.content;
    for (ParsedToolCall& c : o.calls) streamed.calls.push_back(std::move(c));
  };
  for (size_t at = 0; at < text.size();) {
    seed = seed * 1664525u + 1013904223u;
    const size_t n = 1 + (seed >> 24) % 16;
    take(p.push(text.substr(at, n)));
    at += n;
  }
  take(p.flush());
  if (!same(whole, streamed)) std::abort();  // the stream must read as the whole reply
  return 0;
}
