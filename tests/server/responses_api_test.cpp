// OpenAI's Responses API translated without HTTP (server/responses_api.h):
// requests into chat completions bodies (and then CompletionRequests),
// the answer's pieces into the response object and the stream's events,
// the store behind previous_response_id and its bounds, and the errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/responses_api.h"

namespace ms::server {
namespace {

using json = nlohmann::ordered_json;

ResponsesRequest parse(const json& body, const ResponseStore& store = ResponseStore()) {
  return parse_responses_request(body, store);
}

// The 400 (or other) error a body gets, with its param.
ApiError error_of(const json& body, const ResponseStore& store = ResponseStore()) {
  try {
    parse(body, store);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return ApiError(0, "");
}

// A stream's events as (type, data) pairs, checking the SSE framing.
std::vector<std::pair<std::string, json>> events_of(const std::vector<std::string>& sse) {
  std::vector<std::pair<std::string, json>> out;
  for (const std::string& e : sse) {
    EXPECT_EQ(e.rfind("event: ", 0), 0u) << e;
    const size_t nl = e.find('\n');
    const std::string type = e.substr(7, nl - 7);
    EXPECT_EQ(e.compare(nl + 1, 6, "data: "), 0) << e;
    EXPECT_EQ(e.substr(e.size() - 2), "\n\n");
    const json data = json::parse(e.substr(nl + 7, e.size() - nl - 9));
    EXPECT_EQ(data["type"], type);
    out.emplace_back(type, data);
  }
  return out;
}

std::vector<std::string> types_of(const std::vector<std::pair<std::string, json>>& evs) {
  std::vector<std::string> t;
  for (const auto& e : evs) t.push_back(e.first);
  return t;
}

AnswerPiece text_piece(const std::string& content, const std::string& reasoning = "") {
  AnswerPiece p;
  p.content = content;
  p.reasoning = reasoning;
  return p;
}

AnswerPiece done_piece(const std::string& reason = "stop") {
  AnswerPiece p;
  p.done = true;
  p.finish_reason = reason;
  p.n_prompt = 12;
  p.n_cached = 4;
  p.n_completion = 7;
  return p;
}

TEST(ResponsesApi, StringInputAndInstructions) {
  const ResponsesRequest rq = parse({{"model", "m"},
                                     {"instructions", "Be brief."},
                                     {"input", "Hi"},
                                     {"max_output_tokens", 50},
                                     {"temperature", 0.5},
                                     {"top_p", 0.9},
                                     {"stream", true}});
  EXPECT_TRUE(rq.stream);
  EXPECT_TRUE(rq.store);
  EXPECT_EQ(rq.model, "m");
  const json& msgs = rq.chat_body["messages"];
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0], json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(msgs[1], json({{"role", "user"}, {"content", "Hi"}}));
  // The stored history leaves the instructions out (as OpenAI does).
  ASSERT_EQ(rq.history.size(), 1u);
  EXPECT_EQ(rq.history[0]["role"], "user");
  const CompletionRequest r = parse_request_body(rq.chat_body, true);
  EXPECT_EQ(r.gen.n_predict, 50);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.separate_reasoning) << "<think> text becomes a reasoning item";
  EXPECT_EQ(rq.echo["instructions"], "Be brief.");
  EXPECT_EQ(rq.echo["max_output_tokens"], 50);
}

TEST(ResponsesApi, ItemsBecomeChatMessages) {
  const json input = json::parse(R"([
    {"role": "developer", "content": "Use tools."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                     {"type": "input_text", "text": "in Paris?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need the tool."}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
    {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "21 C"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]}
  ])");
  const ResponsesRequest rq = parse({{"input", input}});
  const json& m = rq.chat_body["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump(1);
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "Use tools."}}));
  EXPECT_EQ(m[1], json({{"role", "user"}, {"content", "Weather in Paris?"}}));
  // The text, the reasoning before it and both calls are one assistant turn.
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "Need the tool.");
  ASSERT_EQ(m[2]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[2]["tool_calls"][0], json::parse(R"({"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})"));
  EXPECT_EQ(m[3], json({{"role", "tool"}, {"tool_call_id", "call_1"}, {"name", "get_weather"}, {"content", "21 C"}}));
  EXPECT_EQ(m[4]["name"], "get_time");
  EXPECT_EQ(m[4]["content"], "noon");
  const CompletionRequest r = parse_request_body(rq.chat_body, true);  // chat completions takes it
  EXPECT_EQ(r.messages.size(), 5u);
}

