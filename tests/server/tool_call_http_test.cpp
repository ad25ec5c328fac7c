// Tool calls over HTTP for the models that write them as text (Qwen3,
// Qwen3-Coder / Qwen3.5, Mistral): the server on a free local port with the
// real chat templates (tests/server/templates) and a backend whose output
// is scripted, asked as an OpenAI client would. Checks message.tool_calls
// and streamed delta.tool_calls, tool_choice (none, required, a named
// function: the prompt's prefill), parallel_tool_calls, malformed calls
// coming back as text, request validation, and that each template's own
// rendering of an assistant's call parses back into that call.
#include <gtest/gtest.h>

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "../tokenizer/tiny_vocabs.h"
#include "engine/backend.h"
#include "server/api.h"
#include "server/chat.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "served_test_util.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {
namespace {

using json = nlohmann::json;

std::string read_template(const std::string& name) {
  std::ifstream in(std::filesystem::path(MS_SOURCE_DIR) / "tests" / "server" / "templates" / name);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

// A byte-level vocabulary with the chat markers of `tmpl`'s family: Qwen's
// <tool_call> is ordinary text (user-defined, as in the real GGUFs),
// Mistral's [TOOL_CALLS] a control token.
Tokenizer tokenizer_for(const std::string& tmpl_name) {
  const bool mistral = tmpl_name.find("Mistral") != std::string::npos;
  Vocab v = mistral ? ms::test::tiny_bpe({}, {"<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                                              "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"})
                    : ms::test::tiny_bpe({}, {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>",
                                              "</tool_call>", "<think>", "</think>"});
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == "<tool_call>" || v.tokens[i] == "</tool_call>" || v.tokens[i] == "<think>" ||
        v.tokens[i] == "</think>")
      v.types[i] = TokenType::UserDefined;
  v.eos_id = ms::test::id_of(v, mistral ? "</s>" : "<|im_end|>");
  v.chat_template = read_template(tmpl_name);
  return Tokenizer(v);
}

// Greedy sampling follows `script`, one token per pass; remembers the
// prompt it was given.
class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend(std::vector<int32_t> script, int64_t n_vocab) : script_(std::move(script)) {
    cfg_.n_vocab = n_vocab;
  }
  void forward(KvCache&, std::span<const int32_t> tokens, std::vector<float>& logits, bool) override {
    if (next_ == 0) {
      std::lock_guard lk(m_);
      prompt_.assign(tokens.begin(), tokens.end());
    }
    logits.assign(static_cast<size_t>(cfg_.n_vocab), 0.0f);
    logits[static_cast<size_t>(script_[std::min(next_, script_.size() - 1)])] = 10.0f;
    ++next_;
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return KvCache(1, 1, 8, ctx, type); }
  const ModelConfig& config() const override { return cfg_; }
  std::string name() const override { return "scripted"; }
  void set_route_hook(RouteHook, bool = false) override {}
  std::vector<int32_t> prompt() {
    std::lock_guard lk(m_);
    return prompt_;
  }

 private:
  std::vector<int32_t> script_;
  size_t next_ = 0;
  ModelConfig cfg_;
  std::mutex m_;
  std::vector<int32_t> prompt_;
};

struct Answer {
  int status = 0;
  std::string body;
  std::string prompt;  // the prompt the model was given (rendered with control tokens)
};

// Serves `generated` (then end of text) as the model's answer to one request.
Answer ask(const std::string& tmpl_name, const std::string& generated, const json& request) {
  const Tokenizer tok = tokenizer_for(tmpl_name);
  std::vector<int32_t> script = tok.encode(generated, false, true);
  script.push_back(tok.eos_id());
  ScriptedBackend be(script, tok.n_tokens());
  Scheduler::Options so;
  so.ctx = 8192;
  so.prefill_chunk = 8192;  // one pass for the prompt: the script starts with the first answer token
  Scheduler sched(be, tok, so);
  const auto res = test::ServedScheduler(sched, tok).post("/v1/chat/completions", request);
  Answer a;
  if (!res) return a;
  a.status = res->status;
  a.body = res->body;
  const std::vector<int32_t> p = be.prompt();
  a.prompt = tok.decode(p, true);
  return a;
}

json weather_tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}
  ])");
}

