// A gpt-oss (harmony) answer through the server's scheduler, from a scripted
// token stream: a backend whose logits pick the next token of a script, and a
// small vocabulary with the harmony markers. Checks what a client gets:
// the final channel as content, the analysis as reasoning only when asked,
// tool calls in OpenAI's shape, generation ending at <|return|> / <|call|>
// (never at the <|end|> between messages), and no markup in any text.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "harmony_test_util.h"
#include "server/api.h"
#include "server/chat.h"
#include "server/scheduler.h"
#include "server/tool_calls.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {
namespace {

using test::harmony_tokenizer;
using test::ScriptedBackend;

struct Result {
  std::string content, reasoning;
  std::vector<HarmonyToolCall> calls;
  Update last;
};

// Runs `generated` (harmony markup, tokenized with the markers) as the
// model's answer to a chat prompt.
Result run(const std::string& generated, bool separate_reasoning, int n_predict = 200,
           std::vector<std::string> stop = {}, bool harmony = true) {
  const Tokenizer tok = harmony_tokenizer();
  ScriptedBackend be(tok.encode(generated, false, true), tok.n_tokens());
  Scheduler::Options o;
  o.ctx = 512;
  Scheduler sched(be, tok, o);
  Job j;
  // The prompt as the server makes it: gpt-oss's template through ChatRenderer.
  const ChatRenderer chat(tok);
  j.prompt = tok.encode(chat.render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}}), true),
                        false, true);
  j.sampling.temperature = 0;
  j.gen.n_predict = n_predict;
  j.separate_reasoning = separate_reasoning;
  j.harmony = harmony;
  j.stop = std::move(stop);
  auto req = sched.submit(j);
  Result r;
  for (;;) {
    Update u = req->take(std::chrono::milliseconds(100));
    r.content += u.content;
    r.reasoning += u.reasoning;
    for (auto& c : u.tool_calls) r.calls.push_back(c);
    if (u.done) {
      r.last = u;
      return r;
    }
  }
}

const std::string kAnswer =
    "<|channel|>analysis<|message|>The user says hi. Answer warmly.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there!<|return|>"
    "this comes after the end and must never show";

TEST(HarmonyScheduler, FinalIsContentAnalysisIsReasoningAndReturnStops) {
  const Result r = run(kAnswer, true);
  EXPECT_EQ(r.content, "Hello there!");
  EXPECT_EQ(r.reasoning, "The user says hi. Answer warmly.");
  EXPECT_EQ(r.last.finish_reason, "stop");  // at <|return|>, not at <|end|>
  EXPECT_TRUE(r.calls.empty());
}

TEST(HarmonyScheduler, WithoutSeparateReasoningTheAnalysisIsDropped) {
  const Result r = run(kAnswer, false);
  EXPECT_EQ(r.content, "Hello there!");
  EXPECT_EQ(r.reasoning, "");
}

TEST(HarmonyScheduler, WithoutHarmonyParsingTheChannelNamesWouldLeak) {
  // The control: the plain path drops the markers but keeps the header words,
  // which is what the harmony path exists to avoid.
  const Result r = run(kAnswer, false, 200, {}, false);
  EXPECT_NE(r.content.find("analysis"), std::string::npos) << r.content;
  EXPECT_NE(r.content.find("final"), std::string::npos) << r.content;
}

