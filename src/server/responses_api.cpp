#include "server/responses_api.h"

#include <limits>

#include "server/api_fields.h"

namespace ms::server {

using json = nlohmann::ordered_json;
using fields::bad;
using fields::find;
using fields::type_name;

// ---- ResponseStore

void ResponseStore::put(const std::string& id, Entry e) {
  const size_t n = e.messages.dump(-1, ' ', false, json::error_handler_t::replace).size() +
                   e.response.dump(-1, ' ', false, json::error_handler_t::replace).size();
  std::lock_guard lk(m_);
  if (n > lim_.max_bytes || lim_.max_entries == 0) return;
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    bytes_ -= it->second.bytes;
    by_id_.erase(it);
  }
  while (!order_.empty() && (by_id_.size() + 1 > lim_.max_entries || bytes_ + n > lim_.max_bytes)) {
    auto it = by_id_.find(order_.front());
    order_.pop_front();
    if (it == by_id_.end()) continue;  // erased before
    bytes_ -= it->second.bytes;
    by_id_.erase(it);
  }
  by_id_[id] = Held{std::move(e), n};
  order_.push_back(id);
  bytes_ += n;
  // Ids erased out of order stay in order_ until met; keep it from growing
  // without bound when clients delete a lot.
  if (order_.size() > 2 * lim_.max_entries + 16) {
    std::deque<std::string> kept;
    for (const std::string& i : order_)
      if (by_id_.count(i)) kept.push_back(i);
    order_.swap(kept);
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) const {
  std::lock_guard lk(m_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second.entry;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lk(m_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  bytes_ -= it->second.bytes;
  by_id_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard lk(m_);
  return by_id_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard lk(m_);
  return bytes_;
}

// ---- the request

namespace {

// A message's or a tool output's content: a string, or parts of which the
// text ones are joined.
std::string parts_text(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(where, std::string("must be a string or an array of content parts, not ") + type_name(c));
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!part.is_object()) bad(at, std::string("must be an object, not ") + type_name(part));
    const std::string* type = fields::string_field(part, "type", at + ".type");
    if (!type) bad(at + ".type", "is required");
    if (*type == "input_text" || *type == "output_text" || *type == "text" || *type == "refusal") {
      const char* key = *type == "refusal" ? "refusal" : "text";
      const std::string* t = fields::string_field(part, key, at + "." + key);
      if (!t) bad(at + "." + key, "is required");
      out += *t;
    } else if (*type == "input_image" || *type == "input_file" || *type == "input_audio") {
      bad(at + ".type", "is '" + *type + "'; this model reads text only");
    } else {
      bad(at + ".type", "must be input_text or output_text (got '" + *type + "')");
    }
  }
  return out;
}

// The text of a reasoning item (its content, else its summary).
std::string reasoning_text(const json& item, const std::string& where) {
  std::string out;
  for (const char* key : {"content", "summary"}) {
    const json* parts = find(item, key);
    if (!parts) continue;
    if (!parts->is_array()) bad(where + "." + key, std::string("must be an array, not ") + type_name(*parts));
    for (const json& p : *parts)
      if (p.is_object() && p.contains("text") && p["text"].is_string()) out += p["text"].get<std::string>();
    if (!out.empty()) break;
  }
  return out;
}


// `input` appended to `messages` as chat messages.
void add_input(const json& input, json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) bad("input", std::string("must be a string or an array of input items, not ") + type_name(input));
  std::string reasoning;  // a reasoning item's text, for the assistant turn that follows it
  auto assistant_turn = [&](bool merge) -> json& {
    if (merge && !messages.empty() && messages.back().value("role", "") == "assistant") return messages.back();
    messages.push_back({{"role", "assistant"}, {"content", ""}});
    return messages.back();
  };
  auto take_reasoning = [&](json& turn) {
    if (!reasoning.empty() && !turn.contains("reasoning_content")) turn["reasoning_content"] = reasoning;
    reasoning.clear();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) bad(where, std::string("must be an object, not ") + type_name(item));
    const std::string* type_p = fields::string_field(item, "type", where + ".type");
    // {"role", "content"} without a type is a message (OpenAI's "easy input message").
    const std::string type = type_p ? *type_p : item.contains("role") ? "message" : "";
    if (type == "message") {
      const std::string* role = fields::string_field(item, "role", where + ".role");
      if (!role) bad(where + ".role", "is required");
      if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer")
        bad(where + ".role", "must be one of user, assistant, system, developer (got '" + *role + "')");
      const json* content = find(item, "content");
      if (!content) bad(where + ".content", "is required");
      const std::string text = parts_text(*content, where + ".content");
      if (*role == "assistant") {
        json& turn = assistant_turn(false);
        turn["content"] = text;
        take_reasoning(turn);
      } else {
        messages.push_back({{"role", *role == "developer" ? "system" : *role}, {"content", text}});
      }
    } else if (type == "function_call") {
      const std::string* call_id = fields::string_field(item, "call_id", where + ".call_id");
      const std::string* name = fields::string_field(item, "name", where + ".name");
      const std::string* args = fields::string_field(item, "arguments", where + ".arguments");
      if (!call_id || call_id->empty()) bad(where + ".call_id", "is required");
      if (!name || !fields::valid_function_name(*name))
        bad(where + ".name", "is required: a function's name (letters, digits, '_', '-', '.', ':')");
      if (!args) bad(where + ".arguments", "is required (the call's arguments as a JSON string)");
      // A call joins the assistant turn before it (its text, or other calls).
      json& turn = assistant_turn(true);
      take_reasoning(turn);
      turn["tool_calls"].push_back(
          {{"id", *call_id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", *args}}}});
    } else if (type == "function_call_output") {
      const std::string* call_id = fields::string_field(item, "call_id", where + ".call_id");
      if (!call_id || call_id->empty()) bad(where + ".call_id", "is required");
      const json* output = find(item, "output");
      if (!output) bad(where + ".output", "is required");
      const json* call = fields::tool_call_with_id(messages, *call_id);
      if (!call)
        bad(where + ".call_id", "names no function call in the conversation ('" + call_id->substr(0, 80) +
                                    "'): send the function_call item, or the previous_response_id that made it");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", *call_id},
                          {"name", (*call)["function"]["name"]},
                          {"content", parts_text(*output, where + ".output")}});
    } else if (type == "reasoning") {
      reasoning += reasoning_text(item, where);
    } else if (type == "item_reference") {
      bad(where + ".type", "item_reference is not supported: send the item itself, or previous_response_id");
    } else if (type.empty()) {
      bad(where, "needs a 'type' (message, function_call, function_call_output, reasoning) or a 'role'");
    } else {
      bad(where + ".type", "must be message, function_call, function_call_output or reasoning (got '" + type + "')");
    }
  }
}

// Flat function tools -> chat completions' {"type", "function": {...}}.
json chat_tools(const json& tools) {
  if (!tools.is_array()) bad("tools", std::string("must be an array, not ") + type_name(tools));
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad(where, std::string("must be an object, not ") + type_name(t));
    const std::string* type = fields::string_field(t, "type", where + ".type");
    if (!type) bad(where + ".type", "is required (\"function\")");
    if (*type != "function")
      bad(where + ".type", "is '" + *type + "'; this server runs function tools only (the client runs them)");
    const std::string* name = fields::string_field(t, "name", where + ".name");
    if (!name || !fields::valid_function_name(*name))
      bad(where + ".name", "is required and may hold only letters, digits, '_', '-', '.' and ':'");
    json fn = {{"name", *name}};
    if (const std::string* d = fields::string_field(t, "description", where + ".description")) fn["description"] = *d;
    if (const json* p = find(t, "parameters")) {
      if (!p->is_object()) bad(where + ".parameters", "must be a JSON schema object");
      fn["parameters"] = *p;
    }
    if (const json* s = find(t, "strict"); s && !s->is_boolean()) bad(where + ".strict", "must be a boolean");
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

json chat_tool_choice(const json& tc) {
  if (tc.is_string()) {
    const std::string v = tc.get<std::string>();
    if (v != "none" && v != "auto" && v != "required")
      bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"name\": ...} (got '" + v + "')");
    return tc;
  }
  if (tc.is_object()) {
    const std::string* type = fields::string_field(tc, "type", "tool_choice.type");
    if (type && *type == "function") {
      const std::string* name = fields::string_field(tc, "name", "tool_choice.name");
      if (!name) bad("tool_choice.name", "is required");
      return {{"type", "function"}, {"function", {{"name", *name}}}};
    }
    if (type) bad("tool_choice.type", "must be \"function\" (got '" + *type + "'); only function tools are run here");
  }
  bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
}

// text.format -> response_format.
json chat_response_format(const json& text) {
  if (!text.is_object()) bad("text", std::string("must be an object, not ") + type_name(text));
  const json* f = find(text, "format");
  if (!f) return nullptr;
  if (!f->is_object()) bad("text.format", std::string("must be an object, not ") + type_name(*f));
  const std::string* type = fields::string_field(*f, "type", "text.format.type");
  if (!type) bad("text.format.type", "is required: text, json_object or json_schema");
  if (*type == "text") return nullptr;
  if (*type == "json_object") return {{"type", "json_object"}};
  if (*type != "json_schema") bad("text.format.type", "must be text, json_object or json_schema (got '" + *type + "')");
  const std::string* name = fields::string_field(*f, "name", "text.format.name");
  const json* schema = find(*f, "schema");
  if (!schema) bad("text.format.schema", "is required for json_schema");
  if (!schema->is_object() && !schema->is_boolean()) bad("text.format.schema", "must be a JSON schema object");
  if (const json* s = find(*f, "strict"); s && !s->is_boolean()) bad("text.format.strict", "must be a boolean");
  (void)fields::string_field(*f, "description", "text.format.description");  // checked, not used
  json js = {{"name", name ? *name : "response"}, {"schema", *schema}};
  return {{"type", "json_schema"}, {"json_schema", js}};
}

}  // namespace

