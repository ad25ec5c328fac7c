#include "server/api.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "server/json_limits.h"
#include "server/structured_output.h"
#include "util/error.h"

namespace ms::server {

// Requests are read keeping the order of their objects' keys (templates
// print tool schemas with tojson in the order the client sent).
using json = nlohmann::ordered_json;

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"message", what()}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return nlohmann::json{{"error", e}};
}

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw ApiError(400, "'" + field + "' " + what, "invalid_request_error", field);
}

// A present, non-null field, or null.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& body, const char* name, double dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_number()) bad(name, std::string("must be a number, not ") + type_name(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d)) bad(name, "must be a finite number");
  return d;
}

int64_t integer(const json& body, const char* name, int64_t dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  // Past int64's range the value saturates (2^63 must not wrap to a negative
  // number); range checks then name the value as it was sent (v->dump()).
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::numeric_limits<int64_t>::max();
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {  // 16.0 is accepted as 16, 16.5 is not
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    bad(name, "must be an integer (got " + v->dump() + ")");
  }
  bad(name, std::string("must be an integer, not ") + type_name(*v));
}

bool boolean(const json& body, const char* name, bool dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_boolean()) bad(name, std::string("must be a boolean, not ") + type_name(*v));
  return v->get<bool>();
}

// A message's content: a string, or an array of parts of which the text
// parts are joined (images and audio are refused: this is a text model).
std::string content_text(const json& c, const std::string& where) {
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(where, std::string("must be a string or an array of content parts, not ") + type_name(c));
  std::string out;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad(where, "has a content part without a string 'type'");
    const std::string type = part["type"].get<std::string>();
    if (type != "text") bad(where, "has a content part of type '" + type + "'; this model reads text only");
    if (!part.contains("text") || !part["text"].is_string()) bad(where, "has a text part without a string 'text'");
    out += part["text"].get<std::string>();
  }
  return out;
}

json check_messages(const json& body) {
  const json* m = field(body, "messages");
  if (!m) throw ApiError(400, "'messages' is required", "invalid_request_error", "messages");
  if (!m->is_array()) bad("messages", std::string("must be an array, not ") + type_name(*m));
  if (m->empty()) bad("messages", "must have at least one message");
  json out = json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) bad(where, std::string("must be an object, not ") + type_name(msg));
    if (!msg.contains("role") || !msg["role"].is_string()) bad(where + ".role", "is required and must be a string");
    std::string role = msg["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad(where + ".role", "must be one of system, developer, user, assistant, tool (got '" + role + "')");
    json copy = msg;  // keep other fields (tool_calls, name, ...) for the template
    copy["role"] = role;
    copy["content"] = content_text(msg.contains("content") ? msg["content"] : json(), where + ".content");
    out.push_back(std::move(copy));
  }
  return out;
}

std::vector<std::string> check_stop(const json& body) {
  const json* s = field(body, "stop");
  std::vector<std::string> out;
  if (!s) return out;
  if (s->is_string()) {
    if (!s->get<std::string>().empty()) out.push_back(s->get<std::string>());
    return out;
  }
  if (!s->is_array()) bad("stop", std::string("must be a string or an array of strings, not ") + type_name(*s));
  if (s->size() > 16) bad("stop", "may have at most 16 strings");
  for (const json& x : *s) {
    if (!x.is_string()) bad("stop", "must contain only strings");
    if (!x.get<std::string>().empty()) out.push_back(x.get<std::string>());
  }
  return out;
}

// Well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) n = 0, cp = c;
    else if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
    else return false;
    if (n > 0 && i + n >= s.size()) return false;  // truncated at the end
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

