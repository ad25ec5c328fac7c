#include "server/messages_api.h"

#include <limits>

#include "server/api_fields.h"
#include "server/json_limits.h"

namespace ms::server {

using json = nlohmann::ordered_json;
using fields::bad;
using fields::find;
using fields::type_name;

namespace {

// Blocks Anthropic defines that hold what a text model cannot read, or that
// belong to Anthropic's own server tools.
bool unreadable_block(const std::string& type) {
  return type == "image" || type == "document" || type == "search_result" || type == "container_upload";
}

// A string, or text blocks joined (system prompts, tool results).
std::string blocks_text(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(where, std::string("must be a string or an array of text blocks, not ") + type_name(c));
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& b = c[i];
    if (!b.is_object()) bad(at, std::string("must be an object, not ") + type_name(b));
    const std::string* type = fields::string_field(b, "type", at + ".type");
    if (!type) bad(at + ".type", "is required");
    if (unreadable_block(*type)) bad(at + ".type", "is '" + *type + "'; this model reads text only");
    if (*type != "text") bad(at + ".type", "must be \"text\" here (got '" + *type + "')");
    const std::string* t = fields::string_field(b, "text", at + ".text");
    if (!t) bad(at + ".text", "is required");
    out += *t;
  }
  return out;
}


// One Anthropic message appended to `out` as chat messages: an assistant's
// blocks as one turn (content, reasoning_content, tool_calls); a user's
// tool_result blocks as tool messages, its text as a user message, in order.
void add_message(const json& m, size_t index, json& out) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) bad(where, std::string("must be an object, not ") + type_name(m));
  const std::string* role = fields::string_field(m, "role", where + ".role");
  if (!role) bad(where + ".role", "is required");
  if (*role != "user" && *role != "assistant")
    bad(where + ".role", "must be user or assistant (got '" + *role + "'); the system prompt goes in 'system'");
  const bool assistant = *role == "assistant";
  const json* content = find(m, "content");
  if (!content) bad(where + ".content", "is required");
  if (content->is_string()) {
    out.push_back({{"role", *role}, {"content", *content}});
    return;
  }
  if (!content->is_array())
    bad(where + ".content", std::string("must be a string or an array of content blocks, not ") + type_name(*content));
  json turn = {{"role", *role}, {"content", ""}};
  std::string text, reasoning;
  auto flush_user_text = [&] {
    if (text.empty()) return;
    out.push_back({{"role", "user"}, {"content", text}});
    text.clear();
  };
  for (size_t i = 0; i < content->size(); ++i) {
    const json& b = (*content)[i];
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    if (!b.is_object()) bad(at, std::string("must be an object, not ") + type_name(b));
    const std::string* type = fields::string_field(b, "type", at + ".type");
    if (!type) bad(at + ".type", "is required");
    if (*type == "text") {
      const std::string* t = fields::string_field(b, "text", at + ".text");
      if (!t) bad(at + ".text", "is required");
      text += *t;
    } else if (*type == "tool_use") {
      if (!assistant) bad(at + ".type", "tool_use blocks belong to assistant messages");
      const std::string* id = fields::string_field(b, "id", at + ".id");
      const std::string* name = fields::string_field(b, "name", at + ".name");
      if (!id || id->empty()) bad(at + ".id", "is required");
      if (!name || !fields::valid_function_name(*name))
        bad(at + ".name", "is required: a tool's name (letters, digits, '_', '-', '.', ':')");
      const json* input = find(b, "input");
      if (input && !input->is_object()) bad(at + ".input", std::string("must be an object, not ") + type_name(*input));
      const std::string args = input ? input->dump(-1, ' ', false, json::error_handler_t::replace) : "{}";
      turn["tool_calls"].push_back(
          {{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", args}}}});
    } else if (*type == "tool_result") {
      if (assistant) bad(at + ".type", "tool_result blocks belong to user messages");
      const std::string* id = fields::string_field(b, "tool_use_id", at + ".tool_use_id");
      if (!id || id->empty()) bad(at + ".tool_use_id", "is required");
      const json* call = fields::tool_call_with_id(out, *id);
      if (!call)
        bad(at + ".tool_use_id",
            "names no tool_use block of an earlier assistant message ('" + id->substr(0, 80) + "')");
      const json* c = find(b, "content");
      std::string result = c ? blocks_text(*c, at + ".content") : "";
      if (fields::bool_field(b, "is_error", at + ".is_error", false)) result = "Error: " + result;
      flush_user_text();
      out.push_back({{"role", "tool"},
                     {"tool_call_id", *id},
                     {"name", (*call)["function"]["name"]},
                     {"content", result}});
    } else if (*type == "thinking") {
      if (!assistant) bad(at + ".type", "thinking blocks belong to assistant messages");
      const std::string* t = fields::string_field(b, "thinking", at + ".thinking");
      if (t) reasoning += *t;
    } else if (*type == "redacted_thinking") {
      // Anthropic's encrypted reasoning: nothing this model can read.
    } else if (unreadable_block(*type)) {
      bad(at + ".type", "is '" + *type + "'; this model reads text only");
    } else {
      bad(at + ".type", "must be text, tool_use, tool_result or thinking (got '" + *type + "')");
    }
  }
  if (assistant) {
    turn["content"] = text;
    if (!reasoning.empty()) turn["reasoning_content"] = reasoning;
    out.push_back(std::move(turn));
  } else {
    flush_user_text();
  }
}

json chat_tools(const json& tools) {
  if (!tools.is_array()) bad("tools", std::string("must be an array, not ") + type_name(tools));
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad(where, std::string("must be an object, not ") + type_name(t));
    if (const std::string* type = fields::string_field(t, "type", where + ".type"); type && *type != "custom")
      bad(where + ".type", "is '" + *type + "'; this server runs client tools only (no type, or \"custom\")");
    const std::string* name = fields::string_field(t, "name", where + ".name");
    if (!name || !fields::valid_function_name(*name))
      bad(where + ".name", "is required and may hold only letters, digits, '_', '-', '.' and ':'");
    const json* schema = find(t, "input_schema");
    if (!schema) bad(where + ".input_schema", "is required: the JSON schema of the tool's input");
    if (!schema->is_object()) bad(where + ".input_schema", "must be a JSON schema object");
    json fn = {{"name", *name}};
    if (const std::string* d = fields::string_field(t, "description", where + ".description")) fn["description"] = *d;
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

}  // namespace

MessagesRequest parse_messages_request(const json& body, bool count_tokens) {
  MessagesRequest rq;
  json chat = json::object();
  if (const std::string* m = fields::string_field(body, "model", "model")) rq.model = *m, chat["model"] = *m;
  rq.stream = !count_tokens && fields::bool_field(body, "stream", "stream", false);

  const json* max = find(body, "max_tokens");
  if (!count_tokens && !max) bad("max_tokens", "is required: the most tokens the answer may take");
  if (max) {
    if (!max->is_number_integer()) bad("max_tokens", std::string("must be an integer, not ") + type_name(*max));
    if (max->is_number_unsigned() ? max->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())
                                  : (max->get<int64_t>() < 1 || max->get<int64_t>() > std::numeric_limits<int>::max()))
      bad("max_tokens", "must be a token count in 1.." + std::to_string(std::numeric_limits<int>::max()) + " (got " +
                            max->dump() + ")");
    if (!count_tokens) chat["max_tokens"] = *max;
  }

  json messages = json::array();
  if (const json* sys = find(body, "system")) {
    const std::string text = blocks_text(*sys, "system");
    if (!text.empty()) messages.push_back({{"role", "system"}, {"content", text}});
  }
  const json* msgs = find(body, "messages");
  if (!msgs) bad("messages", "is required");
  if (!msgs->is_array()) bad("messages", std::string("must be an array, not ") + type_name(*msgs));
  if (msgs->empty()) bad("messages", "must have at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) add_message((*msgs)[i], i, messages);
  if (msgs->back().is_object() && msgs->back().value("role", "") == "assistant")
    bad("messages", "ends with an assistant message: continuing a prefilled answer is not supported here; end with "
                    "a user message");
  chat["messages"] = std::move(messages);

  if (const json* t = find(body, "temperature")) {
    if (!t->is_number()) bad("temperature", std::string("must be a number, not ") + type_name(*t));
    const double v = t->get<double>();
    if (!(v >= 0.0 && v <= 1.0)) bad("temperature", "must be in 0..1 (got " + t->dump() + ")");
    chat["temperature"] = *t;
  }
  // top_p and top_k are checked as chat completions checks them; seed, min_p
  // and the penalties are llama-server's extensions, under the same names.
  for (const char* k : {"top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty", "repeat_penalty",
                        "chat_template_kwargs"})
    if (const json* v = find(body, k)) chat[k] = *v;

  if (const json* s = find(body, "stop_sequences")) {
    if (!s->is_array()) bad("stop_sequences", std::string("must be an array of strings, not ") + type_name(*s));
    for (const json& x : *s)
      if (!x.is_string()) bad("stop_sequences", "must contain only strings");
    chat["stop"] = *s;  // at most 16: parse_request_body's check
  }

  if (const json* t = find(body, "tools")) chat["tools"] = chat_tools(*t);
  if (const json* tc = find(body, "tool_choice")) {
    if (!tc->is_object()) bad("tool_choice", std::string("must be an object such as {\"type\": \"auto\"}, not ") +
                                                 type_name(*tc));
    const std::string* type = fields::string_field(*tc, "type", "tool_choice.type");
    if (!type) bad("tool_choice.type", "is required: auto, any, tool or none");
    if (*type == "auto") chat["tool_choice"] = "auto";
    else if (*type == "any") chat["tool_choice"] = "required";
    else if (*type == "none") chat["tool_choice"] = "none";
    else if (*type == "tool") {
      const std::string* name = fields::string_field(*tc, "name", "tool_choice.name");
      if (!name) bad("tool_choice.name", "is required with type tool");
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
    } else {
      bad("tool_choice.type", "must be auto, any, tool or none (got '" + *type + "')");
    }
    if (fields::bool_field(*tc, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use", false))
      chat["parallel_tool_calls"] = false;
  }

  if (const json* th = find(body, "thinking")) {
    if (!th->is_object()) bad("thinking", std::string("must be an object, not ") + type_name(*th));
    const std::string* type = fields::string_field(*th, "type", "thinking.type");
    if (!type || (*type != "enabled" && *type != "disabled"))
      bad("thinking.type", "must be enabled or disabled");
    if (const json* b = find(*th, "budget_tokens"); b && !b->is_number_integer())
      bad("thinking.budget_tokens", "must be an integer");
    rq.thinking = *type == "enabled";
    // Templates that can turn thinking off (Qwen3's enable_thinking) are told;
    // the request's own chat_template_kwargs win.
    if (*type == "disabled" && (!chat.contains("chat_template_kwargs") || !chat["chat_template_kwargs"].is_object() ||
                                !chat["chat_template_kwargs"].contains("enable_thinking"))) {
      if (!chat.contains("chat_template_kwargs") || !chat["chat_template_kwargs"].is_object())
        chat["chat_template_kwargs"] = json::object();
      chat["chat_template_kwargs"]["enable_thinking"] = false;
    }
  }
  if (const json* md = find(body, "metadata"); md && !md->is_object())
    bad("metadata", std::string("must be an object, not ") + type_name(*md));
  chat["reasoning_format"] = "separate";  // <think> text: thinking blocks, or left out
  rq.chat_body = std::move(chat);
  return rq;
}

ApiError messages_error(const ApiError& e) {
  if (e.param != "stop") return e;
  std::string msg = e.what();
  if (msg.rfind("'stop'", 0) == 0) msg = "'stop_sequences'" + msg.substr(6);
  return ApiError(e.status, msg, e.type, "stop_sequences", e.code);
}

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

json anthropic_error_body(const ApiError& e) {
  return {{"type", "error"}, {"error", {{"type", anthropic_error_type(e.status)}, {"message", e.what()}}}};
}

json tool_input(const std::string& arguments) {
  try {
    check_json_limits(arguments);
    json j = json::parse(arguments);
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return {{"_raw_arguments", arguments}};
}

// ---- the answer

MessagesEvents::MessagesEvents(std::string id, std::string model, bool thinking) : thinking_(thinking) {
  msg_ = {{"id", std::move(id)},       {"type", "message"},       {"role", "assistant"},
          {"model", std::move(model)}, {"content", json::array()}, {"stop_reason", nullptr},
          {"stop_sequence", nullptr},  {"usage", {{"input_tokens", 0}, {"output_tokens", 0}}}};
}

std::string MessagesEvents::event(const std::string& type, json data) const {
  json e = {{"type", type}};
  for (auto it = data.begin(); it != data.end(); ++it) e[it.key()] = std::move(it.value());
  return "event: " + type + "\ndata: " + e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string MessagesEvents::ping() { return "event: ping\ndata: {\"type\":\"ping\"}\n\n"; }

std::vector<std::string> MessagesEvents::start(int n_prompt) {
  msg_["usage"]["input_tokens"] = n_prompt;
  return {event("message_start", {{"message", msg_}}), ping()};
}

void MessagesEvents::open_block(std::vector<std::string>& out, Open kind) {
  close_block(out);
  json block = kind == Open::Text ? json{{"type", "text"}, {"text", ""}}
                                  : json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
  out.push_back(event("content_block_start", {{"index", msg_["content"].size()}, {"content_block", block}}));
  msg_["content"].push_back(std::move(block));
  open_ = kind;
}

void MessagesEvents::close_block(std::vector<std::string>& out) {
  if (open_ == Open::None) return;
  out.push_back(event("content_block_stop", {{"index", msg_["content"].size() - 1}}));
  open_ = Open::None;
}

std::vector<std::string> MessagesEvents::push(const AnswerPiece& p) {
  std::vector<std::string> out;
  if (finished_) return out;
  if (!p.reasoning.empty() && thinking_) {
    if (open_ != Open::Thinking) open_block(out, Open::Thinking);
    json& block = msg_["content"].back();
    block["thinking"] = block["thinking"].get<std::string>() + p.reasoning;
    out.push_back(event("content_block_delta", {{"index", msg_["content"].size() - 1},
                                                {"delta", {{"type", "thinking_delta"}, {"thinking", p.reasoning}}}}));
  }
  if (!p.content.empty()) {
    if (open_ != Open::Text) open_block(out, Open::Text);
    json& block = msg_["content"].back();
    block["text"] = block["text"].get<std::string>() + p.content;
    out.push_back(event("content_block_delta", {{"index", msg_["content"].size() - 1},
                                                {"delta", {{"type", "text_delta"}, {"text", p.content}}}}));
  }
  for (const AnswerCall& c : p.calls) {
    close_block(out);
    const size_t index = msg_["content"].size();
    json input = tool_input(c.arguments);
    out.push_back(event("content_block_start",
                        {{"index", index},
                         {"content_block",
                          {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}}}}));
    out.push_back(event("content_block_delta",
                        {{"index", index},
                         {"delta", {{"type", "input_json_delta"},
                                    {"partial_json", input.dump(-1, ' ', false, json::error_handler_t::replace)}}}}));
    out.push_back(event("content_block_stop", {{"index", index}}));
    msg_["content"].push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", std::move(input)}});
  }
  if (!p.done) return out;

  finished_ = true;
  close_block(out);
  if (p.finish_reason == "error" || p.finish_reason == "cancelled") {
    failed_ = true;
    error_ = p.finish_reason == "error" ? ApiError(500, "generation failed: " + p.error, "server_error")
                                        : ApiError(503, "the server is shutting down", "server_error");
    out.push_back(event("error", {{"error", anthropic_error_body(error_)["error"]}}));
    return out;
  }
  bool called = false;
  for (const json& b : msg_["content"]) called = called || b["type"] == "tool_use";
  std::string reason = "end_turn";
  if (called) reason = "tool_use";
  else if (p.finish_reason == "length") reason = "max_tokens";
  else if (!p.stop_sequence.empty()) reason = "stop_sequence";
  msg_["stop_reason"] = reason;
  msg_["stop_sequence"] = reason == "stop_sequence" ? json(p.stop_sequence) : json();
  // Anthropic counts the prompt's cached part apart from input_tokens.
  const json usage = {{"input_tokens", p.n_prompt - p.n_cached},
                      {"output_tokens", p.n_completion},
                      {"cache_read_input_tokens", p.n_cached},
                      {"cache_creation_input_tokens", 0}};
  msg_["usage"] = usage;
  out.push_back(event("message_delta", {{"delta", {{"stop_reason", reason}, {"stop_sequence", msg_["stop_sequence"]}}},
                                        {"usage", usage}}));
  out.push_back(event("message_stop", json::object()));
  return out;
}

}  // namespace ms::server