ResponsesRequest parse_responses_request(const json& body, const ResponseStore& store) {
  ResponsesRequest rq;
  json chat = json::object();
  if (const std::string* m = fields::string_field(body, "model", "model")) rq.model = *m, chat["model"] = *m;
  rq.stream = fields::bool_field(body, "stream", "stream", false);
  rq.store = fields::bool_field(body, "store", "store", true);
  if (fields::bool_field(body, "background", "background", false))
    bad("background", "is not supported: this server answers while the request is open (or streams)");
  if (find(body, "conversation"))
    bad("conversation", "is not supported: continue a conversation with previous_response_id");

  // The conversation so far, then this input.
  json history = json::array();
  const std::string* prev = fields::string_field(body, "previous_response_id", "previous_response_id");
  if (prev) {
    std::optional<ResponseStore::Entry> e = store.get(*prev);
    if (!e)
      throw ApiError(404,
                     "Previous response with id '" + prev->substr(0, 100) +
                         "' not found (this server keeps its recent responses in memory only, and not those made "
                         "with store: false)",
                     "invalid_request_error", "previous_response_id", "previous_response_not_found");
    history = std::move(e->messages);
  }
  const json* input = find(body, "input");
  if (!input) bad("input", "is required: a string or an array of input items");
  add_input(*input, history);
  if (history.empty()) bad("input", "must have at least one item");

  json messages = json::array();
  const std::string* instructions = fields::string_field(body, "instructions", "instructions");
  if (instructions && !instructions->empty()) messages.push_back({{"role", "system"}, {"content", *instructions}});
  for (const json& m : history) messages.push_back(m);
  chat["messages"] = std::move(messages);
  rq.history = std::move(history);

  json echo_max = nullptr;
  if (const json* mo = find(body, "max_output_tokens")) {
    if (!mo->is_number_integer()) bad("max_output_tokens", std::string("must be an integer, not ") + type_name(*mo));
    if (mo->is_number_unsigned() ? mo->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())
                                 : (mo->get<int64_t>() < 1 || mo->get<int64_t>() > std::numeric_limits<int>::max()))
      bad("max_output_tokens", "must be a token count in 1.." + std::to_string(std::numeric_limits<int>::max()) +
                                   " (got " + mo->dump() + ")");
    chat["max_tokens"] = *mo;
    echo_max = *mo;
  }
  // Sampling: OpenAI's two, and llama-server's extensions under their chat names.
  for (const char* k : {"temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
                        "repeat_penalty", "logit_bias", "chat_template_kwargs"})
    if (const json* v = find(body, k)) chat[k] = *v;

  json tools = json::array();
  if (const json* t = find(body, "tools")) {
    chat["tools"] = chat_tools(*t);
    tools = *t;
  }
  json tool_choice = "auto";
  if (const json* tc = find(body, "tool_choice")) {
    chat["tool_choice"] = chat_tool_choice(*tc);
    tool_choice = *tc;
  }
  const bool parallel = fields::bool_field(body, "parallel_tool_calls", "parallel_tool_calls", true);
  chat["parallel_tool_calls"] = parallel;

  json text_echo = {{"format", {{"type", "text"}}}};
  if (const json* text = find(body, "text")) {
    json rf = chat_response_format(*text);
    if (!rf.is_null()) chat["response_format"] = std::move(rf);
    if (const json* f = find(*text, "format")) text_echo["format"] = *f;
  }
  json reasoning_echo = {{"effort", nullptr}, {"summary", nullptr}};
  if (const json* r = find(body, "reasoning")) {
    if (!r->is_object()) bad("reasoning", std::string("must be an object, not ") + type_name(*r));
    if (const std::string* effort = fields::string_field(*r, "effort", "reasoning.effort")) {
      chat["reasoning_effort"] = *effort;
      reasoning_echo["effort"] = *effort;
    }
    if (const std::string* s = fields::string_field(*r, "summary", "reasoning.summary")) reasoning_echo["summary"] = *s;
  }
  chat["reasoning_format"] = "separate";  // <think> text becomes a reasoning item

  json metadata = json::object();
  if (const json* md = find(body, "metadata")) {
    if (!md->is_object()) bad("metadata", std::string("must be an object of strings, not ") + type_name(*md));
    if (md->size() > 16) bad("metadata", "may have at most 16 keys (got " + std::to_string(md->size()) + ")");
    for (const auto& [k, v] : md->items()) {
      if (k.size() > 64) bad("metadata", "keys may be at most 64 characters long");
      if (!v.is_string() || v.get<std::string>().size() > 512)
        bad("metadata", "values must be strings of at most 512 characters ('" + k.substr(0, 64) + "')");
    }
    metadata = *md;
  }
  if (const std::string* tr = fields::string_field(body, "truncation", "truncation"))
    if (*tr != "disabled" && *tr != "auto") bad("truncation", "must be disabled or auto (got '" + *tr + "')");
  const std::string* user = fields::string_field(body, "user", "user");

  rq.chat_body = std::move(chat);
  rq.echo = {{"instructions", instructions ? json(*instructions) : json()},
             {"max_output_tokens", echo_max},
             {"parallel_tool_calls", parallel},
             {"previous_response_id", prev ? json(*prev) : json()},
             {"reasoning", reasoning_echo},
             {"store", rq.store},
             {"temperature", nullptr},
             {"text", text_echo},
             {"tool_choice", tool_choice},
             {"tools", tools},
             {"top_p", nullptr},
             {"truncation", "disabled"},
             {"user", user ? json(*user) : json()},
             {"metadata", metadata}};
  return rq;
}

