// gpt-oss's harmony chat template (tests/tokenizer/templates/openai-gpt-oss-120b.jinja)
// rendered by moestream's Jinja. The expected prompts are written out by hand
// from the template's rules (system header with date and reasoning effort,
// the first system/developer message as "# Instructions", tools as a
// TypeScript namespace, earlier answers without their analysis, tool calls
// and results on the commentary channel); the second test renders the same
// and harder conversations with Python Jinja2 as transformers does
// (tools/chat_templates/render.py) and wants byte-identical output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "template_test_util.h"
#include "tokenizer/jinja.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
using Json = jinja::Json;

using test::read_file;

const fs::path kTemplate = fs::path(MS_SOURCE_DIR) / "tests" / "tokenizer" / "templates" / "openai-gpt-oss-120b.jinja";

// render.py's strftime_now: 2024-07-26 12:00 local time.
std::time_t fixed_now() {
  std::tm day{};
  day.tm_year = 124, day.tm_mon = 6, day.tm_mday = 26, day.tm_hour = 12, day.tm_isdst = -1;
  return std::mktime(&day);
}

std::string render(const Json& ctx) { return jinja::Template(read_file(kTemplate)).render(ctx, fixed_now()); }

Json msg(const char* role, const std::string& content) { return Json{{"role", role}, {"content", content}}; }

Json weather_tool() {
  return Json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"},
      "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}})");
}

Json tool_call_message(const char* thinking) {
  Json m = Json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]})");
  if (thinking) m["thinking"] = thinking;
  return m;
}

// The system message every prompt starts with.
std::string system_header(const std::string& effort = "medium", bool tools = false) {
  return "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
         "Knowledge cutoff: 2024-06\nCurrent date: 2024-07-26\n\nReasoning: " +
         effort +
         "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message." +
         (tools ? "\nCalls to these tools must go to the commentary channel: 'functions'." : "") + "<|end|>";
}

TEST(HarmonyTemplate, OneUserMessage) {
  const Json ctx = {{"messages", Json::array({msg("user", "Hello!")})}, {"add_generation_prompt", true}};
  EXPECT_EQ(render(ctx), system_header() + "<|start|>user<|message|>Hello!<|end|><|start|>assistant");
}

TEST(HarmonyTemplate, SystemBecomesDeveloperInstructionsAndEarlierAnswersAreFinal) {
  for (const char* first_role : {"system", "developer"}) {
    const Json ctx = {{"messages", Json::array({msg(first_role, "Be brief."), msg("user", "Hi"),
                                                msg("assistant", "Hello!"), msg("user", "A joke?")})},
                      {"add_generation_prompt", true},
                      {"reasoning_effort", "high"}};
    EXPECT_EQ(render(ctx), system_header("high") +
                               "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
                               "<|start|>user<|message|>Hi<|end|>"
                               "<|start|>assistant<|channel|>final<|message|>Hello!<|end|>"
                               "<|start|>user<|message|>A joke?<|end|><|start|>assistant")
        << first_role;
  }
}

