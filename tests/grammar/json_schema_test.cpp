// The JSON-schema compiler: strings each schema's grammar must accept and
// must refuse, keywords it must refuse with a message naming them, hostile
// schemas refused quickly, and random schemas whose random accepted texts
// must parse as JSON and validate (tests/grammar/schema_validator.h).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "schema_validator.h"

namespace ms::grammar {
namespace {

using ojson = nlohmann::ordered_json;

bool accepts(const Grammar& g, const std::string& s) {
  Matcher m(g);
  return m.advance(s) && m.can_end();
}

struct Case {
  const char* schema;
  std::vector<std::string> good, bad;
};

TEST(JsonSchema, AcceptsValidAndRejectsInvalidTexts) {
  const std::vector<Case> cases = {
      {R"({"type":"string"})", {R"("")", R"("abc")", R"("a\"b\\c\n")", "\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\""},
       {R"(abc)", R"("abc)", "\"a\nb\"", "\"\xC3\"", "\"\xED\xA0\x80\"", "\"\xC0\xAF\"", R"("a" )", R"(1)"}},
      {R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", R"("abc")", "\"\xC3\xA9\xC3\xA9\"", R"("\n\t")"},
       {R"("a")", R"("abcd")", R"("")"}},
      {R"({"type":"integer"})", {"0", "-7", "123456789", "-0"}, {"01", "1.5", "1e3", "+1", "", "-", "12345678901234567"}},
      {R"({"type":"number"})", {"0", "-1.25", "3e10", "2.5E-3", "1E+2"}, {".5", "1.", "1e", "--1", "NaN", "1e1234"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"}},
      {R"({"type":"null"})", {"null"}, {"nil", "\"null\""}},
      {R"({"type":["string","null"]})", {"null", R"("x")"}, {"1"}},
      {R"({"enum":["red","green",3,null,{"a":[1]}]})", {R"("red")", R"("green")", "3", "null", R"({"a":[1]})"},
       {R"("blue")", "4", R"({"a":[2]})"}},
      {R"({"const":{"k":true}})", {R"({"k":true})"}, {R"({"k":false})", R"({})"}},
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false})",
       {R"({"name":"Bo","age":3})", "{\n  \"name\": \"Bo\",\n  \"age\": 3\n}", R"({ "name": "x", "age": -1 })"},
       {R"({"name":"Bo"})", R"({"age":3,"name":"Bo"})", R"({"name":"Bo","age":3,"x":1})", R"({})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["b"]})",
       {R"({"b":1})", R"({"a":1,"b":2})", R"({"b":2,"c":3})", R"({"a":1,"b":2,"c":3})"},
       {R"({"a":1})", R"({"a":1,"c":3})", R"({})", R"({"b":1,})", R"({,"b":1})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}}})", {R"({})", R"({"a":5})"}, {R"({"b":5})"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})", {R"({})", R"({"x":1,"y":2})"}, {R"({"x":"1"})"}},
      {R"({"type":"object","additionalProperties":false})", {R"({})", "{ }"}, {R"({"x":1})"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})", {"[1]", "[1,2,3]", "[ 1, 2 ]"},
       {"[]", "[1,2,3,4]", R"(["a"])", "[1,]"}},
      {R"({"type":"array","items":false})", {"[]"}, {"[1]"}},
      {R"({"type":"array"})", {"[]", R"([1,"a",null,[{}]])"}, {"[", "[1"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"]}]})",
       {"5", R"({"x":true})"}, {R"({"x":1})", R"("s")"}},
      {R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}},"type":"array","items":{"$ref":"#/$defs/pt"}})",
       {R"([{"x":1,"y":2}])", "[]"}, {R"([{"x":1}])"}},
      {R"({"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},"required":["v"]})",
       {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]})"}, {R"({"v":1,"kids":[{}]})"}},
      {R"({})", {"1", R"({"a":[true,null]})", R"("s")"}, {"", "{"}},
      {R"(true)", {"[]"}, {"]"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const ojson schema = ojson::parse(c.schema);
    const Grammar g = compile_json_schema(schema);
    for (const std::string& s : c.good) {
      EXPECT_TRUE(accepts(g, s)) << "should accept: " << s;
      const ojson v = ojson::parse(s);
      EXPECT_TRUE(testing::valid(v, schema, schema)) << "test case itself invalid: " << s;
    }
    for (const std::string& s : c.bad) EXPECT_FALSE(accepts(g, s)) << "should refuse: " << s;
  }
}

