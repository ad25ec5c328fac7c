// response_format and logprobs without HTTP: the request fields, the
// scheduler's constrained jobs on the tiny model (their answers parse and
// validate; logprob entries spell the answer), and the new metrics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "grammar/json_schema.h"
#include "grammar/schema_validator.h"
#include "server/api.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "tiny_model_util.h"

namespace ms::server {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string chat_body(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}";
}

ApiError refusal(const std::string& body, bool chat = true) {
  try {
    parse_request(body, chat);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "accepted");
}

TEST(ResponseFormat, RequestFields) {
  EXPECT_EQ(parse_request(chat_body(""), true).grammar, nullptr);
  EXPECT_EQ(parse_request(chat_body(R"(,"response_format":{"type":"text"})"), true).grammar, nullptr);
  EXPECT_NE(parse_request(chat_body(R"(,"response_format":{"type":"json_object"})"), true).grammar, nullptr);
  EXPECT_NE(parse_request(chat_body(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"integer"}}})"), true).grammar, nullptr);
  EXPECT_NE(parse_request(R"({"prompt":"p","response_format":{"type":"json_object"}})", false).grammar, nullptr);

  const ApiError e = refusal(chat_body(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"x\\b"}}})"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format");
  EXPECT_NE(std::string(e.what()).find("'pattern'"), std::string::npos) << e.what();
  EXPECT_EQ(refusal(chat_body(R"(,"response_format":{"type":"xml"})")).status, 400);
  EXPECT_EQ(refusal(chat_body(R"(,"response_format":{"type":"json_schema"})")).status, 400);
  EXPECT_EQ(refusal(chat_body(R"(,"response_format":[1])")).status, 400);
}

TEST(Logprobs, RequestFields) {
  EXPECT_EQ(parse_request(chat_body(""), true).top_logprobs, -1);
  EXPECT_EQ(parse_request(chat_body(R"(,"logprobs":true)"), true).top_logprobs, 0);
  EXPECT_EQ(parse_request(chat_body(R"(,"logprobs":true,"top_logprobs":20)"), true).top_logprobs, 20);
  EXPECT_EQ(parse_request(chat_body(R"(,"logprobs":false)"), true).top_logprobs, -1);
  EXPECT_EQ(refusal(chat_body(R"(,"logprobs":true,"top_logprobs":21)")).param, "top_logprobs");
  EXPECT_EQ(refusal(chat_body(R"(,"logprobs":true,"top_logprobs":-1)")).param, "top_logprobs");
  EXPECT_EQ(refusal(chat_body(R"(,"top_logprobs":3)")).param, "top_logprobs");
  EXPECT_EQ(refusal(chat_body(R"(,"logprobs":1)")).param, "logprobs");
  EXPECT_EQ(refusal(R"({"prompt":"p","logprobs":1})", false).param, "logprobs");
}

