// Tool calls in a model's text: the formats the chat templates teach their
// models, turned into OpenAI's {name, arguments} as the text arrives.
//
//   qwen-json (Qwen3, Qwen2.5, QwQ, Hermes):
//       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (several in a row)
//   qwen-xml (Qwen3-Coder, Qwen3.5 / 3.6):
//       <tool_call>\n<function=f>\n<parameter=p>\nVALUE\n</parameter>\n</function>\n</tool_call>
//       VALUE is raw text; its JSON type comes from the tool's parameter schema.
//   mistral (Mixtral 8x22B, Mistral Nemo / Small):
//       [TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]
//       or the newer [TOOL_CALLS]f[ARGS]{...} (one call per marker)
//   generic (any other model; the tools are described in the system prompt,
//   server/chat.h, as llama-server's generic format does):
//       {"tool_calls": [{"name": "f", "arguments": {...}}, ...]}   (the whole answer)
//   harmony (gpt-oss) is parsed by token in tokenizer/harmony.h, not here.
//
// A call whose text is not well formed (bad JSON, a missing closing tag, a
// function the request did not offer) is not a call: its text stays content.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ms::server {

enum class ToolCallFormat { None, Harmony, QwenJson, QwenXml, Mistral, Generic };

const char* tool_call_format_name(ToolCallFormat f);

// Which format a model writes its calls in, from its chat template (what the
// template shows the model), else its vocabulary (a <tool_call> or
// [TOOL_CALLS] token; the template may be absent or say nothing of tools).
// `harmony`: the vocabulary has gpt-oss's harmony markers.
ToolCallFormat detect_tool_call_format(const std::string& chat_template, bool harmony, bool has_qwen_tool_call_token,
                                       bool has_mistral_tool_calls_token);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI sends arguments as a string)
  std::string id;         // the model's own id (Mistral writes one), else empty
};

// Text split into what the client reads as content and the calls found.
struct ToolCallText {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

// Finds calls in generated text fed piece by piece (any split, even inside a
// tag or a UTF-8 character). Content is returned as soon as it cannot be
// the start of a call: a possible opening tag, and whitespace that may be
// only the gap before a call, are held back until the next pieces decide.
class ToolCallParser {
 public:
  // `tools`: the request's tools array (OpenAI shape); a call must name one
  // of them (and qwen-xml values are typed by its parameters' schema). An
  // empty array accepts any name.
  ToolCallParser(ToolCallFormat format, nlohmann::json tools);
  ToolCallText push(const std::string& text);
  // At the end of generation: a call still open is accepted if it is whole
  // but for its closing tag, else its text is content; held whitespace is
  // dropped once some call was found (the gap after the last call).
  ToolCallText flush();
  size_t n_calls() const { return n_calls_; }

 private:
  void scan(ToolCallText& out, bool final);
  // The call starting at held_[0] (an opening marker), when its end is in
  // held_: its length and the calls in it (none when malformed).
  std::optional<size_t> call_end(bool final);
  std::optional<std::vector<ParsedToolCall>> parse_call(const std::string& text) const;
  std::optional<std::vector<ParsedToolCall>> generic_calls(const std::string& text) const;
  std::optional<ParsedToolCall> check(ParsedToolCall c) const;
  const nlohmann::json* tool(const std::string& name) const;

  ToolCallFormat format_;
  nlohmann::json tools_;
  std::string open_;  // the opening marker: <tool_call> or [TOOL_CALLS]
  std::string held_;  // text not yet returned
  std::string gap_;   // whitespace returned later, unless only a call follows
  // How far call_end has read the call at held_[0] (reset when it is taken).
  struct CallScan {
    enum Phase { Start, Name, ArgsSpace, Value } phase = Start;
    size_t pos = 0;
    int depth = 0;
    bool in_string = false, escaped = false;
  };
  CallScan call_scan_;
  size_t n_calls_ = 0;
  bool plain_ = false;  // generic: the answer began with something other than '{': all content
};

// Whole text at once (non-streamed answers).
ToolCallText parse_tool_calls(ToolCallFormat format, const nlohmann::json& tools, const std::string& text);

// A qwen-xml parameter's value as JSON, typed by its schema ({"type": ...};
// null when the tool gives none): strings stay text, numbers, booleans,
// null, objects and arrays are parsed, falling back to the text as a string
// when it does not parse as the schema's type.
nlohmann::ordered_json typed_parameter(const std::string& value, const nlohmann::json* schema);

// What the assistant turn is prefilled with so that the model can only
// continue a call (tool_choice "required", or a named function: `name`
// non-empty). Empty for formats without a text marker (harmony, none).
std::string tool_call_prefill(ToolCallFormat format, const std::string& name);

// The id a call gets in the response: Mistral's templates require nine
// alphanumerics when the call comes back in the history (the model's own id
// when it wrote one of that shape); others "call_<request>_<index>".
std::string tool_call_id(ToolCallFormat format, const std::string& request_id, size_t index,
                         const std::string& model_id = "");

}  // namespace ms::server
