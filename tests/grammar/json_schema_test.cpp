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
      // Bounds: integers digit by digit, numbers exactly at the bounds' decimals.
      {R"({"type":"integer","minimum":-12,"maximum":305})", {"-12", "-1", "0", "9", "10", "99", "299", "305"},
       {"-13", "-20", "306", "310", "400", "1000", "-0", "01"}},
      {R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":100})", {"1", "50", "99"}, {"0", "100", "-1"}},
      {R"({"type":"integer","minimum":1.5,"maximum":7.9})", {"2", "7"}, {"1", "8"}},
      {R"({"type":"integer","minimum":10})", {"10", "11", "1234567890123456"}, {"9", "-10", "12345678901234567"}},
      {R"({"type":"number","minimum":-1.5,"maximum":2.25})",
       {"-1.5", "-1.49", "-1", "-0.5", "0", "0.001", "1.999", "2", "2.2", "2.25", "2.250"},
       {"-1.51", "-2", "2.251", "2.26", "3", "1e0", "-0", "-0.0"}},
      {R"({"type":"number","exclusiveMinimum":0.1,"exclusiveMaximum":0.3})", {"0.11", "0.2", "0.299"},
       {"0.1", "0.10", "0.3", "0.30", "0", "0.09"}},
      {R"({"type":"number","minimum":0})", {"0", "0.5", "123456.789"}, {"-0.5", "-1"}},
      {R"({"type":"number","maximum":-0.5})", {"-0.5", "-0.51", "-3"}, {"-0.49", "0", "1"}},
      {R"({"type":"number","multipleOf":0.01,"minimum":0})", {"0", "1", "1.5", "19.99"}, {"0.001", "-1", "1.234"}},
      {R"({"type":"integer","multipleOf":5,"minimum":0,"maximum":20})", {"0", "5", "10", "20"}, {"1", "25", "-5"}},
      {R"({"type":"number","multipleOf":1.5,"minimum":0,"maximum":4})", {"0.0", "1.5", "3.0"}, {"1", "2", "4.5"}},
      {R"({"type":"integer","multipleOf":0.5})", {"1", "-7"}, {"1.5"}},
      {R"({"type":"integer","multipleOf":7})", {"0", "7", "-14", "700000", "999999999999"}, {"1", "-8", "70000001"}},
      {R"({"type":"integer","multipleOf":3,"exclusiveMinimum":0})", {"3", "9", "300"}, {"0", "-3", "4"}},
      {R"({"multipleOf":2,"maximum":0})", {"0", "-2", "-1000"}, {"2", "-3"}},
      // Patterns: searched unless anchored; JSON escapes inside.
      {R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})", {R"("AB-123")"}, {R"("ab-123")", R"("AB-12")", R"("xAB-123")"}},
      {R"({"type":"string","pattern":"^(cat|dog)s?$"})", {R"("cat")", R"("dogs")"}, {R"("cats!")", R"("bird")"}},
      {R"({"type":"string","pattern":"x"})", {R"("x")", R"("axb")"}, {R"("ab")"}},
      {R"({"type":"string","pattern":"^a\"b\\\\c\\.$"})", {R"("a\"b\\c.")"}, {R"("a\"b\\cx")"}},
      {R"({"type":"string","pattern":"^[^0-9]+$"})", {R"("abc")"}, {R"("a1")", R"("")"}},
      {R"({"type":"string","pattern":"^[^]]$"})", {R"("a]")", R"("]]")"}, {R"("a")", R"("]")"}},
      {R"({"type":"string","pattern":"^[-b][a-]$"})", {R"("-a")", R"("b-")"}, {R"("c-")", R"("ba-")"}},
      // Formats.
      {R"({"type":"string","format":"date"})", {R"("2024-02-28")", R"("1999-12-31")"},
       {R"("2024-02-30")", R"("2024-13-01")", R"("2024-1-01")", R"("2024-04-31")"}},
      {R"({"type":"string","format":"date-time"})", {R"("2024-06-01T12:30:00Z")", R"("2024-06-01T23:59:59.123+02:00")"},
       {R"("2024-06-01 12:30:00Z")", R"("2024-06-01T24:00:00Z")", R"("2024-06-01T12:30:00")"}},
      {R"({"type":"string","format":"time"})", {R"("08:15:00Z")"}, {R"("8:15:00Z")"}},
      {R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"}},
      {R"({"type":"string","format":"email"})", {R"("a.b+c@example.com")"}, {R"("a@b")", R"("@example.com")", R"("a..b@x.io")"}},
      {R"({"format":"ipv4"})", {R"("192.168.0.1")"}, {R"("256.1.1.1")", R"("1.2.3")"}},
      // Objects: property counts.
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"minProperties":1,"maxProperties":2})",
       {R"({"a":1})", R"({"b":1,"c":2})"}, {R"({})", R"({"a":1,"b":2,"c":3})"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"},"maxProperties":1})", {R"({})", R"({"x":1})"},
       {R"({"x":1,"y":2})"}},
      // Arrays: prefixItems, then items.
      {R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":{"type":"boolean"}})",
       {"[]", "[1]", R"([1,"a"])", R"([1,"a",true,false])"}, {R"(["a"])", R"([1,2])", R"([1,"a",3])"}},
      {R"({"type":"array","prefixItems":[{"type":"integer"}],"items":false,"minItems":1})", {"[1]"}, {"[]", "[1,2]"}},
      {R"({"type":"array","prefixItems":[{"const":1},{"const":2},{"const":3}],"maxItems":2})", {"[1]", "[1,2]"}, {"[1,2,3]"}},
      // allOf: merged objects; $ref beside keywords.
      {R"({"$defs":{"named":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}},"allOf":[{"$ref":"#/$defs/named"},{"properties":{"age":{"type":"integer","minimum":0}},"required":["age"]}]})",
       {R"({"name":"a","age":3})"}, {R"({"name":"a"})", R"({"age":3})", R"({"name":"a","age":-1})"}},
      {R"({"allOf":[{"type":"integer","minimum":0},{"maximum":9}]})", {"0", "9"}, {"10", "-1"}},
      {R"({"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":2})", {R"("ab")"}, {R"("abc")"}},
      // not over types; enum filtered by its siblings.
      {R"({"not":{"type":["object","array","null"]}})", {"1", R"("s")", "true"}, {"{}", "[]", "null"}},
      {R"({"type":"string","enum":["a",1,"b"]})", {R"("a")", R"("b")"}, {"1"}},
      // oneOf of alternatives that cannot overlap.
      {R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", {R"("x")", "1"}, {"null"}},
      {R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k","x"]},{"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}]})",
       {R"({"k":"a","x":1})", R"({"k":"b"})"}, {R"({"k":"c"})"}},
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
  for (const char* kw : {"if", "contains", "patternProperties", "propertyNames", "dependentRequired",
                         "unevaluatedProperties"}) {
    const std::string schema = std::string(R"({"type":"object","properties":{"x":{")") + kw + R"(":1}}})";
    const std::string msg = refusal(schema.c_str());
    EXPECT_NE(msg.find(std::string("'") + kw + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/properties/x"), std::string::npos) << msg;
  }
  EXPECT_NE(refusal(R"({"type":"strng"})").find("strng"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref":"http://example.com/s.json"})").find("$ref"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref":"#/$defs/missing"})").find("points to nothing"), std::string::npos);
  EXPECT_FALSE(refusal(R"(false)").empty());
  EXPECT_FALSE(refusal(R"({"type":"array","minItems":3,"maxItems":2})").empty());
  EXPECT_FALSE(refusal(R"({"type":"string","maxLength":100000000})").empty());
  // What a grammar cannot decide, refused by name with the reason.
  struct Refused { const char* schema; const char* keyword; const char* says; };
  for (const Refused& r : std::vector<Refused>{
           {R"({"type":"array","uniqueItems":true})", "'uniqueItems'", "apart"},
           {R"({"type":"string","pattern":"(?=a)b"})", "'pattern'", "lookaround"},
           {R"({"type":"string","pattern":"(a)\\1"})", "'pattern'", "backreferences"},
           {R"({"type":"string","pattern":"\\bword"})", "'pattern'", "word boundaries"},
           {R"({"type":"string","pattern":"\\p{L}"})", "'pattern'", "Unicode property"},
           {R"({"type":"string","pattern":"a^b"})", "'pattern'", "start"},
           {R"({"type":"string","pattern":"[é]"})", "'pattern'", "non-ASCII"},
           {R"({"type":"string","pattern":"a{5000}"})", "'pattern'", "counts above"},
           {R"({"type":"string","pattern":"^a$","maxLength":3})", "'pattern'", "minLength/maxLength"},
           {R"({"type":"integer","multipleOf":7,"minimum":1})", "'multipleOf'", "power of ten"},
           {R"({"type":"integer","multipleOf":101})", "'multipleOf'", "step up to 100"},
           {R"({"type":"integer","minimum":5,"maximum":4})", "'minimum'", "no integer"},
           {R"({"type":"number","minimum":1,"exclusiveMaximum":1})", "'minimum'", "no number"},
           {R"({"type":"integer","multipleOf":0})", "'multipleOf'", "above 0"},
           {R"({"not":{"minimum":3}})", "'not'", "over 'type' only"},
           {R"({"type":"number","not":{"type":"integer"}})", "'not'", "numbers that are not integers"},
           {R"({"not":{}})", "'not'", "no value"},
           {R"({"type":"null","not":{"type":"null"}})", "'not'", "excludes every type"},
           {R"({"oneOf":[{"type":"integer"},{"minimum":2}]})", "'oneOf'", "may both match"},
           {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "'allOf'", "types"},
           {R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})", "'pattern'", "differs"},
           {R"({"allOf":[{"properties":{"a":true},"additionalProperties":false},{"required":["b"]}]})", "'required'", "forbids"},
           {R"({"type":"object","minProperties":2})", "'minProperties'", "declared"},
           {R"({"type":"object","properties":{"a":true},"minProperties":2})", "'minProperties'", "declared"},
           {R"({"type":"object","required":["a","b"],"maxProperties":1})", "'maxProperties'", "required"},
           {R"({"type":"array","prefixItems":[true],"items":false,"minItems":2})", "'items'", "prefix"},
           {R"({"enum":[1,2],"type":"string"})", "'enum'", "no value"},
           {R"({"$defs":{"a":{"$id":"http://x/a","$defs":{"b":{"type":"integer"}},"$ref":"#/$defs/b"}},"$ref":"#/$defs/a"})",
            "'$ref'", "own $id"},
       }) {
    const std::string msg = refusal(r.schema);
    EXPECT_NE(msg.find(r.keyword), std::string::npos) << r.schema << " -> " << msg;
    EXPECT_NE(msg.find(r.says), std::string::npos) << r.schema << " -> " << msg;
  }
  // Annotations, unconstrained formats and uniqueItems false are fine.
  EXPECT_EQ(refusal(R"({"type":"string","title":"t","description":"d","format":"uri","default":"x"})"), "");
  EXPECT_EQ(refusal(R"({"type":"array","uniqueItems":false})"), "");
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
  // Nested counts in a pattern share their rules: the grammar grows with
  // their sum, not their product.
  EXPECT_LT(compile_json_schema(ojson::parse(R"({"type":"string","pattern":"^((a{4000}){4000}){4000}$"})")).size(),
            100000u);
  // Groups nested 100,000 deep: an error, not a stack overflow.
  const std::string groups = R"({"type":"string","pattern":")" + std::string(100000, '(') + "a" +
                             std::string(100000, ')') + R"("})";
  EXPECT_NE(refusal(groups.c_str()).find("nest deeper"), std::string::npos);
  // Many bounded numbers: each a few hundred elements at most.
  std::string many = R"({"type":"object","properties":{)";
  for (int i = 0; i < 100; ++i)
    many += (i ? "," : "") + std::string("\"p") + std::to_string(i) + R"(":{"type":"number","minimum":-)" +
            std::to_string(i) + R"(.125,"exclusiveMaximum":)" + std::to_string(1000 + i) + ".5}";
  many += "}}";
  EXPECT_EQ(refusal(many.c_str()), "");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 30.0) << "hostile schemas took " << took << " s";  // a hang guard, not a speed test
}