TEST(Logprobs, JsonShape) {
  LogprobEntry e;
  e.token = "\xC3";  // half a character
  e.logprob = -0.5f;
  e.top = {{"\xC3", -0.5f}, {"a", -1.5f}};
  const nlohmann::json j = logprobs_json({e});
  const nlohmann::json& c = j["content"][0];
  EXPECT_EQ(c["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(c["bytes"], nlohmann::json::array({0xC3}));
  EXPECT_FLOAT_EQ(c["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(c["top_logprobs"].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][1]["token"], "a");
  EXPECT_NO_THROW((void)j.dump());
}

TEST(Metrics, BatchTtftAndSlotSeries) {
  Metrics m;
  for (size_t b : {1, 1, 3, 9}) m.decode_step(b);
  m.time_to_first_token(0.2);
  m.time_to_first_token(7.0);
  m.slot_tokens_per_second(1, 12.5);
  const std::string t = m.render();
  EXPECT_NE(t.find("moestream_decode_batch_size_bucket{le=\"1\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("moestream_decode_batch_size_bucket{le=\"4\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("moestream_decode_batch_size_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("moestream_decode_batch_size_sum 14\n"), std::string::npos) << t;
  EXPECT_NE(t.find("moestream_time_to_first_token_seconds_bucket{le=\"0.25\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("moestream_time_to_first_token_seconds_bucket{le=\"10\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("moestream_time_to_first_token_seconds_count 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("moestream_slot_tokens_per_second{slot=\"1\"} 12.5\n"), std::string::npos) << t;
}

struct Tiny : test::TinyCpuModel {
  Tiny() : TinyCpuModel("structured_test_") {}
};

TEST(Scheduler, ConstrainedJobsGiveValidJsonAndLogprobsSpellIt) {
  Tiny t;
  Scheduler::Options o;
  o.parallel = 2;
  o.ctx = 1024;
  Metrics metrics;
  Scheduler sched(*t.be, t.tok(), o, &metrics);
  const ojson schema = ojson::parse(R"({"type":"object","properties":{
      "id":{"type":"integer"},"name":{"type":"string","maxLength":8},
      "pts":{"type":"array","items":{"type":"number"},"maxItems":3},
      "kind":{"enum":["a","b",null]}},"required":["id","name","kind"],"additionalProperties":false})");
  auto g = std::make_shared<const grammar::Grammar>(grammar::compile_json_schema(schema));
  const std::vector<int32_t> prompt = t.tok().encode("give me json", true, true);
  std::vector<std::shared_ptr<Request>> reqs;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Job j;
    j.prompt = prompt;
    j.sampling.temperature = 1.0f;
    j.sampling.seed = seed;
    j.gen.n_predict = 400;
    j.grammar = g;
    j.top_logprobs = 2;
    reqs.push_back(sched.submit(std::move(j)));
  }
  int closed = 0;
  for (auto& r : reqs) {
    std::string text, spelled;
    Update u;
    size_t entries = 0;
    do {
      u = r->take(std::chrono::milliseconds(100));
      text += u.content;
      for (const LogprobEntry& e : u.logprobs) {
        spelled += e.token;
        ++entries;
        EXPECT_LE(e.logprob, 1e-6f);
        EXPECT_LE(e.top.size(), 2u);
      }
    } while (!u.done);
    ASSERT_TRUE(u.finish_reason == "stop" || u.finish_reason == "length") << u.finish_reason << " " << u.error;
    EXPECT_EQ(spelled, text);  // (the tiny vocabulary has no control tokens in JSON)
    EXPECT_GE(entries + 1, static_cast<size_t>(u.n_completion));
    EXPECT_LE(entries, static_cast<size_t>(u.n_completion));
    if (u.finish_reason != "stop") continue;
    ++closed;
    ojson v;
    ASSERT_NO_THROW(v = ojson::parse(text)) << text;
    EXPECT_TRUE(grammar::testing::valid(v, schema, schema)) << text;
  }
  EXPECT_GE(closed, 3);
  EXPECT_NE(metrics.render().find("moestream_time_to_first_token_seconds_count 6\n"), std::string::npos);
}

// Grammar jobs pick side by side now, mostly through the sampler's lazy
// filter: four at once give each the text it gets alone (greedy and top-k at
// a seed), and every closed answer is valid JSON of the schema.
TEST(Scheduler, ConstrainedJobsSideBySideGiveTheirTextsAlone) {
  Tiny t;
  const ojson schema = ojson::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},"n":{"type":"integer"},
      "tags":{"type":"array","items":{"type":"string"},"maxItems":2}},"required":["name","n"]})");
  auto g = std::make_shared<const grammar::Grammar>(grammar::compile_json_schema(schema));
  const std::vector<int32_t> prompt = t.tok().encode("give me json", true, true);
  auto job = [&](uint64_t seed) {
    Job j;
    j.prompt = prompt;
    j.sampling.temperature = seed == 1 ? 0.0f : 0.9f;
    j.sampling.top_k = 20;
    j.sampling.seed = seed;
    j.gen.n_predict = 300;
    j.grammar = g;
    return j;
  };
  auto text_of = [](const std::shared_ptr<Request>& r, std::string* reason) {
    std::string text;
    Update u;
    do {
      u = r->take(std::chrono::milliseconds(100));
      text += u.content;
    } while (!u.done);
    *reason = u.finish_reason;
    return text;
  };
  std::vector<std::string> alone, reasons(4);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Scheduler::Options o;
    o.parallel = 1;
    o.ctx = 1024;
    Scheduler sched(*t.be, t.tok(), o);
    std::string reason;
    alone.push_back(text_of(sched.submit(job(seed)), &reason));
  }
  Scheduler::Options o;
  o.parallel = 4;
  o.ctx = 1024;
  Scheduler sched(*t.be, t.tok(), o);
  std::vector<std::shared_ptr<Request>> reqs;
  for (uint64_t seed = 1; seed <= 4; ++seed) reqs.push_back(sched.submit(job(seed)));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::string text = text_of(reqs[i], &reasons[i]);
    EXPECT_EQ(text, alone[i]) << "seed " << i + 1;
    if (reasons[i] != "stop") continue;
    ojson v;
    ASSERT_NO_THROW(v = ojson::parse(text)) << text;
    EXPECT_TRUE(grammar::testing::valid(v, schema, schema)) << text;
  }
}

}  // namespace
}  // namespace ms::server
