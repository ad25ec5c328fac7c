// Anthropic's Messages API translated without HTTP (server/messages_api.h):
// requests into chat completions bodies (and then CompletionRequests), the
// answer's pieces into the message and the stream's events, the errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/messages_api.h"

namespace ms::server {
namespace {

using json = nlohmann::ordered_json;

json base(json extra = json::object()) {
  json b = {{"model", "m"}, {"max_tokens", 100}, {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

ApiError error_of(const json& body, bool count_tokens = false) {
  try {
    parse_messages_request(body, count_tokens);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return ApiError(0, "");
}

std::vector<std::pair<std::string, json>> events_of(const std::vector<std::string>& sse) {
  std::vector<std::pair<std::string, json>> out;
  for (const std::string& e : sse) {
    EXPECT_EQ(e.rfind("event: ", 0), 0u) << e;
    const size_t nl = e.find('\n');
    const std::string type = e.substr(7, nl - 7);
    EXPECT_EQ(e.compare(nl + 1, 6, "data: "), 0) << e;
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

AnswerPiece done_piece(const std::string& reason = "stop") {
  AnswerPiece p;
  p.done = true;
  p.finish_reason = reason;
  p.n_prompt = 20;
  p.n_cached = 5;
  p.n_completion = 9;
  return p;
}

TEST(MessagesApi, SystemMessagesAndSampling) {
  const MessagesRequest rq = parse_messages_request(base({{"system", json::array({{{"type", "text"}, {"text", "Be "}},
                                                                                  {{"type", "text"}, {"text", "brief."}}})},
                                                          {"temperature", 0.3},
                                                          {"top_p", 0.8},
                                                          {"top_k", 5},
                                                          {"stop_sequences", json::array({"END"})},
                                                          {"stream", true}}));
  EXPECT_TRUE(rq.stream);
  EXPECT_EQ(rq.model, "m");
  const json& m = rq.chat_body["messages"];
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[1], json({{"role", "user"}, {"content", "Hi"}}));
  const CompletionRequest r = parse_request_body(rq.chat_body, true);
  EXPECT_EQ(r.gen.n_predict, 100);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.3f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.8f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.separate_reasoning);
}

TEST(MessagesApi, ToolUseAndToolResultBlocks) {
  const json messages = json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "Use the tool.", "signature": "s"},
      {"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
      {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}}]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"},
      {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "no clock"}], "is_error": true},
      {"type": "text", "text": "And tomorrow?"}]}
  ])");
  const json tools = json::parse(R"([{"name": "get_weather", "description": "Weather",
      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
      {"name": "get_time", "input_schema": {"type": "object"}}])");
  const MessagesRequest rq = parse_messages_request(base({{"messages", messages}, {"tools", tools}}));
  const json& m = rq.chat_body["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump(1);
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["content"], "Checking.");
  EXPECT_EQ(m[1]["reasoning_content"], "Use the tool.");
  ASSERT_EQ(m[1]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m[1]["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(m[2], json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"name", "get_weather"}, {"content", "21 C"}}));
  EXPECT_EQ(m[3]["content"], "Error: no clock") << "is_error is told to the model";
  EXPECT_EQ(m[4], json({{"role", "user"}, {"content", "And tomorrow?"}}));
  const json& t = rq.chat_body["tools"];
  EXPECT_EQ(t[0]["function"]["name"], "get_weather");
  EXPECT_EQ(t[0]["function"]["description"], "Weather");
  EXPECT_EQ(t[0]["function"]["parameters"], tools[0]["input_schema"]);
  const CompletionRequest r = parse_request_body(rq.chat_body, true);
  EXPECT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tool_choice, "auto");
}

TEST(MessagesApi, ToolChoiceAndThinking) {
  const json tools = json::parse(R"([{"name": "f", "input_schema": {"type": "object"}}])");
  auto choice = [&](const json& tc) {
    return parse_request_body(parse_messages_request(base({{"tools", tools}, {"tool_choice", tc}})).chat_body, true);
  };
  EXPECT_EQ(choice({{"type", "auto"}}).tool_choice, "auto");
  EXPECT_EQ(choice({{"type", "any"}}).tool_choice, "required");
  EXPECT_EQ(choice({{"type", "none"}}).tool_choice, "none");
  const CompletionRequest named = choice({{"type", "tool"}, {"name", "f"}, {"disable_parallel_tool_use", true}});
  EXPECT_EQ(named.tool_choice, "function");
  EXPECT_EQ(named.tool_choice_name, "f");
  EXPECT_FALSE(named.parallel_tool_calls);
  EXPECT_TRUE(choice({{"type", "auto"}}).parallel_tool_calls);

  EXPECT_TRUE(parse_messages_request(base({{"thinking", {{"type", "enabled"}, {"budget_tokens", 2048}}}})).thinking);
  EXPECT_FALSE(parse_messages_request(base()).thinking);
  const MessagesRequest off = parse_messages_request(base({{"thinking", {{"type", "disabled"}}}}));
  EXPECT_EQ(off.chat_body["chat_template_kwargs"]["enable_thinking"], false);
  const MessagesRequest own = parse_messages_request(
      base({{"thinking", {{"type", "disabled"}}}, {"chat_template_kwargs", {{"enable_thinking", true}}}}));
  EXPECT_EQ(own.chat_body["chat_template_kwargs"]["enable_thinking"], true) << "the request's own kwargs win";
}