TEST(ResponsesApi, ToolsToolChoiceAndFormat) {
  const json tools = json::parse(R"([{"type": "function", "name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}])");
  const ResponsesRequest rq = parse({{"input", "x"},
                                     {"tools", tools},
                                     {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
                                     {"parallel_tool_calls", false}});
  const json& t = rq.chat_body["tools"][0];
  EXPECT_EQ(t["type"], "function");
  EXPECT_EQ(t["function"]["name"], "get_weather");
  EXPECT_EQ(t["function"]["description"], "Weather");
  EXPECT_EQ(t["function"]["parameters"], tools[0]["parameters"]);
  const CompletionRequest r = parse_request_body(rq.chat_body, true);
  EXPECT_EQ(r.tool_choice, "function");
  EXPECT_EQ(r.tool_choice_name, "get_weather");
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(r.template_kwargs.contains("tools"));
  EXPECT_EQ(rq.echo["tools"], tools) << "the response repeats the tools as sent";

  for (const char* choice : {"none", "auto", "required"})
    EXPECT_EQ(parse_request_body(parse({{"input", "x"}, {"tools", tools}, {"tool_choice", choice}}).chat_body, true)
                  .tool_choice,
              choice);

  const json schema = json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  const ResponsesRequest f =
      parse({{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}, {"name", "n"}, {"schema", schema}}}}}});
  EXPECT_NE(parse_request_body(f.chat_body, true).grammar, nullptr) << "the answer is sampled under the schema";
  EXPECT_EQ(f.echo["text"]["format"]["type"], "json_schema");
  EXPECT_NE(parse_request_body(parse({{"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}}).chat_body, true)
                .grammar,
            nullptr);
  EXPECT_EQ(parse_request_body(parse({{"input", "x"}, {"text", {{"format", {{"type", "text"}}}}}}).chat_body, true)
                .grammar,
            nullptr);
  EXPECT_EQ(parse({{"input", "x"}, {"reasoning", {{"effort", "low"}}}}).chat_body["reasoning_effort"], "low");
}

TEST(ResponsesApi, RefusesBadFieldsNamingThem) {
  struct Case {
    json body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"model", "m"}}, "input"},
      {{{"input", 5}}, "input"},
      {{{"input", json::array()}}, "input"},
      {{{"input", json::array({{{"type", "message"}, {"role", "robot"}, {"content", "x"}}})}}, "input[0].role"},
      {{{"input", json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_image"}, {"image_url", "u"}}})}}})}},
       "input[0].content[0].type"},
      {{{"input", json::array({{{"type", "function_call_output"}, {"call_id", "nope"}, {"output", "x"}}})}},
       "input[0].call_id"},
      {{{"input", json::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}}})}}, "input[0].arguments"},
      {{{"input", json::array({{{"type", "item_reference"}, {"id", "x"}}})}}, "input[0].type"},
      {{{"input", json::array({{{"type", "web_search_call"}}})}}, "input[0].type"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "web_search"}}})}}, "tools[0].type"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "function"}, {"name", "a b"}}})}}, "tools[0].name"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "function"}, {"name", "f"}, {"parameters", "x"}}})}},
       "tools[0].parameters"},
      {{{"input", "x"}, {"tool_choice", "sometimes"}}, "tool_choice"},
      {{{"input", "x"}, {"tool_choice", {{"type", "file_search"}}}}, "tool_choice.type"},
      {{{"input", "x"}, {"max_output_tokens", 0}}, "max_output_tokens"},
      {{{"input", "x"}, {"max_output_tokens", "many"}}, "max_output_tokens"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}}, "text.format.type"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}, {"name", "n"}}}}}}, "text.format.schema"},
      {{{"input", "x"}, {"metadata", {{"k", 1}}}}, "metadata"},
      {{{"input", "x"}, {"instructions", 3}}, "instructions"},
      {{{"input", "x"}, {"store", "yes"}}, "store"},
      {{{"input", "x"}, {"background", true}}, "background"},
      {{{"input", "x"}, {"truncation", "middle"}}, "truncation"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump() << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.param.substr(0, c.param.find('['))), std::string::npos) << e.what();
  }
  // Unknown fields are ignored, as chat completions does.
  EXPECT_NO_THROW(parse({{"input", "x"}, {"service_tier", "auto"}, {"include", json::array()}, {"whatever", 1}}));
}