// A bounded number is read left to right with few alternatives alive: the
// matcher keeps a handful of stacks, not one per length and precision.
TEST(JsonSchema, BoundedNumbersStayNarrow) {
  for (const char* schema : {R"({"type":"number","minimum":-1.5,"maximum":2.25})", R"({"type":"number","minimum":0})",
                             R"({"type":"integer","minimum":-12,"maximum":305})",
                             R"({"type":"number","exclusiveMinimum":0.001,"exclusiveMaximum":1e6})"}) {
    SCOPED_TRACE(schema);
    const Grammar g = compile_json_schema(ojson::parse(schema));
    EXPECT_LT(g.size(), 5000u);
    for (const std::string text : {"-1.25", "0.5", "123456.789", "1.999999", "300"}) {
      Matcher m(g);
      for (char c : text) {
        if (!m.advance(static_cast<uint8_t>(c))) break;
        EXPECT_LE(m.state().size(), 24u) << "after a prefix of " << text;
      }
    }
  }
}

// Random schemas from the supported keywords, and random texts drawn from
// their grammars: each text must parse and validate.
ojson random_schema(std::mt19937& rng, int depth, ojson& defs) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = depth > 3 ? pick(6) : pick(13);
  switch (kind) {
    case 0: {
      ojson s = {{"type", "string"}};
      const int form = pick(4);
      if (form == 1) {
        const char* patterns[] = {"^[a-c]{1,3}-\\d+$", "^(x|yz)*q?$", "b.c", "^[^\"\\\\]{2}$", "^\\w\\s\\S$"};
        s["pattern"] = patterns[pick(5)];
      } else if (form == 2) {
        const char* formats[] = {"date", "time", "date-time", "uuid", "email", "ipv4"};
        s["format"] = formats[pick(6)];
      } else {
        if (pick(2)) s["maxLength"] = pick(5) + 1;
        if (pick(2)) s["minLength"] = pick(2);
      }
      return s;
    }
    case 1:
    case 2: {
      ojson s = {{"type", kind == 1 ? "integer" : "number"}};
      // Bounds of both signs, integral or not, inclusive or exclusive.
      // (Every pair leaves some value: lows end below the highs begin.)
      const double lows[] = {-1000, -7.5, -1, -0.25, 0, 0.1}, highs[] = {1, 3, 12.75, 99, 100000};
      const double int_lows[] = {-1000, -1, 0}, int_highs[] = {3, 99, 100000};
      if (pick(2)) s[pick(2) ? "minimum" : "exclusiveMinimum"] = kind == 1 ? int_lows[pick(3)] : lows[pick(6)];
      if (pick(2)) s[pick(2) ? "maximum" : "exclusiveMaximum"] = kind == 1 ? int_highs[pick(3)] : highs[pick(5)];
      if (pick(4) == 0) s["multipleOf"] = kind == 1 ? 1 : 0.01;
      return s;
    }
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
    case 10: {
      ojson s = {{"type", "array"},
                 {"prefixItems", ojson::array({random_schema(rng, depth + 1, defs), random_schema(rng, depth + 1, defs)})}};
      if (pick(2)) s["items"] = pick(2) ? ojson(false) : random_schema(rng, depth + 1, defs);
      if (pick(2)) s["maxItems"] = pick(4) + 1;
      return s;
    }
    case 11: {
      // allOf of two objects with a shared property.
      ojson a = {{"type", "object"}, {"properties", {{"x", {{"type", "integer"}, {"minimum", -5}}}}}, {"required", {"x"}}};
      ojson b = {{"properties", {{"x", {{"maximum", 5}}}, {"y", random_schema(rng, depth + 1, defs)}}}};
      if (pick(2)) b["minProperties"] = 2;
      return {{"allOf", ojson::array({a, b})}};
    }
    default: return {{"type", "object"}, {"additionalProperties", random_schema(rng, depth + 1, defs)}};
  }
}

TEST(JsonSchema, RandomSchemasGiveValidTexts) {
  std::mt19937 rng(1234);
  const auto t0 = std::chrono::steady_clock::now();
  int texts = 0;
  for (int round = 0; round < 250; ++round) {
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
