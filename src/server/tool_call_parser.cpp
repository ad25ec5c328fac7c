#include "server/tool_call_parser.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "server/json_limits.h"

namespace ms::server {

using ojson = nlohmann::ordered_json;

namespace {

const std::string kQwenOpen = "<tool_call>";
const std::string kQwenClose = "</tool_call>";
const std::string kMistralOpen = "[TOOL_CALLS]";
const std::string kMistralArgs = "[ARGS]";

// JSON as text; bytes that are not UTF-8 (which serve's detokenizer never
// passes, but the parser's callers may) become U+FFFD instead of an exception.
std::string json_text(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// JSON text the model wrote, parsed, or nothing. Its shape is bounded first
// (a model can write anything, 10,000 '[' included) as request bodies are.
std::optional<ojson> parse_json(const std::string& text) {
  try {
    return parse_json_bounded(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// {"name": "f", "arguments": {...}} (arguments may also come as a string
// holding a JSON object, or be absent for a call without parameters).
std::optional<ParsedToolCall> call_from_json(const ojson& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ParsedToolCall c;
  c.name = j["name"].get<std::string>();
  ojson args = ojson::object();
  if (j.contains("arguments") && !j["arguments"].is_null()) {
    args = j["arguments"];
    if (args.is_string()) {
      auto parsed = parse_json(args.get<std::string>());
      if (!parsed) return std::nullopt;
      args = *parsed;
    }
  }
  if (!args.is_object()) return std::nullopt;
  c.arguments = json_text(args);
  if (j.contains("id") && j["id"].is_string()) c.id = j["id"].get<std::string>();
  return c;
}

// The schema's types, in the order to try them: a "type" string or array;
// none when the schema gives no type.
std::vector<std::string> schema_types(const nlohmann::json* schema) {
  std::vector<std::string> out;
  if (!schema || !schema->is_object() || !schema->contains("type")) return out;
  const nlohmann::json& t = (*schema)["type"];
  if (t.is_string()) out.push_back(t.get<std::string>());
  if (t.is_array())
    for (const auto& x : t)
      if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::None: return "none";
    case ToolCallFormat::Harmony: return "harmony";
    case ToolCallFormat::QwenJson: return "qwen-json";
    case ToolCallFormat::QwenXml: return "qwen-xml";
    case ToolCallFormat::Mistral: return "mistral";
    case ToolCallFormat::Generic: return "generic";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(const std::string& tmpl, bool harmony, bool has_qwen_token,
                                       bool has_mistral_token) {
  if (harmony) return ToolCallFormat::Harmony;
  const bool qwen_tag = tmpl.find(kQwenOpen) != std::string::npos;
  if (qwen_tag && tmpl.find("<function=") != std::string::npos) return ToolCallFormat::QwenXml;
  if (qwen_tag) return ToolCallFormat::QwenJson;
  if (tmpl.find(kMistralOpen) != std::string::npos) return ToolCallFormat::Mistral;
  if (has_qwen_token) return ToolCallFormat::QwenJson;
  if (has_mistral_token) return ToolCallFormat::Mistral;
  return ToolCallFormat::None;
}

nlohmann::ordered_json typed_parameter(const std::string& value, const nlohmann::json* schema) {
  const std::vector<std::string> types = schema_types(schema);
  if (types.empty()) {
    // No type: JSON when it reads as JSON (42, true, {...}), else the text.
    if (auto j = parse_json(value)) return *j;
    return value;
  }
  bool string_ok = false;
  for (const std::string& t : types) {
    if (t == "string") {
      string_ok = true;
      continue;  // after the stricter types: ["integer", "string"] reads "7" as 7
    }
    if (t == "boolean") {
      if (value == "true" || value == "True") return true;
      if (value == "false" || value == "False") return false;
      continue;
    }
    if (t == "null") {
      if (value == "null" || value == "None") return nullptr;
      continue;
    }
    auto j = parse_json(value);
    if (!j) continue;
    if ((t == "integer" && j->is_number_integer()) || (t == "number" && j->is_number()) ||
        (t == "object" && j->is_object()) || (t == "array" && j->is_array()))
      return *j;
  }
  (void)string_ok;  // a string type, or nothing parsed as the schema asks: the text as written
  return value;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, nlohmann::json tools)
    : format_(format), tools_(tools.is_array() ? std::move(tools) : nlohmann::json::array()) {
  open_ = format_ == ToolCallFormat::Mistral ? kMistralOpen : kQwenOpen;
}

const nlohmann::json* ToolCallParser::tool(const std::string& name) const {
  for (const auto& t : tools_) {
    const nlohmann::json& fn = t.contains("function") ? t["function"] : t;
    if (fn.is_object() && fn.contains("name") && fn["name"].is_string() && fn["name"].get<std::string>() == name)
      return &fn;
  }
  return nullptr;
}

std::optional<ParsedToolCall> ToolCallParser::check(ParsedToolCall c) const {
  if (c.name.empty()) return std::nullopt;
  if (!tools_.empty() && !tool(c.name)) return std::nullopt;  // not a function the client offered
  return c;
}

std::optional<size_t> ToolCallParser::call_end(bool final) {
  // Each piece resumes where the last stopped (call_scan_), so a call costs
  // its length once, not once per piece.
  CallScan& k = call_scan_;
  const std::optional<size_t> open_to_end = final ? std::optional<size_t>(held_.size()) : std::nullopt;
  // A marker not found yet may still begin in its length - 1 last bytes.
  auto resume_before_tail = [&](const std::string& marker) {
    k.pos = std::max(k.pos, held_.size() - std::min(held_.size(), marker.size() - 1));
  };
  if (format_ != ToolCallFormat::Mistral) {
    const size_t close = held_.find(kQwenClose, std::max(k.pos, open_.size()));
    if (close != std::string::npos) return close + kQwenClose.size();
    resume_before_tail(kQwenClose);
    return open_to_end;
  }
  if (k.phase == CallScan::Start) {  // spaces, then the JSON value or name[ARGS]{...}
    k.pos = std::max(k.pos, open_.size());
    while (k.pos < held_.size() && is_space(held_[k.pos])) ++k.pos;
    if (k.pos == held_.size()) return open_to_end;
    k.phase = held_[k.pos] == '[' || held_[k.pos] == '{' ? CallScan::Value : CallScan::Name;
  }
  if (k.phase == CallScan::Name) {
    const size_t a = held_.find(kMistralArgs, k.pos);
    if (a == std::string::npos) {
      resume_before_tail(kMistralArgs);
      return open_to_end;
    }
    k.pos = a + kMistralArgs.size();
    k.phase = CallScan::ArgsSpace;
  }
  if (k.phase == CallScan::ArgsSpace) {
    while (k.pos < held_.size() && is_space(held_[k.pos])) ++k.pos;
    if (k.pos == held_.size()) return open_to_end;
    if (held_[k.pos] != '{') return k.pos;  // malformed: up to here is the failed call
    k.phase = CallScan::Value;
  }
  // The JSON value's end (one past its closing bracket), tracking strings
  // and escapes.
  for (; k.pos < held_.size(); ++k.pos) {
    const char c = held_[k.pos];
    if (k.in_string) {
      if (k.escaped) k.escaped = false;
      else if (c == '\\') k.escaped = true;
      else if (c == '"') k.in_string = false;
      continue;
    }
    if (c == '"') k.in_string = true;
    else if (c == '[' || c == '{') ++k.depth;
    else if ((c == ']' || c == '}') && --k.depth == 0) return k.pos + 1;
  }
  return open_to_end;
}

std::optional<std::vector<ParsedToolCall>> ToolCallParser::parse_call(const std::string& text) const {
  std::string body = text.substr(open_.size());
  std::vector<ParsedToolCall> out;
  if (format_ == ToolCallFormat::Mistral) {
    const std::string b = trim(body);
    if (b.empty()) return std::nullopt;
    if (b[0] == '[' || b[0] == '{') {
      auto j = parse_json(b);
      if (!j) return std::nullopt;
      const ojson list = j->is_array() ? *j : ojson::array({*j});
      if (list.empty()) return std::nullopt;
      for (const ojson& item : list) {
        auto c = call_from_json(item);
        if (!c || !(c = check(*c))) return std::nullopt;
        out.push_back(*c);
      }
      return out;
    }
    const size_t a = b.find(kMistralArgs);
    if (a == std::string::npos) return std::nullopt;
    ParsedToolCall c;
    c.name = trim(b.substr(0, a));
    auto args = parse_json(b.substr(a + kMistralArgs.size()));
    if (!args || !args->is_object()) return std::nullopt;
    c.arguments = json_text(*args);
    auto checked = check(c);
    if (!checked) return std::nullopt;
    out.push_back(*checked);
    return out;
  }
  if (ends_with(body, kQwenClose)) body.resize(body.size() - kQwenClose.size());
  body = trim(body);
  if (format_ == ToolCallFormat::QwenJson) {
    auto j = parse_json(body);
    if (!j) return std::nullopt;
    auto c = call_from_json(*j);
    if (!c || !(c = check(*c))) return std::nullopt;
    c->id.clear();
    out.push_back(*c);
    return out;
  }
  // qwen-xml: <function=NAME> (<parameter=P>VALUE</parameter>)* </function>
  static const std::string kFn = "<function=", kFnEnd = "</function>", kParam = "<parameter=",
                           kParamEnd = "</parameter>";
  if (body.rfind(kFn, 0) != 0 || !ends_with(body, kFnEnd)) return std::nullopt;
  const size_t name_end = body.find('>');
  ParsedToolCall c;
  c.name = trim(body.substr(kFn.size(), name_end - kFn.size()));
  if (c.name.find_first_of("<\n") != std::string::npos) return std::nullopt;
  const nlohmann::json* fn = tool(c.name);
  const nlohmann::json* props = fn && fn->contains("parameters") && (*fn)["parameters"].is_object() &&
                                        (*fn)["parameters"].contains("properties")
                                    ? &(*fn)["parameters"]["properties"]
                                    : nullptr;
  ojson args = ojson::object();
  size_t i = name_end + 1;
  const size_t stop = body.size() - kFnEnd.size();
  for (;;) {
    while (i < stop && is_space(body[i])) ++i;
    if (i == stop) break;
    if (body.compare(i, kParam.size(), kParam) != 0) return std::nullopt;
    const size_t pname_end = body.find('>', i);
    if (pname_end == std::string::npos || pname_end >= stop) return std::nullopt;
    const std::string pname = trim(body.substr(i + kParam.size(), pname_end - i - kParam.size()));
    const size_t vend = body.find(kParamEnd, pname_end + 1);
    if (pname.empty() || vend == std::string::npos || vend > stop) return std::nullopt;
    std::string value = body.substr(pname_end + 1, vend - pname_end - 1);
    // The template writes a newline on each side of the value.
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    const nlohmann::json* schema =
        props && props->is_object() && props->contains(pname) ? &(*props)[pname] : nullptr;
    args[pname] = typed_parameter(value, schema);
    i = vend + kParamEnd.size();
  }
  c.arguments = json_text(args);
  auto checked = check(c);
  if (!checked) return std::nullopt;
  out.push_back(*checked);
  return out;
}

void ToolCallParser::scan(ToolCallText& out, bool final) {
  // Content goes out but for its trailing whitespace, which waits in gap_:
  // if only a call follows it, it was the gap before the call.
  // Linear in the text: a long run of whitespace grows gap_ once.
  auto content = [&](const std::string& text) {
    size_t keep = text.size();
    while (keep > 0 && is_space(text[keep - 1])) --keep;
    if (keep == 0) {
      gap_ += text;
      return;
    }
    out.content += gap_;
    out.content.append(text, 0, keep);
    gap_.assign(text, keep);
  };
  for (;;) {
    if (held_.rfind(open_, 0) == 0) {
      const std::optional<size_t> end = call_end(final);
      if (!end) return;  // the call is still arriving
      const std::string text = held_.substr(0, *end);
      held_.erase(0, *end);
      call_scan_ = CallScan{};
      if (auto calls = parse_call(text)) {
        gap_.clear();
        for (ParsedToolCall& c : *calls) out.calls.push_back(std::move(c));
        n_calls_ += calls->size();
      } else {
        content(text);  // not a call after all: the model's text as written
      }
      continue;
    }
    const size_t at = held_.find(open_);
    if (at != std::string::npos) {
      content(held_.substr(0, at));
      held_.erase(0, at);
      continue;
    }
    // The longest tail that may be the start of the opening marker waits.
    size_t hold = 0;
    if (!final)
      for (size_t n = std::min(held_.size(), open_.size() - 1); n > 0; --n)
        if (held_.compare(held_.size() - n, n, open_, 0, n) == 0) {
          hold = n;
          break;
        }
    content(held_.substr(0, held_.size() - hold));
    held_.erase(0, held_.size() - hold);
    return;
  }
}

ToolCallText ToolCallParser::push(const std::string& text) {
  ToolCallText out;
  if (format_ == ToolCallFormat::None || format_ == ToolCallFormat::Harmony || plain_) {
    out.content = text;
    return out;
  }
  held_ += text;
  if (format_ == ToolCallFormat::Generic) {
    // The calls are the whole answer, one JSON object: an answer that begins
    // otherwise is text, passed on as it comes; one that begins with '{' is
    // held to the end.
    size_t i = 0;
    while (i < held_.size() && is_space(held_[i])) ++i;
    if (i < held_.size() && held_[i] != '{') {
      plain_ = true;
      out.content = std::move(held_);
      held_.clear();
    }
    return out;
  }
  scan(out, false);
  return out;
}

std::optional<std::vector<ParsedToolCall>> ToolCallParser::generic_calls(const std::string& text) const {
  auto j = parse_json(trim(text));
  if (!j || !j->is_object()) return std::nullopt;
  ojson list;
  if (j->size() == 1 && j->contains("tool_calls") && (*j)["tool_calls"].is_array()) list = (*j)["tool_calls"];
  else if (j->size() == 1 && j->contains("tool_call")) list = ojson::array({(*j)["tool_call"]});
  else return std::nullopt;
  if (list.empty()) return std::nullopt;
  std::vector<ParsedToolCall> out;
  for (const ojson& item : list) {
    auto c = call_from_json(item);
    if (!c || !(c = check(*c))) return std::nullopt;
    c->id.clear();
    out.push_back(*c);
  }
  return out;
}

ToolCallText ToolCallParser::flush() {
  ToolCallText out;
  if (format_ == ToolCallFormat::Generic) {
    if (auto calls = generic_calls(held_)) {
      n_calls_ += calls->size();
      out.calls = std::move(*calls);
    } else {
      out.content = held_;
    }
    held_.clear();
    return out;
  }
  scan(out, true);
  if (n_calls_ == 0) out.content += gap_;
  gap_.clear();
  return out;
}

ToolCallText parse_tool_calls(ToolCallFormat format, const nlohmann::json& tools, const std::string& text) {
  ToolCallParser p(format, tools);
  ToolCallText out = p.push(text);
  ToolCallText tail = p.flush();
  out.content += tail.content;
  for (ParsedToolCall& c : tail.calls) out.calls.push_back(std::move(c));
  return out;
}

std::string tool_call_prefill(ToolCallFormat format, const std::string& name) {
  const std::string quoted = json_text(ojson(name));
  switch (format) {
    case ToolCallFormat::QwenJson:
      return name.empty() ? "<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ";
    case ToolCallFormat::QwenXml:
      return name.empty() ? "<tool_call>\n<function=" : "<tool_call>\n<function=" + name + ">\n";
    case ToolCallFormat::Mistral:
      return name.empty() ? kMistralOpen : kMistralOpen + "[{\"name\": " + quoted + ", \"arguments\": ";
    default: return "";
  }
}

std::string tool_call_id(ToolCallFormat format, const std::string& request_id, size_t index,
                         const std::string& model_id) {
  if (format != ToolCallFormat::Mistral) return "call_" + request_id + "_" + std::to_string(index);
  bool alnum9 = model_id.size() == 9;
  for (char c : model_id) alnum9 = alnum9 && std::isalnum(static_cast<unsigned char>(c));
  if (alnum9) return model_id;
  // Nine alphanumerics from the request id and the index (FNV-1a): unique
  // within the response, and the same for the same call.
  uint64_t h = 1469598103934665603ull;
  for (char c : request_id + "#" + std::to_string(index)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) {
    id += kAlnum[h % 62];
    h /= 62;
    if (h == 0) h = 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i);
  }
  return id;
}

}  // namespace ms::server