json request(bool stream) {
  return {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris and the time?"}}})},
          {"tools", weather_tools()},
          {"max_tokens", 400},
          {"temperature", 0},
          {"stream", stream}};
}

// What a client assembles from the SSE stream: content, calls by index
// (name, id, arguments joined from their pieces), the finish reason.
struct Streamed {
  std::string content, finish;
  std::map<int, json> calls;
};

Streamed read_stream(const std::string& body) {
  Streamed s;
  for (const json& c : test::streamed_choices(body)) {
    const json& d = c["delta"];
    if (d.contains("content") && d["content"].is_string()) s.content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& tc : d["tool_calls"]) {
        json& call = s.calls[tc["index"].get<int>()];
        if (call.is_null()) call = {{"id", ""}, {"name", ""}, {"arguments", ""}};
        if (tc.contains("id")) call["id"] = tc["id"];
        if (tc.contains("function") && tc["function"].contains("name")) call["name"] = tc["function"]["name"];
        if (tc.contains("function") && tc["function"].contains("arguments"))
          call["arguments"] = call["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
      }
    if (!c["finish_reason"].is_null()) s.finish = c["finish_reason"].get<std::string>();
  }
  return s;
}

const char* kQwenTwoCalls =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"Europe/Paris\"}}\n</tool_call>";

TEST(ToolCallHttp, QwenJsonCallsWhole) {
  const Answer a = ask("Qwen-Qwen3-0.6B.jinja", kQwenTwoCalls, request(false));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_NE(a.prompt.find("<tools>"), std::string::npos) << "the template was given the tools";
  const json choice = json::parse(a.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  const json& calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
}

TEST(ToolCallHttp, QwenJsonCallsStreamedAsAClientAssemblesThem) {
  const Answer a = ask("Qwen-Qwen3-0.6B.jinja", std::string("Checking.\n") + kQwenTwoCalls, request(true));
  ASSERT_EQ(a.status, 200) << a.body;
  const Streamed s = read_stream(a.body);
  EXPECT_EQ(s.content, "Checking.");
  EXPECT_EQ(s.finish, "tool_calls");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls.at(0)["name"], "get_weather");
  EXPECT_EQ(s.calls.at(0)["arguments"], "{\"city\":\"Paris\",\"days\":2}");
  EXPECT_EQ(s.calls.at(1)["name"], "get_time");
  EXPECT_EQ(s.calls.at(1)["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(a.body.find("<tool_call>"), std::string::npos) << "call markup leaked into the stream";
}

TEST(ToolCallHttp, QwenXmlCallTypedBySchema) {
  const std::string out =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
      "</parameter>\n</function>\n</tool_call>";
  for (const char* tmpl : {"Qwen3-Coder.jinja", "Qwen3.5-4B.jinja"}) {
    const Answer a = ask(tmpl, out, request(false));
    ASSERT_EQ(a.status, 200) << a.body;
    const json choice = json::parse(a.body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << tmpl;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << tmpl;
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\",\"days\":3}");
    const Streamed s = read_stream(ask(tmpl, out, request(true)).body);
    EXPECT_EQ(s.finish, "tool_calls");
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls.at(0)["arguments"], "{\"city\":\"Paris\",\"days\":3}");
    EXPECT_EQ(s.content, "");
  }
}

TEST(ToolCallHttp, MistralCallsWithTheControlMarker) {
  const std::string out =
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123XYZ\"}]";
  const Answer a = ask("mistralai-Mistral-Nemo-Instruct-2407.jinja", out, request(false));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_NE(a.prompt.find("[AVAILABLE_TOOLS]"), std::string::npos);
  const json choice = json::parse(a.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["id"], "abc123XYZ");  // nine alphanumerics, as the template asks
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
}

TEST(ToolCallHttp, AnswerWithoutCallsAndMalformedCallsAreContent) {
  const Answer plain = ask("Qwen-Qwen3-0.6B.jinja", "It is sunny.", request(false));
  json choice = json::parse(plain.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["message"]["content"], "It is sunny.");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  const std::string bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
  const std::string unknown = "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>";
  for (const std::string& out : {bad, unknown}) {
    const Answer a = ask("Qwen-Qwen3-0.6B.jinja", out, request(false));
    ASSERT_EQ(a.status, 200) << a.body;
    choice = json::parse(a.body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop");
    EXPECT_EQ(choice["message"]["content"], out);
    const Streamed s = read_stream(ask("Qwen-Qwen3-0.6B.jinja", out, request(true)).body);
    EXPECT_EQ(s.content, out);
    EXPECT_TRUE(s.calls.empty());
    EXPECT_EQ(s.finish, "stop");
  }
}

TEST(ToolCallHttp, ToolChoiceNoneHidesToolsAndParsesNothing) {
  json req = request(false);
  req["tool_choice"] = "none";
  const Answer a = ask("Qwen-Qwen3-0.6B.jinja", kQwenTwoCalls, req);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.prompt.find("<tools>"), std::string::npos);
  const json choice = json::parse(a.body)["choices"][0];
  EXPECT_EQ(choice["message"]["content"], kQwenTwoCalls);
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["finish_reason"], "stop");
}

