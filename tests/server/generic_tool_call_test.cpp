// tool_choice "required" / a named function always yields a call, for any
// model: a chat template without tool syntax (the built-in tiny model's)
// gets the tools described in the system message and the generic format
// ({"tool_calls": [{"name", "arguments"}]}), the answer sampled under its
// grammar (server/tool_calls.h). Checked over HTTP on the tiny model (random
// weights: every call here is the grammar's doing), and the pieces alone:
// the schema, the parser (whole and streamed), the prompt.
#include <gtest/gtest.h>

#include <map>

#include "../grammar/schema_validator.h"
#include "grammar/json_schema.h"
#include "server/api.h"
#include "server/chat.h"
#include "server/scheduler.h"
#include "server/tool_call_parser.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"
#include "served_test_util.h"
#include "tiny_model_util.h"

namespace ms::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

json tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                      "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                     "required": ["city", "days"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time",
      "parameters": {"$defs": {"zone": {"enum": ["UTC", "CET"]}}, "type": "object",
                     "properties": {"zone": {"$ref": "#/$defs/zone"}}, "required": ["zone"],
                     "additionalProperties": false}}},
    {"type": "function", "function": {"name": "ping"}}
  ])");
}

// The arguments' schema of `name` in tools().
const json* parameters(const std::string& name) {
  static const json t = tools();
  for (const json& x : t)
    if (x["function"]["name"] == name) return x["function"].contains("parameters") ? &x["function"]["parameters"] : nullptr;
  return nullptr;
}

TEST(GenericToolCalls, ParserReadsTheWholeAnswerAsCalls) {
  const std::string two =
      R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}, {"name": "ping", "arguments": {}}]})";
  ToolCallText t = parse_tool_calls(ToolCallFormat::Generic, tools(), two);
  ASSERT_EQ(t.calls.size(), 2u) << t.content;
  EXPECT_EQ(t.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(t.calls[0].arguments), json::parse(R"({"city":"Oslo","days":2})"));
  EXPECT_EQ(t.calls[1].name, "ping");
  EXPECT_TRUE(t.content.empty());
  // Streamed in pieces of any size: the same.
  for (size_t piece : {1, 3, 7}) {
    ToolCallParser p(ToolCallFormat::Generic, tools());
    ToolCallText s;
    for (size_t i = 0; i < two.size(); i += piece) {
      ToolCallText part = p.push(two.substr(i, piece));
      s.content += part.content;
      EXPECT_TRUE(part.calls.empty());
    }
    ToolCallText tail = p.flush();
    EXPECT_EQ(s.content + tail.content, "");
    EXPECT_EQ(tail.calls.size(), 2u);
  }
  // Not calls: text (passed on at once), another object, an unknown function.
  ToolCallParser p(ToolCallFormat::Generic, tools());
  EXPECT_EQ(p.push("Hello").content, "Hello");
  EXPECT_EQ(p.push(" {x}").content, " {x}");
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::Generic, tools(), R"({"answer": 1})").content, R"({"answer": 1})");
  EXPECT_TRUE(parse_tool_calls(ToolCallFormat::Generic, tools(), R"({"tool_calls": [{"name": "nope", "arguments": {}}]})")
                  .calls.empty());
}

