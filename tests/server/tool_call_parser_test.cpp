// Tool-call parsing (server/tool_call_parser.h) on model outputs in each
// format the chat templates teach: whole, and streamed split at every byte
// boundary (the streamed result must equal the whole one, and no piece of
// a call may leak into content).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "server/tool_call_parser.h"

namespace ms::server {
namespace {

using json = nlohmann::json;

json tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_current_temperature",
      "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}},
    {"type": "function", "function": {"name": "get_temperature_date",
      "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}, "date": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "set_alarm",
      "parameters": {"type": "object", "properties": {
        "hour": {"type": "integer"}, "ratio": {"type": "number"}, "loud": {"type": "boolean"},
        "days": {"type": "array"}, "opts": {"type": "object"}, "label": {"type": "string"},
        "note": {"type": ["integer", "string"]}, "gone": {"type": "null"}}}}}
  ])");
}

// Qwen's function-calling guide's two-call answer (Qwen2.5 / Qwen3).
const char* kQwenTwoCalls =
    "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"San Francisco, CA, "
    "USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_temperature_date\", \"arguments\": {\"location\": "
    "\"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}}\n</tool_call>";

// Qwen3-Coder / Qwen3.5: the template's own example shape, with a value over two lines.
const char* kXmlCall =
    "I'll check the weather.\n\n<tool_call>\n<function=get_temperature_date>\n<parameter=location>\nSan "
    "Francisco\nCA\n</parameter>\n<parameter=date>\n2024-10-01\n</parameter>\n</function>\n</tool_call>";

// Mixtral-8x22B-Instruct's model card answer (v3 tokenizer, [TOOL_CALLS] rendered).
const char* kMixtral =
    "[TOOL_CALLS] [{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"Paris, France\", "
    "\"unit\": \"celsius\"}}]";

// `text` fed in the given pieces, then flushed.
ToolCallText parse_in_pieces(ToolCallFormat f, const json& tool_list, const std::string& text,
                             const std::vector<size_t>& cuts) {
  ToolCallParser p(f, tool_list);
  ToolCallText got;
  size_t at = 0;
  auto take = [&](ToolCallText o) {
    got.content += o.content;
    for (auto& c : o.calls) got.calls.push_back(c);
  };
  for (const size_t cut : cuts) {
    take(p.push(text.substr(at, cut - at)));
    at = cut;
  }
  take(p.push(text.substr(at)));
  take(p.flush());
  return got;
}

void expect_same_calls(const ToolCallText& got, const ToolCallText& whole, const std::string& where) {
  ASSERT_EQ(got.content, whole.content) << where;
  ASSERT_EQ(got.calls.size(), whole.calls.size()) << where;
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, whole.calls[i].name) << where;
    EXPECT_EQ(got.calls[i].arguments, whole.calls[i].arguments) << where;
  }
}

// The result of feeding `text` split at every pair of byte offsets (three
// pieces), and a byte at a time, compared with the whole parse.
void expect_same_at_every_split(ToolCallFormat f, const std::string& text) {
  const ToolCallText whole = parse_tool_calls(f, tools(), text);
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < text.size(); ++i) every_byte.push_back(i);
  expect_same_calls(parse_in_pieces(f, tools(), text, every_byte), whole, "a byte at a time");
  for (size_t a = 0; a <= text.size(); ++a)
    for (size_t b = a; b <= text.size(); b += 1 + text.size() / 40)
      expect_same_calls(parse_in_pieces(f, tools(), text, {a, b}), whole,
                        "split at " + std::to_string(a) + ", " + std::to_string(b));
}