ApiError responses_error(const ApiError& e) {
  auto rename = [](std::string s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
    return s;
  };
  std::string msg = e.what(), param = e.param;
  if (param == "max_tokens") {
    param = "max_output_tokens";
    msg = rename(msg, "'max_tokens'", "'max_output_tokens'");
  } else if (param == "response_format") {
    param = "text.format";
    msg = rename(rename(msg, "response_format.json_schema.schema", "text.format.schema"), "'response_format'",
                 "'text.format'");
  } else if (param == "messages") {
    param = "input";
  }
  return ApiError(e.status, msg, e.type, param, e.code);
}

// ---- the answer

namespace {

json usage_of(const AnswerPiece& p) {
  return {{"input_tokens", p.n_prompt},
          {"input_tokens_details", {{"cached_tokens", p.n_cached}}},
          {"output_tokens", p.n_completion},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", p.n_prompt + p.n_completion}};
}

json text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

}  // namespace

ResponsesEvents::ResponsesEvents(json echo, std::string id, int64_t created_at, std::string model) : id_(std::move(id)) {
  // Items are named after the response: resp_X -> msg_X_0, fc_X_1, ...
  item_prefix_ = id_.rfind("resp_", 0) == 0 ? id_.substr(5) : id_;
  resp_ = {{"id", id_},         {"object", "response"}, {"created_at", created_at}, {"status", "in_progress"},
           {"error", nullptr},  {"incomplete_details", nullptr}};
  resp_["instructions"] = echo.value("instructions", json());
  resp_["max_output_tokens"] = echo.value("max_output_tokens", json());
  resp_["model"] = model;
  resp_["output"] = json::array();
  for (auto it = echo.begin(); it != echo.end(); ++it)
    if (!resp_.contains(it.key())) resp_[it.key()] = it.value();
  resp_["usage"] = nullptr;
}

std::string ResponsesEvents::event(const std::string& type, json data) {
  json e = {{"type", type}, {"sequence_number", seq_++}};
  for (auto it = data.begin(); it != data.end(); ++it) e[it.key()] = std::move(it.value());
  return "event: " + type + "\ndata: " + e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::vector<std::string> ResponsesEvents::start() {
  return {event("response.created", {{"response", resp_}}), event("response.in_progress", {{"response", resp_}})};
}

void ResponsesEvents::open_item(std::vector<std::string>& out, Open kind) {
  close_item(out);
  const size_t index = resp_["output"].size();
  open_ = kind;
  open_text_.clear();
  json item;
  if (kind == Open::Message) {
    open_id_ = "msg_" + item_prefix_ + "_" + std::to_string(index);
    item = {{"id", open_id_}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"},
            {"content", json::array()}};
  } else {
    open_id_ = "rs_" + item_prefix_ + "_" + std::to_string(index);
    item = {{"id", open_id_}, {"type", "reasoning"}, {"summary", json::array()}};
  }
  // The item takes its place in the output now; it is filled in when it closes.
  resp_["output"].push_back(item);
  out.push_back(event("response.output_item.added", {{"output_index", index}, {"item", item}}));
  if (kind == Open::Message)
    out.push_back(event("response.content_part.added", {{"item_id", open_id_},
                                                        {"output_index", index},
                                                        {"content_index", 0},
                                                        {"part", text_part("")}}));
}

void ResponsesEvents::close_item(std::vector<std::string>& out, const std::string& status) {
  if (open_ == Open::None) return;
  const size_t index = resp_["output"].size() - 1;
  json& item = resp_["output"][index];
  if (open_ == Open::Message) {
    out.push_back(event("response.output_text.done", {{"item_id", open_id_},
                                                      {"output_index", index},
                                                      {"content_index", 0},
                                                      {"text", open_text_},
                                                      {"logprobs", json::array()}}));
    out.push_back(event("response.content_part.done", {{"item_id", open_id_},
                                                       {"output_index", index},
                                                       {"content_index", 0},
                                                       {"part", text_part(open_text_)}}));
    item["status"] = status;
    item["content"] = json::array({text_part(open_text_)});
  } else {
    out.push_back(event("response.reasoning_text.done",
                        {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"text", open_text_}}));
    item["content"] = json::array({{{"type", "reasoning_text"}, {"text", open_text_}}});
  }
  out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
  open_ = Open::None;
  open_text_.clear();
}

void ResponsesEvents::add_call(std::vector<std::string>& out, const AnswerCall& c) {
  close_item(out);
  const size_t index = resp_["output"].size();
  const std::string item_id = "fc_" + item_prefix_ + "_" + std::to_string(index);
  json item = {{"id", item_id}, {"type", "function_call"}, {"status", "in_progress"},
               {"arguments", ""},  {"call_id", c.id},        {"name", c.name}};
  out.push_back(event("response.output_item.added", {{"output_index", index}, {"item", item}}));
  out.push_back(event("response.function_call_arguments.delta",
                      {{"item_id", item_id}, {"output_index", index}, {"delta", c.arguments}}));
  out.push_back(event("response.function_call_arguments.done",
                      {{"item_id", item_id}, {"output_index", index}, {"name", c.name}, {"arguments", c.arguments}}));
  item["status"] = "completed";
  item["arguments"] = c.arguments;
  out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
  resp_["output"].push_back(std::move(item));
}

std::vector<std::string> ResponsesEvents::push(const AnswerPiece& p) {
  std::vector<std::string> out;
  if (finished_) return out;
  if (!p.reasoning.empty()) {
    if (open_ != Open::Reasoning) open_item(out, Open::Reasoning);
    open_text_ += p.reasoning;
    out.push_back(event("response.reasoning_text.delta", {{"item_id", open_id_},
                                                          {"output_index", resp_["output"].size() - 1},
                                                          {"content_index", 0},
                                                          {"delta", p.reasoning}}));
  }
  if (!p.content.empty()) {
    if (open_ != Open::Message) open_item(out, Open::Message);
    open_text_ += p.content;
    out.push_back(event("response.output_text.delta", {{"item_id", open_id_},
                                                       {"output_index", resp_["output"].size() - 1},
                                                       {"content_index", 0},
                                                       {"delta", p.content},
                                                       {"logprobs", json::array()}}));
  }
  for (const AnswerCall& c : p.calls) add_call(out, c);
  if (!p.done) return out;

  finished_ = true;
  if (p.finish_reason == "error" || p.finish_reason == "cancelled") {
    close_item(out, "incomplete");
    resp_["status"] = "failed";
    resp_["error"] = {{"code", "server_error"},
                      {"message", p.finish_reason == "error" ? "generation failed: " + p.error
                                                             : std::string("the server is shutting down")}};
    resp_["usage"] = usage_of(p);
    out.push_back(event("response.failed", {{"response", resp_}}));
    return out;
  }
  const bool cut = p.finish_reason == "length";
  // Nothing at all (not even a call): an empty message, so output_text reads "".
  if (open_ == Open::None && (resp_["output"].empty() || resp_["output"].back()["type"] == "reasoning"))
    open_item(out, Open::Message);
  close_item(out, cut ? "incomplete" : "completed");
  resp_["status"] = cut ? "incomplete" : "completed";
  if (cut) resp_["incomplete_details"] = {{"reason", "max_output_tokens"}};
  resp_["usage"] = usage_of(p);
  out.push_back(event(cut ? "response.incomplete" : "response.completed", {{"response", resp_}}));
  return out;
}

json ResponsesEvents::output_message() const {
  json m = {{"role", "assistant"}, {"content", ""}};
  std::string content, reasoning;
  for (const json& item : resp_["output"]) {
    const std::string type = item.value("type", "");
    if (type == "message" && item.contains("content"))
      for (const json& part : item["content"]) content += part.value("text", "");
    if (type == "reasoning" && item.contains("content"))
      for (const json& part : item["content"]) reasoning += part.value("text", "");
    if (type == "function_call")
      m["tool_calls"].push_back({{"id", item["call_id"]},
                                 {"type", "function"},
                                 {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
  }
  m["content"] = content;
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  return m;
}

}  // namespace ms::server