TEST(HarmonyTemplate, ToolsToolCallAndResult) {
  const Json ctx = {{"messages", Json::array({msg("user", "Weather in Paris?"), tool_call_message("Need weather."),
                                              msg("tool", "{\"temp\": 21}")})},
                    {"tools", Json::array({weather_tool()})},
                    {"add_generation_prompt", true}};
  EXPECT_EQ(render(ctx),
            system_header("medium", true) +
                "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
                "// Weather in a city\ntype get_weather = (_: {\n// the city\ncity: string,\nunit?: \"c\" | \"f\",\n"
                "}) => any;\n\n} // namespace functions<|end|>"
                "<|start|>user<|message|>Weather in Paris?<|end|>"
                // No final answer follows the call yet: its analysis is kept.
                "<|start|>assistant<|channel|>analysis<|message|>Need weather.<|end|>"
                "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                "{\"city\": \"Paris\"}<|call|>"
                // The result, as a JSON string.
                "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
                "\"{\\\"temp\\\": 21}\"<|end|>"
                "<|start|>assistant");
}

TEST(HarmonyTemplate, AnalysisOfACallIsDroppedOnceAFinalAnswerFollows) {
  Json answer = msg("assistant", "It is 21 degrees.");
  const Json ctx = {{"messages", Json::array({msg("user", "Weather?"), tool_call_message("Need weather."),
                                              msg("tool", "21"), answer, msg("user", "Thanks")})},
                    {"add_generation_prompt", true}};
  const std::string out = render(ctx);
  EXPECT_EQ(out.find("Need weather."), std::string::npos) << out;
  EXPECT_NE(out.find("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"),
            std::string::npos);
  EXPECT_NE(out.find("<|start|>assistant<|channel|>final<|message|>It is 21 degrees.<|end|>"), std::string::npos);
}

TEST(HarmonyTemplate, LastAssistantTurnWithoutGenerationPromptEndsWithReturn) {
  Json last = msg("assistant", "4");
  last["thinking"] = "2+2=4";
  Json earlier = msg("assistant", "2");
  earlier["thinking"] = "1+1=2";
  const Json ctx = {{"messages", Json::array({msg("user", "1+1?"), earlier, msg("user", "2+2?"), last})},
                    {"add_generation_prompt", false}};
  EXPECT_EQ(render(ctx), system_header() +
                             "<|start|>user<|message|>1+1?<|end|>"
                             "<|start|>assistant<|channel|>final<|message|>2<|end|>"
                             "<|start|>user<|message|>2+2?<|end|>"
                             "<|start|>assistant<|channel|>analysis<|message|>2+2=4<|end|>"
                             "<|start|>assistant<|channel|>final<|message|>4<|return|>");
}

TEST(HarmonyTemplate, ModelIdentityAndBuiltinTools) {
  const Json ctx = {{"messages", Json::array({msg("user", "x")})},
                    {"add_generation_prompt", true},
                    {"model_identity", "You are a test model."},
                    {"builtin_tools", Json::array({"python"})}};
  const std::string out = render(ctx);
  EXPECT_EQ(out.rfind("<|start|>system<|message|>You are a test model.\nKnowledge cutoff: 2024-06\n", 0), 0u) << out;
  const size_t tools = out.find("Reasoning: medium\n\n# Tools\n\n## python\n\nUse this tool to execute Python code");
  const size_t channels = out.find("# Valid channels:");
  EXPECT_NE(tools, std::string::npos) << out;
  EXPECT_LT(tools, channels);
  EXPECT_EQ(out.find("## browser"), std::string::npos);
}

TEST(HarmonyTemplate, RefusesWhatTheFormatForbids) {
  // Channel markup in a content field, a tool result with no call before it,
  // and both content and thinking beside a tool call.
  Json call_with_both = tool_call_message("t");
  call_with_both["content"] = "c";
  const Json bad[] = {
      Json::array({msg("user", "x"), msg("assistant", "<|channel|>analysis<|message|>hm"), msg("user", "y")}),
      Json::array({msg("user", "x"), msg("tool", "42")}),
      Json::array({msg("user", "x"), call_with_both}),
  };
  for (const Json& m : bad)
    EXPECT_THROW(render(Json{{"messages", m}, {"add_generation_prompt", true}}), jinja::TemplateRaised) << m.dump();
}

TEST(HarmonyTemplate, HostileInputsEndInALimitNotACrash) {
  // A tool whose parameter nests arrays 200 deep: the template's type
  // renderer recurses once per level, past Limits::max_call_depth.
  Json type = {{"type", "object"}};
  for (int i = 0; i < 200; ++i) type = Json{{"type", "array"}, {"items", type}};
  Json tool = weather_tool();
  tool["function"]["parameters"]["properties"]["deep"] = type;
  const Json deep = {{"messages", Json::array({msg("user", "x")})},
                     {"tools", Json::array({tool})},
                     {"add_generation_prompt", true}};
  EXPECT_THROW(render(deep), jinja::LimitExceeded);
  // A huge message renders (it is only copied), a longer one than the output
  // limit is refused.
  const std::string big(4u << 20, 'a');
  const std::string out = render({{"messages", Json::array({msg("user", big)})}, {"add_generation_prompt", true}});
  EXPECT_NE(out.find(big), std::string::npos);
  const std::string huge(jinja::Limits().max_output_bytes + 1, 'b');
  EXPECT_THROW(render({{"messages", Json::array({msg("user", huge)})}, {"add_generation_prompt", true}}),
               jinja::LimitExceeded);
}

// ---------------------------------------------------------------- against Python Jinja2

std::string python_with_jinja2() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    const std::string cmd = std::string(py) + " -c 'import jinja2' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

TEST(HarmonyTemplate, RendersAsJinja2DoesOnHarmonyConversations) {
  const std::string py = python_with_jinja2();
  if (py.empty()) GTEST_SKIP() << "python3 with jinja2 not found (Debian: python3-jinja2)";
  // Tools with the parameter kinds the template's TypeScript rendering handles.
  const Json rich_tool = Json::parse(R"({"type": "function", "function": {"name": "search",
      "description": "Search documents", "parameters": {"type": "object", "properties": {
      "query": {"type": "string", "description": "what to find"},
      "limit": {"type": "integer", "default": 10},
      "tags": {"type": "array", "items": {"type": "string"}},
      "scores": {"type": "array", "items": {"type": "number"}, "nullable": true},
      "filter": {"type": "object", "properties": {"lang": {"type": "string"}, "year": {"type": "integer"}},
                 "required": ["lang"]},
      "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
      "when": {"oneOf": [{"type": "string", "description": "a date"}, {"type": "integer"}]},
      "any": {"type": ["string", "number"]},
      "flag": {"type": "boolean"}}, "required": ["query"]}}})");
  const Json no_params = Json::parse(R"({"type": "function", "function": {"name": "now", "description": "The time"}})");
  Json answer = msg("assistant", "21 degrees.");
  answer["thinking"] = "Report it.";
  std::vector<Json> ctxs;
  auto add = [&](Json messages, Json extra = Json::object()) {
    for (bool gen : {true, false}) {
      Json c = {{"messages", messages}, {"add_generation_prompt", gen}};
      for (auto it = extra.begin(); it != extra.end(); ++it) c[it.key()] = it.value();
      ctxs.push_back(c);
    }
  };
  add(Json::array({msg("user", "Hello!")}));
  add(Json::array({msg("developer", "Be brief."), msg("user", "Hi")}), {{"reasoning_effort", "low"}});
  add(Json::array({msg("system", "S"), msg("user", "Hi"), answer, msg("user", "More")}), {{"reasoning_effort", "high"}});
  add(Json::array({msg("user", "Weather?"), tool_call_message("Need weather."), msg("tool", "{\"temp\": 21}")}),
      {{"tools", Json::array({weather_tool(), rich_tool, no_params})}});
  add(Json::array({msg("user", "Weather?"), tool_call_message(nullptr), msg("tool", "21"), answer}),
      {{"tools", Json::array({weather_tool()})}});
  add(Json::array({msg("user", "Search")}), {{"builtin_tools", Json::array({"browser", "python"})},
                                              {"model_identity", "You are Test."},
                                              {"tools", Json::array({rich_tool})}});
  add(Json::array({msg("user", "x"), msg("tool", "42")}));  // refused
  add(Json::array({msg("user", "unicode: h\u00e9llo \u4f60\u597d \U0001F600 \"quotes\" \\ back\nslash")}));

  const Json req = {{"templates", Json::array({read_file(kTemplate)})}, {"contexts", ctxs}};
  const fs::path in = fs::temp_directory_path() / ("ms_harmony_req_" + std::to_string(::getpid()) + ".json");
  const fs::path outp = fs::temp_directory_path() / ("ms_harmony_out_" + std::to_string(::getpid()) + ".json");
  std::ofstream(in) << req.dump();
  const std::string cmd = py + " " + (fs::path(MS_SOURCE_DIR) / "tools" / "chat_templates" / "render.py").string() +
                          " < " + in.string() + " > " + outp.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Json ref = Json::parse(read_file(outp))[0];
  fs::remove(in);
  fs::remove(outp);
  ASSERT_EQ(ref.size(), ctxs.size());
  const jinja::Template t(read_file(kTemplate));
  int raised = 0;
  for (size_t i = 0; i < ctxs.size(); ++i) {
    if (ref[i].contains("error")) {
      EXPECT_THROW(t.render(ctxs[i], fixed_now()), jinja::TemplateRaised) << ref[i]["error"];
      ++raised;
      continue;
    }
    EXPECT_EQ(t.render(ctxs[i], fixed_now()), ref[i]["text"].get<std::string>()) << "context " << i << ": "
                                                                                  << ctxs[i].dump();
  }
  EXPECT_EQ(raised, 2);  // the tool result without a call, with and without the generation prompt
}

}  // namespace
}  // namespace ms