TEST(ToolCallFormat, DetectedFromTheTemplateThenTheVocabulary) {
  EXPECT_EQ(detect_tool_call_format("... <tool_call>\\n<function=example> ...", false, true, false),
            ToolCallFormat::QwenXml);
  EXPECT_EQ(detect_tool_call_format("... <tool_call>\\n{\"name\": ...", false, true, false), ToolCallFormat::QwenJson);
  EXPECT_EQ(detect_tool_call_format("{{ '[TOOL_CALLS][' }}", false, false, true), ToolCallFormat::Mistral);
  EXPECT_EQ(detect_tool_call_format("", false, false, true), ToolCallFormat::Mistral);
  EXPECT_EQ(detect_tool_call_format("", false, true, false), ToolCallFormat::QwenJson);
  EXPECT_EQ(detect_tool_call_format("<tool_call>", true, false, false), ToolCallFormat::Harmony);
  EXPECT_EQ(detect_tool_call_format("[INST]", false, false, false), ToolCallFormat::None);
}

TEST(ToolCallParser, QwenJsonTwoCalls) {
  const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenJson, tools(), kQwenTwoCalls);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_current_temperature");
  EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"location", "San Francisco, CA, USA"}}));
  EXPECT_EQ(r.calls[1].name, "get_temperature_date");
  EXPECT_EQ(json::parse(r.calls[1].arguments)["date"], "2024-10-01");
  expect_same_at_every_split(ToolCallFormat::QwenJson, kQwenTwoCalls);
}

TEST(ToolCallParser, QwenJsonTextAroundCallsIsContent) {
  const std::string text = std::string("Let me look.\n\n") + kQwenTwoCalls + "\n";
  const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenJson, tools(), text);
  EXPECT_EQ(r.content, "Let me look.");
  EXPECT_EQ(r.calls.size(), 2u);
  expect_same_at_every_split(ToolCallFormat::QwenJson, text);
}

TEST(ToolCallParser, PlainAnswerIsContentAsWritten) {
  const std::string text = "It is 21 degrees.\n\nAnything else? <tool no\n";
  for (ToolCallFormat f : {ToolCallFormat::QwenJson, ToolCallFormat::QwenXml, ToolCallFormat::Mistral}) {
    const ToolCallText r = parse_tool_calls(f, tools(), text);
    EXPECT_EQ(r.content, text) << tool_call_format_name(f);
    EXPECT_TRUE(r.calls.empty());
    expect_same_at_every_split(f, text);
  }
}

TEST(ToolCallParser, MalformedCallsStayText) {
  const std::vector<std::string> bad = {
      "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": }\n</tool_call>",
      "<tool_call>\n{\"name\": \"launch_rocket\", \"arguments\": {}}\n</tool_call>",  // not offered
      "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                              // no name
      "<tool_call>\n{\"name\": \"set_alarm\", \"arguments\": [1]}\n</tool_call>",     // not an object
      "<tool_call>\n{\"name\": \"set_alarm\", \"arguments\": {\"hour\": 7}",         // cut off
      "<tool_call>\n" + std::string(5000, '[') + "\n</tool_call>",                    // past the JSON limits
  };
  for (const std::string& text : bad) {
    const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenJson, tools(), "Sure. " + text);
    EXPECT_EQ(r.content, "Sure. " + text);
    EXPECT_TRUE(r.calls.empty()) << text;
  }
  // A bad call between good ones: the good ones are calls, the bad one text.
  const std::string mixed = std::string(kQwenTwoCalls) + "\n" + bad[1];
  const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenJson, tools(), mixed);
  EXPECT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "\n" + bad[1]);
  expect_same_at_every_split(ToolCallFormat::QwenJson, mixed);
}

TEST(ToolCallParser, WithoutToolsAnyNameIsACall) {
  const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenJson, json::array(),
                                          "<tool_call>\n{\"name\": \"anything\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "anything");
  EXPECT_EQ(r.calls[0].arguments, "{}");
}

TEST(ToolCallParser, QwenJsonCallWithoutClosingTagAtTheEnd) {
  const ToolCallText r = parse_tool_calls(
      ToolCallFormat::QwenJson, tools(), "<tool_call>\n{\"name\": \"set_alarm\", \"arguments\": {\"hour\": 7}}\n");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"hour\":7}");
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallParser, QwenXmlCall) {
  const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenXml, tools(), kXmlCall);
  EXPECT_EQ(r.content, "I'll check the weather.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_temperature_date");
  // Keys in the model's order, the value's inner newline kept.
  EXPECT_EQ(r.calls[0].arguments, "{\"location\":\"San Francisco\\nCA\",\"date\":\"2024-10-01\"}");
  expect_same_at_every_split(ToolCallFormat::QwenXml, kXmlCall);
}