TEST(JsonSchema, AnyObjectIsAnObject) {
  const Grammar g = any_json_object();
  EXPECT_TRUE(accepts(g, R"({"a":{"b":[1,2.5,"x",null,true]}})"));
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, "1"));
}

std::string refusal(const char* schema) {
  try {
    compile_json_schema(ojson::parse(schema));
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
  for (const char* kw : {"pattern", "minimum", "multipleOf", "allOf", "not", "uniqueItems", "patternProperties"}) {
    const std::string schema = std::string(R"({"type":"object","properties":{"x":{")") + kw + R"(":1}}})";
    const std::string msg = refusal(schema.c_str());
    EXPECT_NE(msg.find(std::string("'") + kw + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/properties/x"), std::string::npos) << msg;
  }
  EXPECT_NE(refusal(R"({"type":"strng"})").find("strng"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref":"http://example.com/s.json"})").find("$ref"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref":"#/$defs/missing"})").find("points to nothing"), std::string::npos);
  EXPECT_NE(refusal(R"({"anyOf":[{"type":"string"}],"type":"string"})").find("anyOf"), std::string::npos);
  EXPECT_FALSE(refusal(R"(false)").empty());
  EXPECT_FALSE(refusal(R"({"type":"array","minItems":3,"maxItems":2})").empty());
  EXPECT_FALSE(refusal(R"({"type":"string","maxLength":100000000})").empty());
  // Annotations are fine.
  EXPECT_EQ(refusal(R"({"type":"string","title":"t","description":"d","format":"date-time","default":"x"})"), "");
}

TEST(JsonSchema, HostileSchemasAreRefusedFast) {
  const auto t0 = std::chrono::steady_clock::now();
  // $ref loops that read nothing.
  EXPECT_FALSE(refusal(R"({"$ref":"#"})").empty());
  EXPECT_FALSE(refusal(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})").empty());
  // A required self-reference: no finite value.
  EXPECT_FALSE(refusal(R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})").empty());
  // Deep nesting.
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 200; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_NE(refusal(deep.c_str()).find("deeper"), std::string::npos);
  // A huge enum.
  std::string big = R"({"enum":[)";
  for (int i = 0; i < 100000; ++i) big += (i ? ",\"" : "\"") + std::string(20, 'a' + i % 26) + std::to_string(i) + "\"";
  big += "]}";
  EXPECT_NE(refusal(big.c_str()).find("enum"), std::string::npos);
  // Wide bounds multiplied by nesting.
  std::string wide = R"({"type":"string","maxLength":4000})";
  for (int i = 0; i < 12; ++i)
    wide = R"({"type":"object","properties":{"a":)" + wide + R"(,"b":)" + wide + "}}";
  // 4096 strings of up to 4000 characters: refused by the grammar's size limit.
  EXPECT_NE(refusal(wide.c_str()).find("exceed"), std::string::npos);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 30.0) << "hostile schemas took " << took << " s";  // a hang guard, not a speed test
}

// Random schemas from the supported keywords, and random texts drawn from
// their grammars: each text must parse and validate.
ojson random_schema(std::mt19937& rng, int depth, ojson& defs) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = depth > 3 ? pick(6) : pick(11);
  switch (kind) {
    case 0: {
      ojson s = {{"type", "string"}};
      if (pick(2)) s["maxLength"] = pick(5) + 1;
      if (pick(2)) s["minLength"] = pick(2);
      return s;
    }
    case 1: return {{"type", "integer"}};
    case 2: return {{"type", "number"}};
    case 3: return {{"type", "boolean"}};
    case 4: return {{"enum", ojson::array({"a", 1, nullptr, ojson::array({true})})}};
    case 5: return {{"type", ojson::array({"null", "string"})}};
    case 6: {
      ojson s = {{"type", "object"}, {"properties", ojson::object()}};
      ojson req = ojson::array();
      const int n = pick(4);
      for (int i = 0; i < n; ++i) {
        const std::string name = "p" + std::to_string(i);
        s["properties"][name] = random_schema(rng, depth + 1, defs);
        if (pick(2)) req.push_back(name);
      }
      s["required"] = req;
      if (pick(2)) s["additionalProperties"] = false;
      return s;
    }
    case 7: {
      ojson s = {{"type", "array"}, {"items", random_schema(rng, depth + 1, defs)}};
      if (pick(2)) s["minItems"] = pick(2);
      if (pick(2)) s["maxItems"] = pick(3) + 2;
      return s;
    }
    case 8: return {{"anyOf", ojson::array({random_schema(rng, depth + 1, defs), random_schema(rng, depth + 1, defs)})}};
    case 9: {
      const std::string name = "d" + std::to_string(defs.size());
      defs[name] = true;  // reserved: a nested draw takes the next name
      defs[name] = random_schema(rng, depth + 1, defs);
      return {{"$ref", "#/$defs/" + name}};
    }
    default: return {{"type", "object"}, {"additionalProperties", random_schema(rng, depth + 1, defs)}};
  }
}

TEST(JsonSchema, RandomSchemasGiveValidTexts) {
  std::mt19937 rng(1234);
  const auto t0 = std::chrono::steady_clock::now();
  int texts = 0;
  for (int round = 0; round < 150; ++round) {
    ojson defs = ojson::object();
    ojson schema = random_schema(rng, 0, defs);
    if (!defs.empty()) {
      ojson wrapped = {{"$defs", defs}};
      for (const auto& [k, v] : schema.items()) wrapped[k] = v;
      schema = wrapped;
    }
    SCOPED_TRACE(schema.dump());
    Grammar g;
    try {
      g = compile_json_schema(schema);
    } catch (const SchemaError& e) {
      FAIL() << e.what() << " for " << schema.dump();
    }
    for (int t = 0; t < 8; ++t) {
      Matcher m(g);
      std::string text;
      // A random walk: a random allowed byte, ending when possible with a
      // probability that grows with length.
      for (int step = 0; step < 4000; ++step) {
        const ByteSet next = m.next_bytes();
        if (m.can_end() && (next.none() || rng() % 100 < std::min<size_t>(90, 5 + text.size() / 4))) break;
        ASSERT_TRUE(next.any()) << "dead end after: " << text;
        // Printable ASCII mostly, so texts stay readable.
        std::vector<int> opts;
        for (int b = 0; b < 256; ++b)
          if (next[b] && (b < 0x80 || rng() % 8 == 0)) opts.push_back(b);
        if (opts.empty())
          for (int b = 0; b < 256; ++b)
            if (next[b]) opts.push_back(b);
        const int b = opts[rng() % opts.size()];
        ASSERT_TRUE(m.advance(static_cast<uint8_t>(b)));
        text.push_back(static_cast<char>(b));
      }
      if (!m.can_end()) continue;  // a walk that ran long: not a failure of the grammar
      ojson v;
      ASSERT_NO_THROW(v = ojson::parse(text)) << text;
      EXPECT_TRUE(testing::valid(v, schema, schema)) << text;
      ++texts;
    }
  }
  EXPECT_GT(texts, 500);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 120.0);  // a hang guard
}

}  // namespace
}  // namespace ms::grammar