TEST(MessagesApi, RefusesBadFieldsNamingThem) {
  struct Case {
    json body;
    std::string param;
  };
  const json no_max = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  const std::vector<Case> cases = {
      {no_max, "max_tokens"},
      {base({{"max_tokens", 0}}), "max_tokens"},
      {base({{"max_tokens", 1.5}}), "max_tokens"},
      {base({{"messages", json::array()}}), "messages"},
      {base({{"messages", "Hi"}}), "messages"},
      {base({{"messages", json::array({{{"role", "system"}, {"content", "x"}}})}}), "messages[0].role"},
      {base({{"messages", json::array({{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}, {"content", "{"}}})}}),
       "messages"},
      {base({{"messages", json::array({{{"role", "user"},
                                        {"content", json::array({{{"type", "image"}, {"source", json::object()}}})}}})}}),
       "messages[0].content[0].type"},
      {base({{"messages", json::array({{{"role", "user"},
                                        {"content", json::array({{{"type", "tool_result"}, {"tool_use_id", "x"}}})}}})}}),
       "messages[0].content[0].tool_use_id"},
      {base({{"messages", json::array({{{"role", "user"},
                                        {"content", json::array({{{"type", "tool_use"}, {"id", "x"}, {"name", "f"}}})}}})}}),
       "messages[0].content[0].type"},
      {base({{"system", 5}}), "system"},
      {base({{"temperature", 1.5}}), "temperature"},
      {base({{"stop_sequences", "END"}}), "stop_sequences"},
      {base({{"tools", json::array({{{"name", "f"}}})}}), "tools[0].input_schema"},
      {base({{"tools", json::array({{{"type", "web_search_20250305"}, {"name", "web_search"}}})}}), "tools[0].type"},
      {base({{"tools", json::array({{{"name", "bad name"}, {"input_schema", json::object()}}})}}), "tools[0].name"},
      {base({{"tool_choice", "auto"}}), "tool_choice"},
      {base({{"tool_choice", {{"type", "tool"}}}}), "tool_choice.name"},
      {base({{"tool_choice", {{"type", "sometimes"}}}}), "tool_choice.type"},
      {base({{"thinking", {{"type", "maybe"}}}}), "thinking.type"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump() << ": " << e.what();
  }
  // count_tokens needs no max_tokens; unknown fields are ignored.
  EXPECT_NO_THROW(parse_messages_request(no_max, true));
  EXPECT_NO_THROW(parse_messages_request(base({{"metadata", {{"user_id", "u"}}}, {"service_tier", "auto"}, {"x", 1}})));
  // Past parse_request_body's limit of 16 stop strings: named as this API names them.
  json many = json::array();
  for (int i = 0; i < 17; ++i) many.push_back("s" + std::to_string(i));
  try {
    parse_request_body(parse_messages_request(base({{"stop_sequences", many}})).chat_body, true);
    ADD_FAILURE() << "17 stop strings accepted";
  } catch (const ApiError& e) {
    const ApiError renamed = messages_error(e);
    EXPECT_EQ(renamed.param, "stop_sequences");
    EXPECT_EQ(std::string(renamed.what()).rfind("'stop_sequences'", 0), 0u) << renamed.what();
  }
}

TEST(MessagesApi, ErrorBodiesHaveAnthropicsShape) {
  const json b = anthropic_error_body(ApiError(400, "'max_tokens' is required"));
  EXPECT_EQ(b, json::parse(R"({"type": "error", "error": {"type": "invalid_request_error",
                                "message": "'max_tokens' is required"}})"));
  EXPECT_STREQ(anthropic_error_type(401), "authentication_error");
  EXPECT_STREQ(anthropic_error_type(404), "not_found_error");
  EXPECT_STREQ(anthropic_error_type(413), "request_too_large");
  EXPECT_STREQ(anthropic_error_type(500), "api_error");
  EXPECT_STREQ(anthropic_error_type(503), "overloaded_error");
}