TEST(ToolCallParser, QwenXmlValuesTypedBySchema) {
  const std::string text =
      "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n"
      "<parameter=loud>\ntrue\n</parameter>\n<parameter=days>\n[\"mon\", \"tue\"]\n</parameter>\n"
      "<parameter=opts>\n{\"snooze\": 5}\n</parameter>\n<parameter=label>\n42\n</parameter>\n"
      "<parameter=note>\nsoon\n</parameter>\n<parameter=gone>\nnull\n</parameter>\n</function>\n</tool_call>";
  const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenXml, tools(), text);
  ASSERT_EQ(r.calls.size(), 1u) << r.content;
  const json a = json::parse(r.calls[0].arguments);
  EXPECT_EQ(a["hour"], 7);
  EXPECT_TRUE(a["hour"].is_number_integer());
  EXPECT_EQ(a["ratio"], 0.5);
  EXPECT_EQ(a["loud"], true);
  EXPECT_EQ(a["days"], json({"mon", "tue"}));
  EXPECT_EQ(a["opts"], json({{"snooze", 5}}));
  EXPECT_EQ(a["label"], "42");  // a string parameter stays text
  EXPECT_EQ(a["note"], "soon");  // ["integer", "string"]: not an integer, so the string
  EXPECT_TRUE(a["gone"].is_null());
  expect_same_at_every_split(ToolCallFormat::QwenXml, text);
}

TEST(ToolCallParser, TypedParameterFallsBackToText) {
  const json integer = {{"type", "integer"}}, number = {{"type", "number"}}, boolean = {{"type", "boolean"}};
  EXPECT_EQ(typed_parameter("seven", &integer), "seven");
  EXPECT_EQ(typed_parameter("7.5", &integer), "7.5");
  EXPECT_EQ(typed_parameter("7.5", &number), 7.5);
  EXPECT_EQ(typed_parameter("yes", &boolean), "yes");
  EXPECT_EQ(typed_parameter("{\"a\": 1}", nullptr), json({{"a", 1}}));  // no schema: JSON when it is JSON
  EXPECT_EQ(typed_parameter("Paris", nullptr), "Paris");
}

TEST(ToolCallParser, QwenXmlMalformedStaysText) {
  const std::vector<std::string> bad = {
      "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</function>\n</tool_call>",  // parameter not closed
      "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n</tool_call>",  // function not closed
      "<tool_call>\n<function=launch_rocket>\n</function>\n</tool_call>",                  // not offered
      "<tool_call>\n{\"name\": \"set_alarm\", \"arguments\": {}}\n</tool_call>",            // the other format
  };
  for (const std::string& text : bad) {
    const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenXml, tools(), text);
    EXPECT_EQ(r.content, text);
    EXPECT_TRUE(r.calls.empty()) << text;
  }
}