TEST(ResponsesApi, ChatErrorsAreRenamedToThisApisFields) {
  // Checks made by parse_request_body on the translated body name this API's fields.
  auto renamed = [](const json& body) {
    try {
      parse_request_body(parse(body).chat_body, true);
    } catch (const ApiError& e) {
      return responses_error(e);
    }
    ADD_FAILURE() << "accepted: " << body.dump();
    return ApiError(0, "");
  };
  ApiError e = renamed({{"input", "x"}, {"temperature", -1}});
  EXPECT_EQ(e.param, "temperature");
  e = renamed({{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}, {"schema", {{"type", "bogus"}}}}}}}});
  EXPECT_EQ(e.param, "text.format");
  EXPECT_EQ(std::string(e.what()).find("response_format"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("text.format.schema"), std::string::npos) << e.what();
  const json tools = json::array({{{"type", "function"}, {"name", "f"}}});
  e = renamed({{"input", "x"}, {"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "g"}}}});
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_EQ(responses_error(ApiError(400, "'max_tokens' must be ...", "invalid_request_error", "max_tokens")).param,
            "max_output_tokens");
}

TEST(ResponsesApi, PreviousResponseContinuesTheStoredConversation) {
  ResponseStore store;
  ResponseStore::Entry e;
  e.messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                            {{"role", "assistant"},
                             {"content", ""},
                             {"tool_calls", json::array({{{"id", "call_9"},
                                                          {"type", "function"},
                                                          {"function", {{"name", "get_weather"}, {"arguments", "{}"}}}}})}}});
  e.response = {{"id", "resp_1"}};
  store.put("resp_1", e);
  const ResponsesRequest rq = parse({{"previous_response_id", "resp_1"},
                                     {"instructions", "New rules."},
                                     {"input", json::array({{{"type", "function_call_output"},
                                                             {"call_id", "call_9"},
                                                             {"output", "21 C"}}})}},
                                    store);
  const json& m = rq.chat_body["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0]["content"], "New rules.");
  EXPECT_EQ(m[1]["content"], "Weather in Paris?");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["name"], "get_weather") << "the call's name is found in the stored turn";
  EXPECT_EQ(rq.history.size(), 3u);
  EXPECT_EQ(rq.echo["previous_response_id"], "resp_1");

  const ApiError missing = error_of({{"previous_response_id", "resp_404"}, {"input", "x"}}, store);
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.param, "previous_response_id");
  EXPECT_EQ(missing.code, "previous_response_not_found");
}

TEST(ResponsesApi, StoreIsBoundedInCountAndBytes) {
  ResponseStoreLimits lim;
  lim.max_entries = 3;
  lim.max_bytes = 2000;
  ResponseStore store(lim);
  auto entry = [](size_t n) {
    ResponseStore::Entry e;
    e.messages = json::array({{{"role", "user"}, {"content", std::string(n, 'x')}}});
    e.response = json::object();
    return e;
  };
  for (int i = 0; i < 5; ++i) store.put("r" + std::to_string(i), entry(10));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_FALSE(store.get("r0"));
  EXPECT_FALSE(store.get("r1"));
  EXPECT_TRUE(store.get("r4"));
  // Bytes: a large entry pushes the oldest out; one past the whole bound is not kept.
  store.put("big", entry(1500));
  EXPECT_LE(store.bytes(), lim.max_bytes);
  EXPECT_TRUE(store.get("big"));
  EXPECT_FALSE(store.get("r2"));
  store.put("huge", entry(5000));
  EXPECT_FALSE(store.get("huge"));
  EXPECT_LE(store.bytes(), lim.max_bytes);
  EXPECT_TRUE(store.erase("big"));
  EXPECT_FALSE(store.erase("big"));
  EXPECT_FALSE(store.get("big"));
  // Many puts and erases keep the store within its bounds.
  for (int i = 0; i < 1000; ++i) {
    store.put("x" + std::to_string(i), entry(10));
    if (i % 2) store.erase("x" + std::to_string(i));
  }
  EXPECT_LE(store.size(), lim.max_entries);
  EXPECT_LE(store.bytes(), lim.max_bytes);
}

