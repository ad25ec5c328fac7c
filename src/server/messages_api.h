// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens),
// translated to and from the chat completions request this server already
// runs (server/api.h), without HTTP:
//
//  - a request body becomes a chat-completions body: `system` (a string or
//    text blocks) the system message; `messages` with text, tool_use,
//    tool_result and thinking blocks the messages (an assistant's tool_use
//    blocks its tool_calls, each tool_result a tool message); `tools`
//    (name, description, input_schema), `tool_choice` (auto, any, tool,
//    none; disable_parallel_tool_use), `max_tokens` (required),
//    `stop_sequences`, `temperature` (0..1), `top_p`, `top_k`, `thinking`;
//  - the answer's pieces (server/answer_reader.h) become the message (text,
//    thinking and tool_use blocks; stop_reason end_turn, max_tokens,
//    stop_sequence or tool_use) and, streamed, the events message_start,
//    content_block_start / content_block_delta (text_delta, thinking_delta,
//    input_json_delta) / content_block_stop, message_delta (stop_reason,
//    usage), message_stop, with ping while waiting;
//  - errors have Anthropic's shape: {"type": "error", "error": {"type",
//    "message"}}.
//
// Unknown fields are ignored; a known one of the wrong type or value is a 400
// naming it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/answer_reader.h"
#include "server/api.h"

namespace ms::server {

struct MessagesRequest {
  nlohmann::ordered_json chat_body;  // the chat completions request it becomes
  std::string model;
  bool stream = false;
  // thinking {"type": "enabled"}: the model's reasoning comes back as
  // thinking blocks; otherwise it is left out of the answer.
  bool thinking = false;
};

// Checks `body` and translates it. `count_tokens`: the body of
// /v1/messages/count_tokens (no max_tokens needed). Throws ApiError (400
// naming the field).
MessagesRequest parse_messages_request(const nlohmann::ordered_json& body, bool count_tokens = false);

// An error of parse_request_body about the translated body, renamed to the
// Messages request's fields (stop -> stop_sequences).
ApiError messages_error(const ApiError& e);

// {"type": "error", "error": {"type", "message"}}: Anthropic's error
// types by HTTP status (invalid_request_error, authentication_error,
// not_found_error, request_too_large, api_error, overloaded_error...).
nlohmann::ordered_json anthropic_error_body(const ApiError& e);
const char* anthropic_error_type(int status);

// Builds the message from an answer's pieces, and the stream's events
// ("event: TYPE\ndata: JSON\n\n" each) along the way.
class MessagesEvents {
 public:
  MessagesEvents(std::string id, std::string model, bool thinking);
  // message_start (usage.input_tokens: the prompt's tokens), then a ping.
  std::vector<std::string> start(int n_prompt);
  // The events for a piece; with done, the open block's stop, message_delta
  // and message_stop (or an error event).
  std::vector<std::string> push(const AnswerPiece& p);
  static std::string ping();
  // The message: its blocks so far; stop_reason and usage once done.
  const nlohmann::ordered_json& message() const { return msg_; }
  bool finished() const { return finished_; }
  bool failed() const { return failed_; }
  // With failed(): the error a whole (non-streamed) answer is answered with.
  const ApiError& error() const { return error_; }

 private:
  enum class Open { None, Text, Thinking };
  std::string event(const std::string& type, nlohmann::ordered_json data) const;
  void open_block(std::vector<std::string>& out, Open kind);
  void close_block(std::vector<std::string>& out);

  nlohmann::ordered_json msg_;
  bool thinking_;
  Open open_ = Open::None;
  bool finished_ = false, failed_ = false;
  ApiError error_{500, ""};
};

// A tool call's arguments as the object tool_use.input holds: the JSON
// object the model wrote, or, when its text is not one, {"_raw_arguments": text}.
nlohmann::ordered_json tool_input(const std::string& arguments);

}  // namespace ms::server
