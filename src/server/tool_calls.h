// Tool calls a model made, in OpenAI's chat-completion shape: what a
// gpt-oss (harmony) answer's messages to a recipient become in
// message.tool_calls (whole answers) or delta.tool_calls (streams).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/harmony.h"

namespace ms::server {

// {"id": call_id, "type": "function", "function": {"name", "arguments"}}.
// The name is the recipient less the "functions." namespace the chat
// template puts the request's tools in ("functions.get_weather" ->
// "get_weather"); other recipients (built-in tools such as
// "browser.search") keep their full name. The arguments are the model's
// text as written (OpenAI sends them as a string too).
nlohmann::json openai_tool_call(const HarmonyToolCall& call, const std::string& call_id);

}  // namespace ms::server
