// parse_json_bounded (server/json_limits.h): the value nlohmann's parser
// builds, keys in the order sent, with keys per object bounded and time linear
// in the number of keys (counted in comparisons of a probe key type, not in time).
#include <gtest/gtest.h>

#include <string>

#include "server/api.h"
#include "server/json_limits.h"

namespace ms::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string object_of(size_t n) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  return s + "}";
}

TEST(JsonBounded, SameValueAsNlohmann) {
  for (const char* text : {R"({"b":1,"a":[1,2,{"z":null,"y":true}],"c":"x\u00e9","d":-1.5e3,"e":18446744073709551615})",
                           "[]", "{}", "\"s\"", "0", R"([{"a":{"b":{"c":[]}}}])"}) {
    const ojson want = ojson::parse(text);
    const ojson got = parse_json_bounded(text);
    EXPECT_EQ(got, want) << text;
    EXPECT_EQ(got.dump(), want.dump()) << text;  // the order of keys too
  }
}

TEST(JsonBounded, RepeatedKeyKeepsFirstPlaceLastValue) {
  const ojson got = parse_json_bounded(R"({"a":1,"b":2,"a":3})");
  EXPECT_EQ(got.dump(), ojson::parse(R"({"a":1,"b":2,"a":3})").dump());
  EXPECT_EQ(got.dump(), R"({"a":3,"b":2})");
}

TEST(JsonBounded, KeysPerObjectAreBounded) {
  JsonLimits lim;
  lim.max_keys = 50;
  EXPECT_EQ(parse_json_bounded(object_of(50), lim).size(), 50u);
  try {
    parse_json_bounded("{\"x\": {\"deep\": " + object_of(51) + "}}", lim);
    FAIL() << "51 keys accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("more than 50 keys"), std::string::npos) << e.what();
  }
  // The default allows what real requests hold and refuses a flood.
  EXPECT_NO_THROW(parse_json_bounded(object_of(2048)));
  EXPECT_THROW(parse_json_bounded(object_of(2049)), ApiError);
}

TEST(JsonBounded, ManyObjectsOfManyKeysParse) {
  // 90 objects of 1000 keys (90,000 elements, under the item limit): each
  // key is inserted by a hash lookup, so this is quick where nlohmann's
  // ordered insert would compare ~45 million keys.
  std::string text = "[";
  for (int i = 0; i < 90; ++i) text += (i ? "," : "") + object_of(1000);
  text += "]";
  JsonLimits lim;
  lim.max_items = 200000;
  const ojson v = parse_json_bounded(text, lim);
  ASSERT_EQ(v.size(), 90u);
  EXPECT_EQ(v[89]["k999"], 999);
  EXPECT_EQ(v[0].begin().key(), "k0");
}

TEST(JsonBounded, ErrorsSayWhatWasWrong) {
  for (const char* bad : {"{", "{\"a\":}", "[1,]", "1e470", "\xff"}) {
    try {
      parse_json_bounded(bad);
      FAIL() << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
      for (char c : std::string(e.what())) EXPECT_LT(static_cast<unsigned char>(c), 0x80);
    }
  }
  EXPECT_THROW(parse_json_bounded(std::string(100, '[') + std::string(100, ']')), ApiError);
}

}  // namespace
}  // namespace ms::server
