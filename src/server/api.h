// The OpenAI request and error shapes, without HTTP: a request body (JSON
// text) becomes a CompletionRequest, or an ApiError with the status and the
// message a client sees. Unknown fields are ignored; a known field of the
// wrong type or out of range is a 400 naming the field. Sampling values are
// checked by SamplerParams::validate / GenerateParams::validate, the same
// checks `moestream run` applies to its flags.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "server/json_limits.h"

namespace ms::server {

// An error for the client: HTTP status, OpenAI's error type and code, the
// request field it is about (or empty).
struct ApiError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", "server_error", ...
  std::string code;   // "context_length_exceeded", "invalid_api_key", ... or empty
  std::string param;  // the field, e.g. "temperature", or empty
  ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = "",
           std::string code = "")
      : std::runtime_error(std::move(message)),
        status(status),
        type(std::move(type)),
        code(std::move(code)),
        param(std::move(param)) {}
  // {"error": {"message", "type", "param", "code"}}
  nlohmann::json body() const;
};

struct CompletionRequest {
  bool chat = true;              // /v1/chat/completions (messages) or /v1/completions (prompt)
  nlohmann::ordered_json messages;  // chat: the array as sent, in its order (roles checked, contents as strings)
  std::string prompt;            // completions
  std::string model;             // echoed back
  bool stream = false;
  bool include_usage = false;    // stream_options.include_usage: a last chunk with usage
  SamplerParams sampling;        // greedy when temperature is 0
  GenerateParams gen;            // n_predict from max_tokens (-1: until end of text or a full context)
  std::vector<std::string> stop;  // never emitted; at most 4 in OpenAI's API, 16 here
  bool separate_reasoning = false;  // <think>...</think> to reasoning_content
  // chat_template_kwargs (e.g. enable_thinking), plus `tools` when the request
  // offers some: what the chat template sees besides messages.
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  // response_format: the grammar the answer is sampled under (null: free
  // text) and logprobs: -1 off, else top_logprobs (0..20). server/structured_output.h
  std::shared_ptr<const grammar::Grammar> grammar;
  int top_logprobs = -1;
  // OpenAI's n: choices of the one prompt (1..kMaxChoices).
  int n_choices = 1;
  static constexpr int kMaxChoices = 8;
  // Tool calling: the tools offered (checked: each a function with a name),
  // tool_choice ("auto", "none", "required", or "function" with
  // tool_choice_name) and parallel_tool_calls. With "none" the tools do not
  // reach the template and the answer is not parsed for calls.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  std::string tool_choice = "auto";
  std::string tool_choice_name;
  bool parallel_tool_calls = true;
};

// Parses and checks a request body. `chat` selects which endpoint's fields
// are required. Throws ApiError (400) for malformed JSON, a wrong type, a value
// out of range, n != 1, an empty message list or prompt.
// The body's nesting depth and element count are checked first (JsonLimits:
// 400 beyond them), so nothing recursive ever sees a hostile shape.
CompletionRequest parse_request(const std::string& body, bool chat, const JsonLimits& limits = {});

// The two halves of parse_request, for the routes that translate their own
// request shapes into this one (server/responses_api.h, messages_api.h):
// the body checked (UTF-8, JsonLimits) and parsed into an object, and an
// already parsed chat-completions body checked into a CompletionRequest.
nlohmann::ordered_json parse_json_body(const std::string& body, const JsonLimits& limits = {});
CompletionRequest parse_request_body(const nlohmann::ordered_json& body, bool chat);

}  // namespace ms::server