TEST(ToolCallHttp, ToolChoiceRequiredPrefillsTheCall) {
  json req = request(false);
  req["tool_choice"] = "required";
  // The prompt ends inside the call's opening; the model writes the rest.
  const Answer a = ask("Qwen-Qwen3-0.6B.jinja", "get_time\", \"arguments\": {}}\n</tool_call>", req);
  ASSERT_EQ(a.status, 200) << a.body;
  const std::string tail = "<|im_start|>assistant\n<tool_call>\n{\"name\": \"";
  EXPECT_EQ(a.prompt.substr(a.prompt.size() - tail.size()), tail) << a.prompt;
  json choice = json::parse(a.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_time");
  // Not a call after all: the text (with the prefill) is content, finish "stop".
  const Answer b = ask("Qwen-Qwen3-0.6B.jinja", "oops", req);
  choice = json::parse(b.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["message"]["content"], "<tool_call>\n{\"name\": \"oops");
}

TEST(ToolCallHttp, NamedToolChoicePrefillsTheName) {
  json req = request(true);
  req["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  // Qwen3.5 opens <think> in the generation prompt: it is closed before the call.
  const Answer a = ask("Qwen3.5-4B.jinja", "<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>", req);
  ASSERT_EQ(a.status, 200) << a.body;
  const std::string tail = "</think>\n\n<tool_call>\n<function=get_weather>\n";
  EXPECT_EQ(a.prompt.substr(a.prompt.size() - tail.size()), tail) << a.prompt;
  const Streamed s = read_stream(a.body);
  EXPECT_EQ(s.finish, "tool_calls");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls.at(0)["name"], "get_weather");
  EXPECT_EQ(s.calls.at(0)["arguments"], "{\"city\":\"Rome\"}");
}

TEST(ToolCallHttp, ParallelToolCallsFalseKeepsTheFirst) {
  for (bool stream : {false, true}) {
    json req = request(stream);
    req["parallel_tool_calls"] = false;
    const Answer a = ask("Qwen-Qwen3-0.6B.jinja", kQwenTwoCalls, req);
    ASSERT_EQ(a.status, 200) << a.body;
    if (stream) {
      const Streamed s = read_stream(a.body);
      ASSERT_EQ(s.calls.size(), 1u);
      EXPECT_EQ(s.calls.at(0)["name"], "get_weather");
    } else {
      const json calls = json::parse(a.body)["choices"][0]["message"]["tool_calls"];
      ASSERT_EQ(calls.size(), 1u);
      EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    }
  }
}

ApiError error_of(const json& body) {
  try {
    parse_request(body.dump(), true);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(200, "accepted");
}

TEST(ToolCallRequest, BadToolsAndToolChoiceAre400s) {
  json req = request(false);
  req["tool_choice"] = {{"type", "function"}, {"function", {{"name", "launch_rocket"}}}};
  ApiError e = error_of(req);
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(std::string(e.what()).find("launch_rocket"), std::string::npos) << e.what();
  EXPECT_EQ(e.param, "tool_choice");
  req["tool_choice"] = "sometimes";
  EXPECT_EQ(error_of(req).status, 400);
  req["tool_choice"] = "auto";
  EXPECT_EQ(error_of(req).status, 200);

  for (const json& tools : {json("get_weather"), json::array({42}), json::array({{{"type", "function"}}}),
                            json::array({{{"type", "function"}, {"function", {{"name", ""}}}}}),
                            json::array({{{"type", "function"}, {"function", {{"name", "a b"}}}}}),
                            json::array({{{"type", "retrieval"}, {"function", {{"name", "f"}}}}}),
                            json::array({{{"function", {{"name", "f"}, {"parameters", "none"}}}}})}) {
    json r = request(false);
    r["tools"] = tools;
    e = error_of(r);
    EXPECT_EQ(e.status, 400) << tools.dump();
    EXPECT_EQ(e.param.rfind("tools", 0), 0u) << e.param;
  }
  json r = request(false);
  r.erase("tools");
  r["tool_choice"] = "required";
  EXPECT_EQ(error_of(r).status, 400);
  r["parallel_tool_calls"] = "no";
  r.erase("tool_choice");
  EXPECT_EQ(error_of(r).status, 400);
}

// Each template renders an assistant's call (arguments as the JSON string
// OpenAI clients send back) in the format its model is taught; parsing that
// rendering with the format detected for the template gives the call back.
TEST(ToolCallTemplates, EachTemplatesRenderedCallParsesBack) {
  for (const char* name : {"Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja", "Qwen3.5-4B.jinja",
                           "mistralai-Mistral-Nemo-Instruct-2407.jinja"}) {
    SCOPED_TRACE(name);
    const Tokenizer tok = tokenizer_for(name);
    const ModelToolCalls model = tool_calls_of(tok);
    ASSERT_NE(model.format, ToolCallFormat::None);
    EXPECT_EQ(model.marker_is_control, std::string(name).find("Mistral") != std::string::npos);
    const ChatRenderer chat(tok);
    const std::string args = R"({"city": "Paris", "days": 2})";
    nlohmann::ordered_json messages = nlohmann::ordered_json::array(
        {{{"role", "user"}, {"content", "Weather?"}},
         {{"role", "assistant"},
          {"content", ""},
          {"tool_calls",
           {{{"id", "abc123XYZ"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", args}}}}}}},
         {{"role", "tool"}, {"tool_call_id", "abc123XYZ"}, {"content", "sunny"}},
         {{"role", "assistant"}, {"content", "Sunny in Paris."}},  // Mistral's template wants turns to alternate
         {{"role", "user"}, {"content", "Thanks"}}});
    nlohmann::ordered_json kwargs = {{"tools", weather_tools()}};
    const std::string prompt = chat.render(messages, true, kwargs);
    // The assistant's turn (Qwen3's system prompt shows a <tool_call> example too).
    const std::string open = model.format == ToolCallFormat::Mistral ? "[TOOL_CALLS]" : "<tool_call>\n";
    const size_t turn = prompt.find(model.format == ToolCallFormat::Mistral ? "[/INST]" : "<|im_start|>assistant");
    ASSERT_NE(turn, std::string::npos) << prompt;
    const size_t at = prompt.find(open, turn);
    ASSERT_NE(at, std::string::npos) << prompt;
    const size_t end = model.format == ToolCallFormat::Mistral ? prompt.find("</s>", at) : prompt.find("</tool_call>", at) + 12;
    const ToolCallText t = parse_tool_calls(model.format, weather_tools(), prompt.substr(at, end - at));
    ASSERT_EQ(t.calls.size(), 1u) << prompt.substr(at, end - at);
    EXPECT_EQ(t.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(t.calls[0].arguments), json::parse(args));
    EXPECT_EQ(t.content, "");
  }
}

}  // namespace
}  // namespace ms::server