// tools: [{"type": "function", "function": {"name", "description"?,
// "parameters"?: {...}}}, ...]; tool_choice: "none" | "auto" | "required" |
// {"type": "function", "function": {"name": N}} with N one of the tools.
void check_tools(const json& body, CompletionRequest& r) {
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", std::string("must be an array, not ") + type_name(*tools));
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) bad(where, std::string("must be an object, not ") + type_name(t));
      if (t.contains("type") && t["type"] != "function")
        bad(where + ".type", "must be \"function\" (got " + t["type"].dump() + ")");
      if (!t.contains("function") || !t["function"].is_object()) bad(where + ".function", "is required and must be an object");
      const json& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
        bad(where + ".function.name", "is required and must be a non-empty string");
      for (char c : fn["name"].get<std::string>())
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' && c != ':')
          bad(where + ".function.name", "may hold only letters, digits, '_', '-', '.' and ':' (got " + fn["name"].dump() + ")");
      if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object())
        bad(where + ".function.parameters", "must be a JSON schema object");
    }
    r.tools = *tools;
  }
  r.parallel_tool_calls = boolean(body, "parallel_tool_calls", true);
  const json* tc = field(body, "tool_choice");
  if (!tc) return;
  if (tc->is_string()) {
    r.tool_choice = tc->get<std::string>();
    if (r.tool_choice != "none" && r.tool_choice != "auto" && r.tool_choice != "required")
      bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}} (got '" +
                             r.tool_choice + "')");
  } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
             (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
    r.tool_choice = "function";
    r.tool_choice_name = (*tc)["function"]["name"].get<std::string>();
    bool offered = false;
    for (const json& t : r.tools) offered = offered || t["function"]["name"] == r.tool_choice_name;
    if (!offered) bad("tool_choice", "names the function '" + r.tool_choice_name + "', which is not in 'tools'");
  } else {
    bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (r.tool_choice == "required" && r.tools.empty()) bad("tool_choice", "is 'required' but no 'tools' are given");
}

}  // namespace

json parse_json_body(const std::string& text, const JsonLimits& limits) {
  if (!valid_utf8(text)) throw ApiError(400, "the request body is not valid UTF-8");
  // Bounded (depth, elements, keys per object) and linear in the text, before anything recursive touches it.
  const json body = parse_json_bounded(text, limits);
  if (!body.is_object())
    throw ApiError(400, std::string("the request body must be a JSON object, not ") + type_name(body));
  return body;
}

CompletionRequest parse_request(const std::string& text, bool chat, const JsonLimits& limits) {
  return parse_request_body(parse_json_body(text, limits), chat);
}

