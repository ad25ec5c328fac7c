// What a request asks of the answer's form and what it wants to know about
// it: response_format (json_object / json_schema: the answer is sampled
// under a grammar, grammar/json_schema.h, so it is always valid JSON of the
// schema) and logprobs / top_logprobs (OpenAI's chat shape).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace ms::server {

// response_format: null/absent or {"type": "text"}: free text (nullptr);
// {"type": "json_object"} (optionally with "schema", as llama-server takes
// it): any JSON object, or that schema; {"type": "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}}: the schema
// (strict or not: the answer follows it either way). Throws ApiError (400,
// param "response_format") for a malformed field or a schema the compiler
// refuses, with its message (the keyword and where).
std::shared_ptr<const grammar::Grammar> parse_response_format(const nlohmann::ordered_json& body);

// logprobs (boolean) and top_logprobs (0..20, needs logprobs: true) of a
// chat request: -1 when logprobs are off, else how many alternatives.
// Throws ApiError (400) naming the field. On /v1/completions (`chat`
// false) a logprobs value is refused: only the chat shape is made.
int parse_logprobs(const nlohmann::ordered_json& body, bool chat);

// One generated token's log-probability and the best alternatives, as the
// scheduler reports them (token bytes, not ids: the HTTP side has them ready).
struct LogprobEntry {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}:
// OpenAI's choice.logprobs (and a stream chunk's). A token that is not
// whole UTF-8 (part of a character) gets U+FFFD in "token"; "bytes" are exact.
nlohmann::json logprobs_json(const std::vector<LogprobEntry>& entries);

}  // namespace ms::server
