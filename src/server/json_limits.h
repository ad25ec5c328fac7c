// Bounds on a request body's JSON shape, checked BEFORE it is parsed, and a
// parser that keeps them while it builds the value in time linear in the text.
//
// nlohmann's parser is iterative, but copying, dumping and comparing a value
// recurse once per nesting level, and so does a chat template walking it: a
// 200 KB body nested 100,000 deep overflows the stack of whichever thread
// touches it first. A cheap, non-recursive scan of the text refuses such a
// body (and one with millions of tiny elements) with a 400 before anything
// recursive can run.
//
// nlohmann's own parser inserts each key of an ordered_json object by a linear
// search of the keys before it: an object of N keys (anywhere in a body, an
// ignored field included) costs N^2 comparisons. parse_json_bounded builds the
// same value (keys in the order sent, a repeated key's last value in its first
// place) with a hash index per object, and refuses objects with more than
// max_keys keys, so later lookups in the value stay cheap too.
#pragma once
#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ms::server {

struct JsonLimits {
  // Deepest nesting of arrays and objects. Real requests (messages, content
  // parts, tool schemas) stay under ~20; 64 leaves room for deep schemas
  // while every recursive walk stays far from the stack's end.
  size_t max_depth = 64;
  // Arrays, objects and separated elements (',' outside strings) in the whole
  // body: a cap on the work and memory a body of --max-body bytes can ask for.
  size_t max_items = 100000;
  // Keys in one object (a tool's schema has its properties, a message a few
  // fields, logit_bias up to 1024 tokens): every lookup in an object is a
  // scan of its keys.
  size_t max_keys = 2048;
};

// Throws ApiError(400), naming the limit, the value found and the byte
// offset, when `text` nests deeper or holds more items than `lim` allows.
// Says nothing about whether the text is valid JSON (the parser does that):
// valid JSON is tokenized here exactly as the parser tokenizes it.
void check_json_limits(std::string_view text, const JsonLimits& lim = {});

// check_json_limits, then the value, keys in the order sent. Throws
// ApiError(400): past a limit (naming it), or not JSON ("the request body is
// not valid JSON: " and the parser's message, ASCII only).
nlohmann::ordered_json parse_json_bounded(std::string_view text, const JsonLimits& lim = {});

}  // namespace ms::server