TEST(ResponsesApi, TextEventsInOrder) {
  const ResponsesRequest rq = parse({{"input", "Hi"}, {"instructions", "I"}});
  ResponsesEvents ev(rq.echo, "resp_abc", 1700000000, "m");
  std::vector<std::string> sse = ev.start();
  for (const std::string& s : {"Hel", "lo!"})
    for (std::string& e : ev.push(text_piece(s))) sse.push_back(std::move(e));
  for (std::string& e : ev.push(done_piece())) sse.push_back(std::move(e));
  const auto evs = events_of(sse);
  const std::vector<std::string> want = {"response.created",           "response.in_progress",
                                         "response.output_item.added", "response.content_part.added",
                                         "response.output_text.delta", "response.output_text.delta",
                                         "response.output_text.done",  "response.content_part.done",
                                         "response.output_item.done",  "response.completed"};
  EXPECT_EQ(types_of(evs), want);
  for (size_t i = 0; i < evs.size(); ++i) EXPECT_EQ(evs[i].second["sequence_number"], i);
  EXPECT_EQ(evs[0].second["response"]["status"], "in_progress");
  EXPECT_EQ(evs[0].second["response"]["output"], json::array());
  const std::string item_id = evs[2].second["item"]["id"];
  EXPECT_EQ(item_id.rfind("msg_", 0), 0u);
  EXPECT_EQ(evs[4].second["item_id"], item_id);
  EXPECT_EQ(evs[4].second["delta"], "Hel");
  EXPECT_EQ(evs[6].second["text"], "Hello!");
  EXPECT_EQ(evs[8].second["item"]["status"], "completed");
  const json& r = evs.back().second["response"];
  EXPECT_EQ(r, ev.response());
  EXPECT_EQ(r["id"], "resp_abc");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["instructions"], "I");
  EXPECT_EQ(r["model"], "m");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hello!");
  EXPECT_EQ(r["usage"]["input_tokens"], 12);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(r["usage"]["output_tokens"], 7);
  EXPECT_EQ(r["usage"]["total_tokens"], 19);
  EXPECT_TRUE(ev.finished());
  EXPECT_TRUE(ev.push(text_piece("late")).empty()) << "nothing after the end";
}

TEST(ResponsesApi, ReasoningTextAndCallsEachTheirItem) {
  ResponsesEvents ev(parse({{"input", "x"}}).echo, "resp_q", 1, "m");
  std::vector<std::string> sse;
  AnswerPiece p = text_piece("Checking.", "Think first.");
  p.calls.push_back({"call_q_0", "get_weather", "{\"city\":\"Paris\"}"});
  p.calls.push_back({"call_q_1", "get_time", "{}"});
  for (std::string& e : ev.push(p)) sse.push_back(std::move(e));
  for (std::string& e : ev.push(done_piece())) sse.push_back(std::move(e));
  const auto evs = events_of(sse);
  const std::vector<std::string> want = {
      "response.output_item.added",  // reasoning
      "response.reasoning_text.delta",
      "response.reasoning_text.done",
      "response.output_item.done",
      "response.output_item.added",  // message
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",  // call 1
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added",  // call 2
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types_of(evs), want);
  // output_index counts the items; each call's events name its item.
  EXPECT_EQ(evs[0].second["output_index"], 0);
  EXPECT_EQ(evs[4].second["output_index"], 1);
  EXPECT_EQ(evs[10].second["output_index"], 2);
  EXPECT_EQ(evs[10].second["item"]["arguments"], "");
  EXPECT_EQ(evs[11].second["item_id"], evs[10].second["item"]["id"]);
  EXPECT_EQ(evs[12].second["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(evs[12].second["name"], "get_weather");
  const json& out = ev.response()["output"];
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["content"][0]["text"], "Think first.");
  EXPECT_EQ(out[1]["type"], "message");
  EXPECT_EQ(out[2], json::parse(R"({"id": "fc_q_2", "type": "function_call", "status": "completed",
      "arguments": "{\"city\":\"Paris\"}", "call_id": "call_q_0", "name": "get_weather"})"));
  EXPECT_EQ(out[3]["call_id"], "call_q_1");
  // What the store keeps to continue from: one assistant turn.
  const json m = ev.output_message();
  EXPECT_EQ(m["content"], "Checking.");
  EXPECT_EQ(m["reasoning_content"], "Think first.");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_q_0");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
}

TEST(ResponsesApi, CutByLengthIsIncompleteAndErrorsFail) {
  ResponsesEvents cut(parse({{"input", "x"}, {"max_output_tokens", 7}}).echo, "resp_l", 1, "m");
  cut.push(text_piece("abc"));
  const auto evs = events_of(cut.push(done_piece("length")));
  EXPECT_EQ(evs.back().first, "response.incomplete");
  EXPECT_EQ(cut.status(), "incomplete");
  EXPECT_EQ(cut.response()["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut.response()["output"][0]["status"], "incomplete");

  ResponsesEvents failed(parse({{"input", "x"}}).echo, "resp_e", 1, "m");
  AnswerPiece err = done_piece("error");
  err.error = "backend exploded";
  const auto fe = events_of(failed.push(err));
  EXPECT_EQ(fe.back().first, "response.failed");
  EXPECT_EQ(failed.status(), "failed");
  EXPECT_NE(failed.response()["error"]["message"].get<std::string>().find("backend exploded"), std::string::npos);

  // An empty answer still has a message, whose text is "".
  ResponsesEvents empty(parse({{"input", "x"}}).echo, "resp_0", 1, "m");
  empty.push(done_piece());
  ASSERT_EQ(empty.response()["output"].size(), 1u);
  EXPECT_EQ(empty.response()["output"][0]["content"][0]["text"], "");
}

}  // namespace
}  // namespace ms::server