TEST(MessagesApi, TextStreamEventsInOrder) {
  MessagesEvents ev("msg_1", "m", false);
  std::vector<std::string> sse = ev.start(20);
  AnswerPiece a;
  a.content = "Hel";
  a.reasoning = "not shown";  // thinking was not asked for
  AnswerPiece b;
  b.content = "lo!";
  for (const AnswerPiece& p : {a, b})
    for (std::string& e : ev.push(p)) sse.push_back(std::move(e));
  for (std::string& e : ev.push(done_piece())) sse.push_back(std::move(e));
  const auto evs = events_of(sse);
  const std::vector<std::string> want = {"message_start",       "ping",          "content_block_start",
                                         "content_block_delta", "content_block_delta", "content_block_stop",
                                         "message_delta",       "message_stop"};
  EXPECT_EQ(types_of(evs), want);
  const json& start = evs[0].second["message"];
  EXPECT_EQ(start["id"], "msg_1");
  EXPECT_EQ(start["content"], json::array());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(start["usage"]["input_tokens"], 20);
  EXPECT_EQ(evs[2].second["content_block"], json({{"type", "text"}, {"text", ""}}));
  EXPECT_EQ(evs[3].second["delta"], json({{"type", "text_delta"}, {"text", "Hel"}}));
  EXPECT_EQ(evs[6].second["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(evs[6].second["usage"]["output_tokens"], 9);
  const json& msg = ev.message();
  ASSERT_EQ(msg["content"].size(), 1u);
  EXPECT_EQ(msg["content"][0]["text"], "Hello!");
  EXPECT_EQ(msg["stop_reason"], "end_turn");
  EXPECT_TRUE(msg["stop_sequence"].is_null());
  // The prompt's cached part is counted apart, as Anthropic does.
  EXPECT_EQ(msg["usage"]["input_tokens"], 15);
  EXPECT_EQ(msg["usage"]["cache_read_input_tokens"], 5);
  EXPECT_EQ(msg["usage"]["output_tokens"], 9);
}

TEST(MessagesApi, ThinkingTextAndToolUseBlocks) {
  MessagesEvents ev("msg_2", "m", true);
  AnswerPiece p;
  p.reasoning = "Hmm.";
  p.content = "Checking.";
  p.calls.push_back({"call_2_0", "get_weather", "{\"city\":\"Paris\"}"});
  std::vector<std::string> sse = ev.push(p);
  for (std::string& e : ev.push(done_piece())) sse.push_back(std::move(e));
  const auto evs = events_of(sse);
  const std::vector<std::string> want = {"content_block_start", "content_block_delta", "content_block_stop",
                                         "content_block_start", "content_block_delta", "content_block_stop",
                                         "content_block_start", "content_block_delta", "content_block_stop",
                                         "message_delta",       "message_stop"};
  EXPECT_EQ(types_of(evs), want);
  EXPECT_EQ(evs[0].second["content_block"]["type"], "thinking");
  EXPECT_EQ(evs[1].second["delta"], json({{"type", "thinking_delta"}, {"thinking", "Hmm."}}));
  EXPECT_EQ(evs[3].second["index"], 1);
  EXPECT_EQ(evs[6].second["index"], 2);
  EXPECT_EQ(evs[6].second["content_block"],
            json({{"type", "tool_use"}, {"id", "call_2_0"}, {"name", "get_weather"}, {"input", json::object()}}));
  EXPECT_EQ(evs[7].second["delta"]["type"], "input_json_delta");
  EXPECT_EQ(json::parse(evs[7].second["delta"]["partial_json"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(evs[9].second["delta"]["stop_reason"], "tool_use");
  const json& c = ev.message()["content"];
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]["thinking"], "Hmm.");
  EXPECT_EQ(c[1]["text"], "Checking.");
  EXPECT_EQ(c[2]["input"], json({{"city", "Paris"}}));
}

TEST(MessagesApi, StopReasons) {
  auto reason = [](AnswerPiece last, const std::string& content = "x") {
    MessagesEvents ev("msg", "m", false);
    AnswerPiece p;
    p.content = content;
    ev.push(p);
    ev.push(last);
    return ev.message();
  };
  EXPECT_EQ(reason(done_piece("length"))["stop_reason"], "max_tokens");
  AnswerPiece stop = done_piece("stop");
  stop.stop_sequence = "END";
  const json m = reason(stop);
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
  EXPECT_TRUE(reason(done_piece(), "")["content"].empty()) << "no empty text block";

  MessagesEvents failed("msg", "m", false);
  AnswerPiece err = done_piece("error");
  err.error = "boom";
  const auto evs = events_of(failed.push(err));
  EXPECT_EQ(evs.back().first, "error");
  EXPECT_EQ(evs.back().second["error"]["type"], "api_error");
  EXPECT_TRUE(failed.failed());
  EXPECT_EQ(failed.error().status, 500);

  EXPECT_EQ(tool_input("{\"a\": 1}"), json({{"a", 1}}));
  EXPECT_EQ(tool_input("not json"), json({{"_raw_arguments", "not json"}}));
  EXPECT_EQ(tool_input("[1]"), json({{"_raw_arguments", "[1]"}}));
}

}  // namespace
}  // namespace ms::server
