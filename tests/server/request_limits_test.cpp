// Hostile request bodies (issue #28): nesting deep enough to overflow a
// thread's stack in any recursive walk, huge element counts, numbers past
// int64. Each must come back as a 400 naming the problem, on both endpoints,
// before anything recursive runs.
#include <gtest/gtest.h>

#include <string>

#include "server/api.h"
#include "server/json_limits.h"

namespace ms::server {
namespace {

std::string nested(size_t depth, const std::string& leaf = "1") {
  std::string s;
  s.reserve(2 * depth + leaf.size());
  for (size_t i = 0; i < depth; ++i) s += (i % 2 ? "{\"k\":" : "[");
  s += leaf;
  for (size_t i = depth; i-- > 0;) s += (i % 2 ? "}" : "]");
  return s;
}

// The error of parse_request, or "" when it accepted the body.
ApiError error_of(const std::string& body, bool chat) {
  try {
    parse_request(body, chat);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(200, "");
}

const std::string kUser = R"({"role": "user", "content": "hi"})";

TEST(RequestLimits, DeepNestingIsA400OnBothEndpointsWhereverItIs) {
  const std::string deep = nested(100000);  // ~200 KB, as in the issue
  const std::string chat_bodies[] = {
      R"({"messages": [)" + kUser + R"(], "tools": )" + deep + "}",
      R"({"messages": [)" + kUser + R"(], "chat_template_kwargs": {"x": )" + deep + "}}",
      R"({"messages": [{"role": "user", "content": "hi", "name": )" + deep + "}]}",
      R"({"messages": [)" + kUser + R"(], "unknown_field": )" + deep + "}",
  };
  for (const std::string& b : chat_bodies) {
    const ApiError e = error_of(b, true);
    EXPECT_EQ(e.status, 400) << b.substr(0, 80);
    EXPECT_NE(std::string(e.what()).find("levels deep"), std::string::npos) << e.what();
  }
  const std::string completion_bodies[] = {
      R"({"prompt": )" + deep + "}",
      R"({"prompt": "hi", "stop": )" + deep + "}",
      R"({"prompt": "hi", "logit_bias": {"1": )" + deep + "}}",
  };
  for (const std::string& b : completion_bodies) {
    const ApiError e = error_of(b, false);
    EXPECT_EQ(e.status, 400) << b.substr(0, 80);
    EXPECT_NE(std::string(e.what()).find("levels deep"), std::string::npos) << e.what();
  }
}

TEST(RequestLimits, DepthAtTheLimitIsAcceptedOneMoreIsNot) {
  const JsonLimits lim;
  // The body object is level 1, a field the server ignores ("metadata") adds
  // the rest ("tools" is checked as a list of functions now).
  const std::string at = R"({"messages": [)" + kUser + R"(], "metadata": )" + nested(lim.max_depth - 1) + "}";
  const std::string over = R"({"messages": [)" + kUser + R"(], "metadata": )" + nested(lim.max_depth) + "}";
  EXPECT_EQ(error_of(at, true).status, 200) << error_of(at, true).what();
  EXPECT_EQ(error_of(over, true).status, 400);
  EXPECT_NO_THROW(check_json_limits(nested(5), JsonLimits{5, 100}));
  EXPECT_THROW(check_json_limits(nested(6), JsonLimits{5, 100}), ApiError);
}

TEST(RequestLimits, BracketsAndCommasInsideStringsDoNotCount) {
  // Escaped quotes must not end the string early.
  const std::string s = "\"" + std::string(500, '[') + "\\\"" + std::string(500, ',') + "\"";
  EXPECT_NO_THROW(check_json_limits(s, JsonLimits{2, 2}));
  EXPECT_EQ(error_of(R"({"prompt": )" + s + "}", false).status, 200);
  // Unbalanced closers are the parser's to refuse, not a negative depth here.
  EXPECT_NO_THROW(check_json_limits("]]]]{[", JsonLimits{2, 10}));
  EXPECT_THROW(check_json_limits("]]]]{[[", JsonLimits{2, 10}), ApiError);
}

TEST(RequestLimits, AHugeElementCountIsA400) {
  const JsonLimits lim;
  std::string many = "[0";
  for (size_t i = 0; i < lim.max_items + 10; ++i) many += ",0";
  many += "]";
  for (bool chat : {true, false}) {
    const std::string b = chat ? R"({"messages": [)" + kUser + R"(], "tools": )" + many + "}"
                               : R"({"prompt": "hi", "stop": )" + many + "}";
    const ApiError e = error_of(b, chat);
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("JSON elements"), std::string::npos) << e.what();
  }
}

TEST(RequestLimits, MaxTokensOutOfRangeNamesTheValueSent) {
  const std::string m = R"({"messages": [)" + kUser + "], ";
  for (const char* v : {"9223372036854775808", "18446744073709551615", "-9223372036854775808", "2147483648",
                        "-2"}) {
    for (const char* name : {"max_tokens", "max_completion_tokens"}) {
      const ApiError e = error_of(m + "\"" + name + "\": " + v + "}", true);
      EXPECT_EQ(e.status, 400) << v;
      EXPECT_EQ(e.param, name);
      EXPECT_NE(std::string(e.what()).find(std::string("(got ") + v + ")"), std::string::npos) << e.what();
    }
  }
  EXPECT_NE(std::string(error_of(m + R"("max_tokens": 1e300})", true).what()).find("1e+300"), std::string::npos);
  EXPECT_EQ(parse_request(m + R"("max_tokens": 2147483647})", true).gen.n_predict, 2147483647);
  EXPECT_EQ(parse_request(m + R"("max_tokens": -1})", true).gen.n_predict, -1);
  // A huge top_k is "no limit", never a wrapped negative value.
  EXPECT_GT(parse_request(m + R"("top_k": 9223372036854775808})", true).sampling.top_k, 1000000);
}

// Found by fuzz/http_request_fuzz.cpp: the parser's message quoted half of a
// UTF-8 sequence, and dumping the error body threw (nlohmann's type_error 316).
TEST(RequestLimits, AParseErrorMessageIsValidJsonText) {
  const ApiError e = error_of("{\"messages\":[\xc2\xa4{\"role\":\"user\"}]}", true);
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  EXPECT_NO_THROW((void)e.body().dump());
}

// Found by the fuzzer too: a number past double's range is nlohmann's
// out_of_range, not a parse_error; it escaped parse_request (a 500).
TEST(RequestLimits, ANumberPastDoublesRangeIsA400) {
  for (const char* v : {"1e470", "-1e99999", "123456789e400"}) {
    const ApiError e = error_of(std::string(R"({"prompt": "hi", "temperature": )") + v + "}", false);
    EXPECT_EQ(e.status, 400) << v;
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ms::server