TEST(GenericToolCalls, SchemaCompilesAndNamesOnlyTheChosenTool) {
  const ojson all = generic_tool_call_schema(tools(), "", true);
  const grammar::Grammar g = grammar::compile_json_schema(all);
  grammar::Matcher m(g);
  EXPECT_TRUE(m.advance(R"({"tool_calls":[{"name":"get_time","arguments":{"zone":"CET"}}]})") && m.can_end());
  grammar::Matcher bad(g);
  EXPECT_FALSE(bad.advance(R"({"tool_calls":[{"name":"get_time","arguments":{"zone":"PST"}}]})") && bad.can_end());
  const ojson one = generic_tool_call_schema(tools(), "ping", false);
  const grammar::Grammar g1 = grammar::compile_json_schema(one);
  grammar::Matcher ping(g1);
  EXPECT_TRUE(ping.advance(R"({"tool_calls":[{"name":"ping","arguments":{}}]})") && ping.can_end());
  grammar::Matcher other(g1);
  EXPECT_FALSE(other.advance(R"({"tool_calls":[{"name":"get_time")"));
  grammar::Matcher two(g1);  // parallel false: one call
  EXPECT_FALSE(two.advance(R"({"tool_calls":[{"name":"ping","arguments":{}},)"));
  // A tool whose parameters the compiler refuses: its arguments are any object, the rest stay exact.
  json odd = tools();
  odd[0]["function"]["parameters"]["properties"]["city"]["uniqueItems"] = true;
  const grammar::Grammar g2 = grammar::compile_json_schema(generic_tool_call_schema(odd, "", true));
  grammar::Matcher free_args(g2);
  EXPECT_TRUE(free_args.advance(R"({"tool_calls":[{"name":"get_weather","arguments":{"x":[1]}}]})") && free_args.can_end());
}

struct Tiny : test::TinyCpuModel {
  Tiny() : TinyCpuModel("generic_tools_test_") {}
};

TEST(GenericToolCalls, TemplateWithoutToolsGetsThemInTheSystemMessage) {
  Tiny t;
  ASSERT_EQ(tool_calls_of(t.tok()).format, ToolCallFormat::None);  // the premise: no tool syntax
  ChatRenderer chat(t.tok());
  const ojson messages = ojson::parse(R"([{"role": "user", "content": "Weather?"}])");
  const std::string with = chat.render(messages, true, ojson{{"tools", ojson::parse(tools().dump())}});
  const std::string without = chat.render(messages, true);
  EXPECT_NE(with.find("get_weather"), std::string::npos) << with;
  EXPECT_NE(with.find("\"tool_calls\""), std::string::npos) << with;
  EXPECT_NE(with.find("system"), std::string::npos) << with;
  EXPECT_EQ(without.find("get_weather"), std::string::npos) << without;
  // A system message of the client's own keeps its text, the tools after it.
  const ojson sys = ojson::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  const std::string merged = chat.render(sys, true, ojson{{"tools", ojson::parse(tools().dump())}});
  ASSERT_NE(merged.find("Be brief."), std::string::npos);
  EXPECT_LT(merged.find("Be brief."), merged.find("get_weather"));
  // A template that refuses system messages (roles must alternate): the
  // tools go before the user's text instead.
  Vocab v = t.tok().vocab();
  v.chat_template =
      "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('roles must alternate') }}{% endif %}"
      "{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}";
  const Tokenizer strict_tok(v);
  ChatRenderer strict(strict_tok);
  const std::string in_user = strict.render(messages, true, ojson{{"tools", ojson::parse(tools().dump())}});
  EXPECT_EQ(in_user.rfind("user: You can call these tools", 0), 0u) << in_user;
  EXPECT_NE(in_user.find("Weather?"), std::string::npos) << in_user;
  EXPECT_THROW(strict.render(sys, true), ApiError);  // its own refusal stands
}

json request(const json& tool_choice, uint64_t seed, bool stream, bool parallel = true) {
  return {{"messages", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}})},
          {"tools", tools()},
          {"tool_choice", tool_choice},
          {"parallel_tool_calls", parallel},
          {"max_tokens", 600},
          {"temperature", 1.0},
          {"seed", seed},
          {"stream", stream}};
}

// Each call: a known name, arguments valid under its parameters.
void expect_valid_calls(const json& calls, const std::string& only_name) {
  ASSERT_TRUE(calls.is_array());
  ASSERT_FALSE(calls.empty());
  for (const json& c : calls) {
    EXPECT_EQ(c["type"], "function");
    EXPECT_FALSE(c["id"].get<std::string>().empty());
    const std::string name = c["function"]["name"];
    if (!only_name.empty()) EXPECT_EQ(name, only_name);
    ojson args;
    ASSERT_NO_THROW(args = ojson::parse(c["function"]["arguments"].get<std::string>())) << c.dump();
    ASSERT_TRUE(args.is_object());
    if (const json* p = parameters(name)) {
      const ojson schema = ojson::parse(p->dump());
      EXPECT_TRUE(grammar::testing::valid(args, schema, schema)) << name << " " << args.dump();
    } else {
      EXPECT_TRUE(args.empty()) << args.dump();
    }
  }
}

