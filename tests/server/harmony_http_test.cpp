// A gpt-oss (harmony) answer over HTTP: the server on a free local port with
// a scripted backend, asked by an HTTP client as an OpenAI client would.
// Whole and streamed chat answers carry the final channel as content, the
// analysis as reasoning_content (reasoning_format "separate"), tool calls as
// tool_calls with finish_reason "tool_calls", and never channel markup.
#include <gtest/gtest.h>

#include <httplib.h>

#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "harmony_test_util.h"
#include "server/chat.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "served_test_util.h"

namespace ms::server {
namespace {

using json = nlohmann::json;

const char* kAnswer =
    "<|channel|>analysis<|message|>Greet back.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there!<|return|>";
const char* kCall =
    "<|channel|>analysis<|message|>Need weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    "<|message|>{\"city\":\"Paris\"}<|call|>";

// Serves `generated` as the model's answer to one request; returns the
// response body of POST /v1/chat/completions with `request`.
std::string ask(const std::string& generated, const json& request) {
  const Tokenizer tok = test::harmony_tokenizer();
  test::ScriptedBackend be(tok.encode(generated, false, true), tok.n_tokens());
  Scheduler::Options so;
  so.ctx = 1024;
  Scheduler sched(be, tok, so);
  const auto res = test::ServedScheduler(sched, tok).post("/v1/chat/completions", request);
  if (!res) return "no response";
  EXPECT_EQ(res->status, 200) << res->body;
  return res->body;
}

json chat_request(bool stream) {
  return {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
          {"max_tokens", 100},
          {"temperature", 0},
          {"stream", stream},
          {"reasoning_format", "separate"}};
}

TEST(HarmonyHttp, WholeAnswer) {
  const json out = json::parse(ask(kAnswer, chat_request(false)));
  const json& choice = out["choices"][0];
  EXPECT_EQ(choice["message"]["content"], "Hello there!");
  EXPECT_EQ(choice["message"]["reasoning_content"], "Greet back.");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["finish_reason"], "stop");
}

TEST(HarmonyHttp, WholeToolCall) {
  const json out = json::parse(ask(kCall, chat_request(false)));
  const json& choice = out["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());  // OpenAI's shape: no text besides the call
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
}

// The SSE stream's deltas joined: content, reasoning, tool calls, the finish reason.
struct Streamed {
  std::string content, reasoning, finish;
  json calls = json::array();
};

Streamed read_stream(const std::string& body) {
  Streamed s;
  for (const json& c : test::streamed_choices(body)) {
    const json& d = c["delta"];
    if (d.contains("content")) s.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) s.reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& tc : d["tool_calls"]) s.calls.push_back(tc);
    if (!c["finish_reason"].is_null()) s.finish = c["finish_reason"].get<std::string>();
  }
  return s;
}

TEST(HarmonyHttp, StreamedAnswerAndToolCall) {
  const Streamed a = read_stream(ask(kAnswer, chat_request(true)));
  EXPECT_EQ(a.content, "Hello there!");
  EXPECT_EQ(a.reasoning, "Greet back.");
  EXPECT_EQ(a.finish, "stop");
  const Streamed c = read_stream(ask(kCall, chat_request(true)));
  EXPECT_EQ(c.content, "");
  EXPECT_EQ(c.finish, "tool_calls");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0]["index"], 0);
  EXPECT_EQ(c.calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(c.calls[0]["function"]["arguments"], "{\"city\":\"Paris\"}");
}

TEST(HarmonyHttp, WithoutReasoningFormatTheAnalysisIsNotSent) {
  json req = chat_request(false);
  req.erase("reasoning_format");
  const json out = json::parse(ask(kAnswer, req));
  EXPECT_EQ(out["choices"][0]["message"]["content"], "Hello there!");
  EXPECT_FALSE(out["choices"][0]["message"].contains("reasoning_content"));
}

}  // namespace
}  // namespace ms::server
