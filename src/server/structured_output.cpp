#include "server/structured_output.h"

#include "grammar/json_schema.h"
#include "server/api.h"

namespace ms::server {

using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, "'" + param + "' " + what, "invalid_request_error", param);
}

std::shared_ptr<const grammar::Grammar> compile(const ojson& schema, const std::string& where) {
  try {
    return std::make_shared<const grammar::Grammar>(grammar::compile_json_schema(schema));
  } catch (const grammar::SchemaError& e) {
    throw ApiError(400, "'" + where + "': " + e.what(), "invalid_request_error", "response_format");
  }
}

// Valid UTF-8 stays as it is; other bytes become U+FFFD (a token may hold
// part of a character).
std::string utf8_text(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && n > 1) {
      // nlohmann's dump checks the rest (overlongs, surrogates); be as strict.
      const std::string one = s.substr(i, n);
      try {
        (void)nlohmann::json(one).dump();
      } catch (const nlohmann::json::exception&) {
        ok = false;
      }
    }
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

nlohmann::json bytes_of(const std::string& s) {
  nlohmann::json b = nlohmann::json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

std::shared_ptr<const grammar::Grammar> parse_response_format(const ojson& body) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return nullptr;
  const ojson& rf = *it;
  if (!rf.is_object()) bad("response_format", "must be an object such as {\"type\": \"json_object\"}");
  auto t = rf.find("type");
  if (t == rf.end() || !t->is_string())
    bad("response_format", "needs a string 'type': text, json_object or json_schema");
  const std::string type = t->get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") {
    auto s = rf.find("schema");
    if (s != rf.end() && !s->is_null()) return compile(*s, "response_format.schema");
    return std::make_shared<const grammar::Grammar>(grammar::any_json_object());
  }
  if (type == "json_schema") {
    auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object())
      bad("response_format", "of type json_schema needs an object 'json_schema' with a 'schema'");
    auto name = js->find("name");
    if (name != js->end() && !name->is_string()) bad("response_format", "json_schema.name must be a string");
    auto strict = js->find("strict");
    if (strict != js->end() && !strict->is_null() && !strict->is_boolean())
      bad("response_format", "json_schema.strict must be a boolean");
    auto s = js->find("schema");
    if (s == js->end() || s->is_null()) bad("response_format", "json_schema needs a 'schema'");
    return compile(*s, "response_format.json_schema.schema");
  }
  bad("response_format", "type must be text, json_object or json_schema (got '" + type + "')");
}

int parse_logprobs(const ojson& body, bool chat) {
  auto lp = body.find("logprobs");
  auto top = body.find("top_logprobs");
  const bool has_lp = lp != body.end() && !lp->is_null();
  const bool has_top = top != body.end() && !top->is_null();
  if (!chat) {
    if (has_lp) bad("logprobs", "is supported on /v1/chat/completions only");
    return -1;
  }
  if (has_lp && !lp->is_boolean()) bad("logprobs", "must be a boolean");
  const bool on = has_lp && lp->get<bool>();
  if (!has_top) return on ? 0 : -1;
  if (!top->is_number_integer()) bad("top_logprobs", "must be an integer in 0..20");
  const int64_t n = top->is_number_unsigned() && top->get<uint64_t>() > 20 ? 21 : top->get<int64_t>();
  if (n < 0 || n > 20) bad("top_logprobs", "must be an integer in 0..20 (got " + top->dump() + ")");
  if (!on && n > 0) bad("top_logprobs", "needs 'logprobs': true");
  return on ? static_cast<int>(n) : -1;
}

nlohmann::json logprobs_json(const std::vector<LogprobEntry>& entries) {
  nlohmann::json content = nlohmann::json::array();
  for (const LogprobEntry& e : entries) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [text, lp] : e.top)
      top.push_back({{"token", utf8_text(text)}, {"logprob", lp}, {"bytes", bytes_of(text)}});
    content.push_back(
        {{"token", utf8_text(e.token)}, {"logprob", e.logprob}, {"bytes", bytes_of(e.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

}  // namespace ms::server