CompletionRequest parse_request_body(const json& body, bool chat) {
  CompletionRequest r;
  r.chat = chat;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad("model", "must be a string");
    r.model = m->get<std::string>();
  }
  if (chat) {
    r.messages = check_messages(body);
  } else {
    const json* p = field(body, "prompt");
    if (!p) throw ApiError(400, "'prompt' is required", "invalid_request_error", "prompt");
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (!p->is_string()) bad("prompt", "must be a string (one prompt per request)");
    r.prompt = p->get<std::string>();
    if (r.prompt.empty()) bad("prompt", "must not be empty");
  }

  const auto n_choices = integer(body, "n", 1);
  if (n_choices < 1 || n_choices > CompletionRequest::kMaxChoices)
    bad("n", "must be in 1.." + std::to_string(CompletionRequest::kMaxChoices));
  r.n_choices = static_cast<int>(n_choices);
  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "must be an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }

  // max_completion_tokens is the newer name; either may be given.
  const char* max_name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int64_t max_tokens = integer(body, max_name, -1);
  if (max_tokens < -1 || max_tokens > std::numeric_limits<int>::max())
    bad(max_name, "must be -1 (until end of text) or a token count in 0.." +
                      std::to_string(std::numeric_limits<int>::max()) + " (got " + field(body, max_name)->dump() + ")");
  r.gen.n_predict = static_cast<int>(max_tokens);
  // llama.cpp's extension, for benchmarks: keep going past end-of-text tokens.
  r.gen.stop_at_eog = !boolean(body, "ignore_eos", false);

  SamplerParams& sp = r.sampling;
  sp.temperature = static_cast<float>(number(body, "temperature", sp.temperature));
  sp.top_p = static_cast<float>(number(body, "top_p", sp.top_p));
  const int64_t top_k = integer(body, "top_k", sp.top_k);
  sp.top_k = top_k > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max()
                                                     : static_cast<int>(std::max<int64_t>(top_k, -1));
  sp.min_p = static_cast<float>(number(body, "min_p", sp.min_p));
  sp.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0));
  sp.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0));
  sp.repeat_penalty = static_cast<float>(number(body, "repeat_penalty", 1.0));
  if (const json* s = field(body, "seed")) {
    if (!s->is_number_integer()) bad("seed", std::string("must be an integer, not ") + type_name(*s));
    sp.seed = s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
  } else {
    sp.seed = std::random_device{}();
  }
  if (const json* b = field(body, "logit_bias"); b && !b->is_null()) {
    if (!b->is_object()) bad("logit_bias", std::string("must be an object of token ids to numbers, not ") + type_name(*b));
    if (b->size() > SamplerParams::kMaxLogitBias)
      bad("logit_bias", "may name at most " + std::to_string(SamplerParams::kMaxLogitBias) + " tokens (got " +
                            std::to_string(b->size()) + ")");
    for (const auto& [key, value] : b->items()) {
      // Token ids as OpenAI writes them: decimal, no sign or leading zeros
      // (so no two keys name one token).
      const bool canonical = !key.empty() && key.size() <= 10 && (key == "0" || key[0] != '0') &&
                             key.find_first_not_of("0123456789") == std::string::npos;
      const long long id = canonical ? std::stoll(key) : -1;
      if (!canonical || id > std::numeric_limits<int32_t>::max())
        bad("logit_bias", "keys must be token ids (decimal integers), not \"" + key.substr(0, 40) + "\"");
      if (!value.is_number())
        bad("logit_bias", std::string("values must be numbers in [-100, 100], not ") + type_name(value));
      const double v = value.get<double>();
      if (!(v >= -100.0 && v <= 100.0)) bad("logit_bias", "values must be in [-100, 100] (token " + key + ")");
      sp.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
    }
  }
  // Which field a range error is about: the checks name the value, the
  // client needs the field.
  try {
    sp.validate();
  } catch (const Error& e) {
    const std::string m = e.what();
    std::string param;
    if (m.find("temperature") != std::string::npos) param = "temperature";
    else if (m.find("top-k") != std::string::npos) param = "top_k";
    else if (m.find("top-p") != std::string::npos) param = "top_p";
    else if (m.find("min-p") != std::string::npos) param = "min_p";
    else if (m.find("presence") != std::string::npos) param = "presence_penalty";
    else if (m.find("frequency") != std::string::npos) param = "frequency_penalty";
    else if (m.find("repetition") != std::string::npos) param = "repeat_penalty";
    throw ApiError(400, m, "invalid_request_error", param);
  }
  try {
    r.gen.validate();
  } catch (const Error& e) {
    throw ApiError(400, std::string("'max_tokens': ") + e.what(), "invalid_request_error", "max_tokens");
  }
  r.stop = check_stop(body);

  if (const json* rf = field(body, "reasoning_format")) {
    if (!rf->is_string()) bad("reasoning_format", "must be a string: none or separate");
    const std::string v = rf->get<std::string>();
    if (v == "separate" || v == "deepseek" || v == "parsed") r.separate_reasoning = true;
    else if (v != "none") bad("reasoning_format", "must be none or separate (got '" + v + "')");
  }
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "must be an object");
    r.template_kwargs = *kw;
  }
  // OpenAI's reasoning_effort ("low", "medium", "high"): the templates that
  // know it (gpt-oss's) read it as a variable; chat_template_kwargs wins.
  if (const json* re = field(body, "reasoning_effort")) {
    if (!re->is_string()) bad("reasoning_effort", std::string("must be a string such as \"low\", \"medium\" or \"high\", not ") + type_name(*re));
    if (!r.template_kwargs.contains("reasoning_effort")) r.template_kwargs["reasoning_effort"] = *re;
  }
  // Tool definitions go to the template; the model's calls come back as
  // tool_calls (server/tool_call_parser.h, tool_calls.h).
  check_tools(body, r);
  if (!r.tools.empty() && r.tool_choice != "none") r.template_kwargs["tools"] = r.tools;
  r.grammar = parse_response_format(body);
  r.top_logprobs = parse_logprobs(body, chat);
  return r;
}

}  // namespace ms::server