TEST(GenericToolCalls, RequiredAndNamedAlwaysCallOnTheTinyModel) {
  Tiny t;
  Scheduler::Options o;
  o.parallel = 2;
  o.ctx = 4096;
  Scheduler sched(*t.be, t.tok(), o);
  test::ServedScheduler served(sched, t.tok());
  int calls = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    // required, whole answer.
    auto res = served.post("/v1/chat/completions", request("required", seed, false));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json r = json::parse(res->body);
    const json& choice = r["choices"][0];
    if (choice["finish_reason"] == "length") continue;  // ran out of tokens inside the call: not a failure of the format
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << res->body;
    EXPECT_TRUE(choice["message"]["content"].is_null()) << res->body;
    expect_valid_calls(choice["message"]["tool_calls"], "");
    ++calls;
    // A named function, parallel calls off: exactly one call of it.
    res = served.post("/v1/chat/completions",
                      request({{"type", "function"}, {"function", {{"name", "get_time"}}}}, seed, false, false));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json named = json::parse(res->body)["choices"][0];
    if (named["finish_reason"] == "length") continue;
    EXPECT_EQ(named["finish_reason"], "tool_calls") << res->body;
    expect_valid_calls(named["message"]["tool_calls"], "get_time");
    EXPECT_EQ(named["message"]["tool_calls"].size(), 1u);
    // Streamed: the call comes as delta.tool_calls.
    res = served.post("/v1/chat/completions", request("required", seed, true));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    std::map<int, json> streamed;
    std::string finish, content;
    for (const json& c : test::streamed_choices(res->body)) {
      const json& d = c["delta"];
      if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
      if (d.contains("tool_calls"))
        for (const json& tc : d["tool_calls"]) {
          json& call = streamed[tc["index"].get<int>()];
          if (call.is_null()) call = {{"type", "function"}, {"id", ""}, {"function", {{"name", ""}, {"arguments", ""}}}};
          if (tc.contains("id")) call["id"] = tc["id"];
          if (tc.contains("function") && tc["function"].contains("name")) call["function"]["name"] = tc["function"]["name"];
          if (tc.contains("function") && tc["function"].contains("arguments"))
            call["function"]["arguments"] =
                call["function"]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
        }
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    if (finish == "length") continue;
    EXPECT_EQ(finish, "tool_calls") << res->body;
    EXPECT_EQ(content, "");
    json list = json::array();
    for (auto& [i, c] : streamed) list.push_back(c);
    expect_valid_calls(list, "");
  }
  // The grammar's answers are short (bounded arguments): most end inside max_tokens.
  EXPECT_GE(calls, 2);
  // tool_choice auto stays free text (no grammar), parsed if it is a call; no error.
  auto res = served.post("/v1/chat/completions", request("auto", 1, false));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  // Tools past the grammar's limits even with free arguments: a 400, not a failure.
  json many = request("required", 1, false);
  many["tools"] = json::array();
  for (int i = 0; i < 20000; ++i)
    many["tools"].push_back({{"type", "function"}, {"function", {{"name", "tool_number_" + std::to_string(i)}}}});
  res = served.post("/v1/chat/completions", many);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body.substr(0, 300);
  EXPECT_NE(res->body.find("'tools'"), std::string::npos) << res->body.substr(0, 300);
  // One grammar per answer: a response_format beside a forced generic call is refused.
  json both = request("required", 1, false);
  both["response_format"] = {{"type", "json_object"}};
  res = served.post("/v1/chat/completions", both);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("response_format"), std::string::npos) << res->body;
}

}  // namespace
}  // namespace ms::server
