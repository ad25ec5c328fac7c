// OpenAI's Responses API (POST /v1/responses), translated to and from the
// chat completions request this server already runs (server/api.h), without
// HTTP:
//
//  - a request body becomes a chat-completions body: `instructions` the
//    system message; `input` (a string, or message / function_call /
//    function_call_output / reasoning items) the messages, after the stored
//    conversation of `previous_response_id`; flat function `tools`,
//    `tool_choice`, `max_output_tokens`, `temperature`, `top_p`,
//    `text.format` (json_object, json_schema: the answer is sampled under
//    the schema), `reasoning.effort`;
//  - the answer's pieces (server/answer_reader.h) become the response object
//    (reasoning, message and function_call output items) and, streamed, the
//    events: response.created, response.in_progress, then per item
//    output_item.added, content_part.added, output_text.delta...,
//    output_text.done, content_part.done, output_item.done (function calls:
//    function_call_arguments.delta / .done; reasoning: reasoning_text.delta /
//    .done), and response.completed (response.incomplete when
//    max_output_tokens cut it, response.failed on an error);
//  - ResponseStore keeps recent conversations for previous_response_id and
//    GET /v1/responses/{id}, bounded in count and bytes.
//
// Unknown fields are ignored; a known one of the wrong type or value is a 400
// naming it (param as OpenAI names it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/answer_reader.h"
#include "server/api.h"

namespace ms::server {

struct ResponseStoreLimits {
  size_t max_entries = 1024;
  size_t max_bytes = 64u << 20;  // the entries' JSON text together
};

// Recent responses: each one's whole conversation (as chat messages, the
// instructions left out, as OpenAI does) and its response object. Oldest
// first out once a bound is passed; an entry larger than max_bytes alone is
// not kept. Thread-safe.
class ResponseStore {
 public:
  struct Entry {
    nlohmann::ordered_json messages;  // the conversation, its answer included
    nlohmann::ordered_json response;  // the response object as sent
  };
  explicit ResponseStore(ResponseStoreLimits lim = {}) : lim_(lim) {}
  void put(const std::string& id, Entry e);
  std::optional<Entry> get(const std::string& id) const;
  bool erase(const std::string& id);
  size_t size() const;
  size_t bytes() const;

 private:
  struct Held {
    Entry entry;
    size_t bytes = 0;
  };
  ResponseStoreLimits lim_;
  mutable std::mutex m_;
  std::map<std::string, Held> by_id_;
  std::deque<std::string> order_;  // ids, oldest first (erased ids are skipped when met)
  size_t bytes_ = 0;
};

struct ResponsesRequest {
  nlohmann::ordered_json chat_body;  // the chat completions request it becomes
  nlohmann::ordered_json history;    // its messages less the instructions (what the store keeps)
  // What the response object repeats of the request (instructions, tools,
  // tool_choice, text, max_output_tokens, ...), in OpenAI's order.
  nlohmann::ordered_json echo;
  std::string model;
  bool stream = false;
  bool store = true;
};

// Checks `body` and translates it. Throws ApiError: 400 naming the field;
// 404 (code previous_response_not_found) for a previous_response_id the
// store does not hold.
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body, const ResponseStore& store);

// An error of parse_request_body about the translated body, renamed to the
// Responses request's fields (max_tokens -> max_output_tokens,
// response_format -> text.format, messages -> input).
ApiError responses_error(const ApiError& e);

// Builds the response object from an answer's pieces, and the stream's
// events ("event: TYPE\ndata: JSON\n\n" each) along the way.
class ResponsesEvents {
 public:
  ResponsesEvents(nlohmann::ordered_json echo, std::string id, int64_t created_at, std::string model);
  // response.created and response.in_progress.
  std::vector<std::string> start();
  // The events for a piece; with done, the open item's closing and
  // response.completed / incomplete / failed.
  std::vector<std::string> push(const AnswerPiece& p);
  // The response object: in progress until a done piece, then final.
  const nlohmann::ordered_json& response() const { return resp_; }
  bool finished() const { return finished_; }
  // "completed", "incomplete", "failed" (or "in_progress").
  std::string status() const { return resp_["status"].get<std::string>(); }
  // The output as one assistant chat message (reasoning_content, content,
  // tool_calls), to continue the conversation from.
  nlohmann::ordered_json output_message() const;

 private:
  enum class Open { None, Reasoning, Message };
  std::string event(const std::string& type, nlohmann::ordered_json data);
  void open_item(std::vector<std::string>& out, Open kind);
  void close_item(std::vector<std::string>& out, const std::string& status = "completed");
  void add_call(std::vector<std::string>& out, const AnswerCall& c);

  nlohmann::ordered_json resp_;
  std::string id_, item_prefix_;
  Open open_ = Open::None;
  std::string open_id_, open_text_;
  int64_t seq_ = 0;
  bool finished_ = false;
};

}  // namespace ms::server