TEST(HarmonyScheduler, ToolCallEndsWithCall) {
  const Result r = run(
      "<|channel|>analysis<|message|>Need the weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\":\"Paris\"}<|call|>ignored",
      true);
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(r.reasoning, "Need the weather.");
  EXPECT_EQ(r.last.finish_reason, "stop");  // the HTTP layer reports "tool_calls"
  ASSERT_EQ(r.calls.size(), 1u);
  const nlohmann::json j = openai_tool_call(r.calls[0], "call_1");
  EXPECT_EQ(j["id"], "call_1");
  EXPECT_EQ(j["type"], "function");
  EXPECT_EQ(j["function"]["name"], "get_weather");
  EXPECT_EQ(j["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(openai_tool_call({"browser.search", "", "{}"}, "c")["function"]["name"], "browser.search");
}

TEST(HarmonyScheduler, TokenLimitMidAnswerKeepsWhatCame) {
  // 11 tokens: the analysis header and body are cut off; nothing leaks.
  const Result r = run(kAnswer, true, 11);
  EXPECT_EQ(r.last.finish_reason, "length");
  EXPECT_EQ(r.content, "");
  EXPECT_FALSE(r.reasoning.empty());
  EXPECT_EQ(std::string("The user says hi. Answer warmly.").rfind(r.reasoning, 0), 0u) << r.reasoning;
}

TEST(HarmonyScheduler, StopStringsApplyToTheAnswer) {
  // "Answer" is in the analysis only: it does not stop; "there" in the answer does.
  const Result r = run(kAnswer, true, 200, {"Answer", "there"});
  EXPECT_EQ(r.content, "Hello ");
  EXPECT_EQ(r.reasoning, "The user says hi. Answer warmly.");
  EXPECT_EQ(r.last.finish_reason, "stop");
}

TEST(HarmonyRequest, ServerRendererUsesTheTemplateWithReasoningEffort) {
  const Tokenizer tok = harmony_tokenizer();
  const ChatRenderer renderer(tok);
  EXPECT_EQ(renderer.description(), "the model's Jinja template");
  const auto messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hello!"}}});
  const CompletionRequest r = parse_request(
      R"({"messages": [{"role": "user", "content": "Hello!"}], "reasoning_effort": "low"})", true);
  const std::string out = renderer.render(r.messages, true, r.template_kwargs);
  EXPECT_NE(out.find("\nReasoning: low\n"), std::string::npos) << out;
  const std::string tail = "<|end|><|start|>user<|message|>Hello!<|end|><|start|>assistant";
  ASSERT_GT(out.size(), tail.size());
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail);
  // The markers tokenize as single control tokens: system, user, assistant.
  const auto ids = tok.encode(out, false, true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.find_token("<|start|>")), 3);
  const auto last_start = std::find(ids.rbegin(), ids.rend(), tok.find_token("<|start|>")).base();
  EXPECT_EQ(tok.decode(std::vector<int32_t>(last_start, ids.end())), "assistant");
}

TEST(HarmonyRequest, OpenAiToolCallHistoryRendersAsHarmony) {
  // What an OpenAI client sends back after a tool call: arguments as a JSON
  // string, the reasoning as reasoning_content.
  const Tokenizer tok = harmony_tokenizer();
  const ChatRenderer renderer(tok);
  const CompletionRequest r = parse_request(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning_content": "Need weather.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "21"}]})",
                                            true);
  const std::string out = renderer.render(r.messages, true, r.template_kwargs);
  EXPECT_NE(out.find("<|start|>assistant<|channel|>analysis<|message|>Need weather.<|end|>"
                     "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                     "{\"city\": \"Paris\"}<|call|>"
                     "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"21\"<|end|>"),
            std::string::npos)
      << out;
  // Arguments that are not JSON reach the template as the text sent.
  const CompletionRequest bad = parse_request(R"({"messages": [
      {"role": "user", "content": "x"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]},
      {"role": "tool", "content": "1"}]})",
                                              true);
  EXPECT_NE(renderer.render(bad.messages, true).find("<|message|>\"{not json\"<|call|>"), std::string::npos);
}

TEST(HarmonyRequest, ReasoningEffortReachesTheTemplate) {
  const CompletionRequest r =
      parse_request(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"})", true);
  EXPECT_EQ(r.template_kwargs["reasoning_effort"], "high");
  // chat_template_kwargs wins.
  const CompletionRequest k = parse_request(
      R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high",
          "chat_template_kwargs": {"reasoning_effort": "low"}})",
      true);
  EXPECT_EQ(k.template_kwargs["reasoning_effort"], "low");
  try {
    parse_request(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": 3})", true);
    FAIL() << "expected a 400";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "reasoning_effort");
  }
}

}  // namespace
}  // namespace ms::server
