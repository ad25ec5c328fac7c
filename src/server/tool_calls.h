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
// A model whose template has no tool-call syntax gets the generic format
// (tool_call_parser.h): with tool_choice "required" or a named function the
// answer is sampled under generic_tool_call_schema's grammar, set here as
// r.grammar (a response_format beside it is a 400: one grammar per answer).
ToolCallPlan plan_tool_calls(const ModelToolCalls& model, CompletionRequest& r, const std::string& prompt);

// The generic format's answer as a JSON schema: {"tool_calls": [call, ...]}
// (at least one; at most one when !parallel), each call {"name": N,
// "arguments": A} with N one of `tools` (only `name` when non-empty) and A
// its parameters' schema (any object where the schema compiler refuses
// them; {} for a tool without parameters).
nlohmann::ordered_json generic_tool_call_schema(const nlohmann::json& tools, const std::string& name, bool parallel);

// The system prompt's part that describes `tools` and the generic format,
// for chat templates that have no tool syntax of their own (server/chat.h).
std::string generic_tools_prompt(const nlohmann::json& tools);

}  // namespace ms::server
