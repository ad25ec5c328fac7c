// libFuzzer target for the chat-template engine (tokenizer/jinja.h): any
// input is template source, parsed and rendered with a small fixed chat
// context under tight Limits. It must either render or fail with ms::Error
// (a syntax error, raise_exception, a limit); a crash, a sanitizer report,
// another exception, a hang (libFuzzer's -timeout) or memory past
// -rss_limit_mb is a bug. Run with scripts/fuzz.sh; seeds (a few real
// templates and small hostile ones) are in fuzz/corpus_jinja/, and
// fuzz/jinja.dict holds the language's tokens.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/jinja.h"
#include "util/error.h"

namespace {

using ms::jinja::Json;

const Json& context() {
  static const Json ctx = Json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi <b>there</b>, what's 2+2?\nThanks."},
      {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "calc", "arguments": {"expr": "2+2", "n": [1, 2.5, null, true]}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"result\": 4}"},
      {"role": "user", "content": ["a list", {"type": "text", "text": "content parts"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "calc", "description": "Evaluates.",
               "parameters": {"type": "object", "properties": {"expr": {"type": "string"}},
                              "required": ["expr"]}}}],
    "add_generation_prompt": true,
    "enable_thinking": false,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
  return ctx;
}

// Tight, so that one input costs milliseconds and little memory.
ms::jinja::Limits limits() {
  ms::jinja::Limits lim;
  lim.max_nesting = 64;
  lim.max_call_depth = 16;
  lim.max_render_depth = 400;
  lim.max_loop_iterations = 20000;
  lim.max_output_bytes = 1 << 20;
  lim.max_value_bytes = 1 << 20;
  lim.max_built_bytes = 32 << 20;
  lim.max_render_time = std::chrono::milliseconds(1000);
  return lim;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ms::jinja::Limits lim = limits();
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  try {
    const ms::jinja::Template t(src, lim);
    volatile size_t sink = t.render(context(), std::time_t{1700000000}).size();
    (void)sink;
  } catch (const ms::Error&) {
    // Refused with a message: fine. Anything else propagates and is a finding.
  }
  return 0;
}
