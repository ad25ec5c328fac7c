// Tool calls a model made, in OpenAI's chat-completion shape: what a
// gpt-oss (harmony) answer's messages to a recipient, or the calls
// server/tool_call_parser.h finds in other models' text, become in
// message.tool_calls (whole answers) or delta.tool_calls (streams); and how
// one request's tools, tool_choice and parallel_tool_calls are carried out.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/tool_call_parser.h"
#include "tokenizer/harmony.h"

namespace ms {
class Tokenizer;
}

namespace ms::server {

// {"id": call_id, "type": "function", "function": {"name", "arguments"}}.
// The name is the recipient less the "functions." namespace the chat
// template puts the request's tools in ("functions.get_weather" ->
// "get_weather"); other recipients (built-in tools such as
// "browser.search") keep their full name. The arguments are the model's
// text as written (OpenAI sends them as a string too).
nlohmann::json openai_tool_call(const HarmonyToolCall& call, const std::string& call_id);
nlohmann::json openai_parsed_tool_call(const ParsedToolCall& call, const std::string& call_id);

// How the model behind `tok` writes calls: the format of its chat template
// (tokenizer.chat_template), else what its vocabulary says (harmony
// markers, a <tool_call> or [TOOL_CALLS] token); and whether the format's
// opening marker is a control token, whose text the decoder must then let
// through (Mistral's [TOOL_CALLS]; Qwen's <tool_call> is ordinary text).
struct ModelToolCalls {
  ToolCallFormat format = ToolCallFormat::None;
  bool marker_is_control = false;
};
ModelToolCalls tool_calls_of(const Tokenizer& tok);

// How one chat request's tool calls are handled.
struct ToolCallPlan {
  // The parser to run over the answer; None: no parsing (no tools offered,
  // tool_choice "none", a harmony model (parsed by token), or a model whose
  // calls have no known text format).
  ToolCallFormat format = ToolCallFormat::None;
  nlohmann::json tools = nlohmann::json::array();
  // tool_choice "required" or a named function: the prompt ends with
  // prompt_suffix (a call's opening, after closing an open <think>), so the
  // model can only continue a call; the parser reads `prefill` (the call's
  // part of it) before the model's text. Empty for "auto" and for harmony.
  std::string prompt_suffix, prefill;
  bool first_only = false;  // parallel_tool_calls false: only the first call is returned
  bool render_special = false;  // the call marker is a control token (ModelToolCalls)
};

// `prompt`: the rendered chat prompt (to see whether it leaves <think> open).
ToolCallPlan plan_tool_calls(const ModelToolCalls& model, const CompletionRequest& r, const std::string& prompt);

}  // namespace ms::server