TEST(ToolCallParser, MistralArrayOfCalls) {
  const ToolCallText r = parse_tool_calls(ToolCallFormat::Mistral, tools(), kMixtral);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_current_temperature");
  EXPECT_EQ(r.calls[0].arguments, "{\"location\":\"Paris, France\",\"unit\":\"celsius\"}");
  expect_same_at_every_split(ToolCallFormat::Mistral, kMixtral);

  // Mistral Nemo's spelling: no space, two calls, the model's own ids.
  const std::string nemo =
      "[TOOL_CALLS][{\"name\": \"set_alarm\", \"arguments\": {\"hour\": 7}, \"id\": \"a1b2c3d4e\"}, "
      "{\"name\": \"set_alarm\", \"arguments\": {\"label\": \"x]}\"}, \"id\": \"f5g6h7i8j\"}]";
  const ToolCallText n = parse_tool_calls(ToolCallFormat::Mistral, tools(), nemo);
  ASSERT_EQ(n.calls.size(), 2u);
  EXPECT_EQ(n.calls[0].id, "a1b2c3d4e");
  EXPECT_EQ(n.calls[1].arguments, "{\"label\":\"x]}\"}");  // brackets inside a string do not end the call
  expect_same_at_every_split(ToolCallFormat::Mistral, nemo);

  // An escaped quote does not end the string: the brackets after it are text.
  const std::string escaped = "[TOOL_CALLS]set_alarm[ARGS]{\"label\": \"a\\\"}]\"}";
  const ToolCallText e = parse_tool_calls(ToolCallFormat::Mistral, tools(), escaped);
  ASSERT_EQ(e.calls.size(), 1u) << e.content;
  EXPECT_EQ(e.calls[0].arguments, "{\"label\":\"a\\\"}]\"}");
  expect_same_at_every_split(ToolCallFormat::Mistral, escaped);
}

TEST(ToolCallParser, MistralNameArgsSpelling) {
  const std::string text = "[TOOL_CALLS]set_alarm[ARGS]{\"hour\": 6}[TOOL_CALLS]get_current_temperature[ARGS]{}";
  const ToolCallText r = parse_tool_calls(ToolCallFormat::Mistral, tools(), text);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "set_alarm");
  EXPECT_EQ(r.calls[0].arguments, "{\"hour\":6}");
  EXPECT_EQ(r.calls[1].name, "get_current_temperature");
  expect_same_at_every_split(ToolCallFormat::Mistral, text);
}

TEST(ToolCallParser, MistralMalformedStaysText) {
  for (const std::string& text : {std::string("[TOOL_CALLS] [{\"name\": \"set_alarm\", \"arguments\": {\"hour\": }}]"),
                                  std::string("[TOOL_CALLS] [{\"name\": \"set_alarm\""),
                                  std::string("[TOOL_CALLS] []"), std::string("[TOOL_CALLS]set_alarm[ARGS]7")}) {
    const ToolCallText r = parse_tool_calls(ToolCallFormat::Mistral, tools(), text);
    EXPECT_EQ(r.content, text);
    EXPECT_TRUE(r.calls.empty()) << text;
  }
}

TEST(ToolCallParser, PrefillPlusOutputParsesAsACall) {
  // tool_choice "required" / a named function: the prefill and the model's continuation form a call.
  const std::string json_named = tool_call_prefill(ToolCallFormat::QwenJson, "set_alarm") + "{\"hour\": 7}}\n</tool_call>";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::QwenJson, tools(), json_named).calls.at(0).arguments, "{\"hour\":7}");
  const std::string json_any = tool_call_prefill(ToolCallFormat::QwenJson, "") + "set_alarm\", \"arguments\": {}}";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::QwenJson, tools(), json_any).calls.at(0).name, "set_alarm");
  const std::string xml =
      tool_call_prefill(ToolCallFormat::QwenXml, "set_alarm") + "<parameter=hour>\n7\n</parameter>\n</function>";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::QwenXml, tools(), xml).calls.at(0).arguments, "{\"hour\":7}");
  const std::string mistral = tool_call_prefill(ToolCallFormat::Mistral, "set_alarm") + "{\"hour\": 7}}]";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::Mistral, tools(), mistral).calls.at(0).arguments, "{\"hour\":7}");
  EXPECT_EQ(tool_call_prefill(ToolCallFormat::Harmony, "set_alarm"), "");
}

// Texts made of the formats' markers, JSON brackets, strings with escapes,
// spaces and words, fed in random pieces: the same as whole, for each format.
TEST(ToolCallParser, RandomTextsInRandomPiecesAsWhole) {
  std::mt19937 rng(11);
  const std::vector<std::string> bits = {
      "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<function=set_alarm>", "<parameter=hour>",
      "</parameter>", "</function>", "{", "}", "[", "]", "\"", "\\", " ", "\n", "  \n ", "set_alarm",
      "{\"name\": \"set_alarm\", \"arguments\": {\"hour\": 7}}", "\"name\"", ": ", "7", "x", "<tool_", "[TOOL"};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) text += bits[rng() % bits.size()];
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i)
      if (rng() % 3 == 0) cuts.push_back(i);
    for (const ToolCallFormat f : {ToolCallFormat::QwenJson, ToolCallFormat::QwenXml, ToolCallFormat::Mistral}) {
      const ToolCallText whole = parse_tool_calls(f, json::array(), text);
      expect_same_calls(parse_in_pieces(f, json::array(), text, cuts), whole,
                        std::string(tool_call_format_name(f)) + ": '" + text + "'");
      if (HasFatalFailure()) return;
    }
  }
}

// A long call and a long run of whitespace, a few bytes a piece (each piece
// resumes the scan; the results are those of the whole text).
TEST(ToolCallParser, LongCallsInManySmallPieces) {
  std::string args;
  for (int i = 0; i < 20000; ++i) args += "{\"a\": ";
  args += "1";
  for (int i = 0; i < 20000; ++i) args += "}";
  const std::string mistral = "[TOOL_CALLS]set_alarm[ARGS]" + args;
  std::string qwen = "<tool_call>\n{\"name\": \"set_alarm\", \"arguments\": {\"label\": \"";
  qwen += std::string(200000, 'x') + "\"}}\n</tool_call>";
  const std::string spaces = "done" + std::string(200000, ' ') + "<tool_call>\n{\"name\": \"set_alarm\"}\n</tool_call>";
  for (const auto& [f, text] : {std::pair{ToolCallFormat::Mistral, mistral}, std::pair{ToolCallFormat::QwenJson, qwen},
                                std::pair{ToolCallFormat::QwenJson, spaces}}) {
    std::vector<size_t> cuts;
    for (size_t i = 3; i < text.size(); i += 3) cuts.push_back(i);
    const ToolCallText got = parse_in_pieces(f, json::array(), text, cuts);
    expect_same_calls(got, parse_tool_calls(f, json::array(), text), text.substr(0, 40));
    EXPECT_EQ(got.calls.size(), f == ToolCallFormat::Mistral ? 0u : 1u);  // 20000 levels: past the JSON depth limit
  }
}

// Bytes that are not UTF-8 in a call (serve's detokenizer never passes them,
// but the parser may be given any text): replaced, not an exception.
TEST(ToolCallParser, InvalidUtf8InACallIsReplaced) {
  const std::string xml = "<tool_call>\n<function=set_alarm>\n<parameter=label>\nwake \xff\xfe up\n</parameter>\n"
                          "</function>\n</tool_call>";
  const ToolCallText r = parse_tool_calls(ToolCallFormat::QwenXml, tools(), xml);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"label\":\"wake \xef\xbf\xbd\xef\xbf\xbd up\"}");
  expect_same_at_every_split(ToolCallFormat::QwenXml, xml);
}

TEST(ToolCallParser, NoneFormatPassesTextThrough) {
  ToolCallParser p(ToolCallFormat::None, tools());
  EXPECT_EQ(p.push(kQwenTwoCalls).content, kQwenTwoCalls);
  EXPECT_EQ(p.flush().content, "");
}

TEST(ToolCallId, MistralIdsAreNineAlphanumerics) {
  EXPECT_EQ(tool_call_id(ToolCallFormat::QwenJson, "chatcmpl-x1", 2), "call_chatcmpl-x1_2");
  EXPECT_EQ(tool_call_id(ToolCallFormat::Mistral, "r", 0, "a1b2c3d4e"), "a1b2c3d4e");
  const std::string a = tool_call_id(ToolCallFormat::Mistral, "r", 0, "too-long-id");
  const std::string b = tool_call_id(ToolCallFormat::Mistral, "r", 1);
  ASSERT_EQ(a.size(), 9u);
  for (char c : a) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << a;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace ms::server
