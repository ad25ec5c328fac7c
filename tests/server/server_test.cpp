// The server's policy without HTTP: request parsing and its errors, stop
// strings and reasoning split on streamed pieces, the prompt cache's slot
// choice, and the scheduler on the tiny model (greedy output equals
// generate(), a cached prefix gives the same tokens as a fresh prefill,
// cancellation frees the slot, concurrent jobs all finish).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/synthetic_model.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_vocab.h"
#include "server/api.h"
#include "server/chat.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/text_stream.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "tiny_model_util.h"

namespace ms::server {
namespace {

namespace fs = std::filesystem;

int status_of(const std::string& body, bool chat = true) {
  try {
    parse_request(body, chat);
    return 200;
  } catch (const ApiError& e) {
    return e.status;
  }
}

std::string param_of(const std::string& body) {
  try {
    parse_request(body, true);
  } catch (const ApiError& e) {
    return e.param;
  }
  return "";
}

TEST(Api, ParsesAChatRequest) {
  const CompletionRequest r = parse_request(
      R"({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
          {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
          "max_tokens": 16, "temperature": 0, "top_k": 5, "seed": 7, "stop": "END", "stream": true,
          "stream_options": {"include_usage": true}, "some_future_field": {"x": 1},
          "chat_template_kwargs": {"enable_thinking": false}, "reasoning_format": "separate"})",
      true);
  EXPECT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "hi there");
  EXPECT_EQ(r.gen.n_predict, 16);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.sampling.seed, 7u);
  ASSERT_EQ(r.stop.size(), 1u);
  EXPECT_TRUE(r.stream && r.include_usage && r.separate_reasoning);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  const CompletionRequest t = parse_request(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]})",
      true);
  EXPECT_EQ(t.template_kwargs["tools"][0]["function"]["name"], "f");
  const CompletionRequest c = parse_request(R"({"prompt": "Once", "stop": ["a", "b"]})", false);
  EXPECT_EQ(c.prompt, "Once");
  EXPECT_EQ(c.stop.size(), 2u);
  EXPECT_EQ(c.gen.n_predict, -1);  // no max_tokens: until end of text or a full context
}

TEST(Api, RejectsBadRequestsWith400AndTheField) {
  EXPECT_EQ(status_of("{not json"), 400);
  EXPECT_EQ(status_of("[1, 2]"), 400);
  EXPECT_EQ(status_of(R"({"messages": []})"), 400);
  EXPECT_EQ(status_of(R"({})"), 400);
  EXPECT_EQ(status_of(R"({"messages": "hi"})"), 400);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "wizard", "content": "x"}]})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": ""})", false), 400);
  EXPECT_EQ(status_of("{\"prompt\": \"\xff\xfe\"}", false), 400);           // not UTF-8
  EXPECT_EQ(status_of("{\"prompt\": \"\xc3\"}", false), 400);                // truncated
  EXPECT_EQ(status_of("{\"prompt\": \"h\xc3\xa9 \xe4\xbd\xa0\"}", false), 200);  // é 你
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(param_of("{" + m + R"(, "temperature": "hot"})"), "temperature");
  EXPECT_EQ(param_of("{" + m + R"(, "temperature": -1})"), "temperature");
  EXPECT_EQ(param_of("{" + m + R"(, "top_p": 2})"), "top_p");
  EXPECT_EQ(param_of("{" + m + R"(, "max_tokens": -5})"), "max_tokens");
  EXPECT_EQ(param_of("{" + m + R"(, "max_tokens": 1.5})"), "max_tokens");
  EXPECT_EQ(param_of("{" + m + R"(, "n": 9})"), "n");
  EXPECT_EQ(param_of("{" + m + R"(, "n": 0})"), "n");
  EXPECT_EQ(status_of("{" + m + R"(, "n": 2, "stream": true})"), 200);
  EXPECT_EQ(status_of("{" + m + R"(, "n": 8})"), 200);
  EXPECT_EQ(param_of("{" + m + R"(, "stop": 3})"), "stop");
  EXPECT_EQ(param_of("{" + m + R"(, "stream": "yes"})"), "stream");
  EXPECT_EQ(param_of("{" + m + R"(, "presence_penalty": 5})"), "presence_penalty");
  EXPECT_EQ(status_of("{" + m + R"(, "n": 1, "max_tokens": null, "unknown": [1]})"), 200);
  for (const char* bias : {R"([1])", R"({"x": 1})", R"({"-1": 1})", R"({"007": 1})", R"({"5": "high"})",
                           R"({"5": 100.5})", R"({"99999999999": 1})"})
    EXPECT_EQ(param_of("{" + m + R"(, "logit_bias": )" + bias + "}"), "logit_bias") << bias;
  std::string many = "{";
  for (int i = 0; i <= 1024; ++i) many += (i ? ", \"" : "\"") + std::to_string(i) + "\": 1";
  EXPECT_EQ(param_of("{" + m + R"(, "logit_bias": )" + many + "}}"), "logit_bias");
  const CompletionRequest b = parse_request("{" + m + R"(, "logit_bias": {"0": -100, "42": 7.5}})", true);
  ASSERT_EQ(b.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(b.sampling.logit_bias[1], (std::pair<int32_t, float>{42, 7.5f}));
  ApiError e(400, "x", "invalid_request_error", "temperature");
  EXPECT_EQ(e.body()["error"]["param"], "temperature");
  EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
}

TEST(TextStream, StopStringsAreNeverEmittedEvenAcrossPieces) {
  StopMatcher m({"STOP", "\n\n"});
  std::string out = m.push("Hello ST");
  EXPECT_EQ(out, "Hello ");  // "ST" could start STOP: held back
  out += m.push("ART and S");
  EXPECT_EQ(out, "Hello START and ");
  out += m.push("TOP more");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello START and ");
  EXPECT_EQ(m.push("x"), "");
  StopMatcher n({"END"});
  EXPECT_EQ(n.push("abE"), "ab");
  EXPECT_EQ(n.flush(), "E");  // no stop came: the held text is emitted at the end
  EXPECT_FALSE(n.stopped());
}

// A client's stop string may be long and the output may follow it for a
// while: the held text is searched in linear time (a quadratic search per
// piece made such a request cost minutes of the worker).
TEST(TextStream, LongStopStringsHeldAcrossManyPieces) {
  StopMatcher m({std::string(20000, 'a') + "b", "zz"});
  std::string out;
  for (int i = 0; i < 300; ++i) out += m.push(std::string(100, 'a'));
  EXPECT_EQ(out, std::string(10000, 'a'));  // the last 20000 could still start the stop
  EXPECT_FALSE(m.stopped());
  out += m.push("b and more");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, std::string(10000, 'a'));
}

TEST(TextStream, ThinkSplitterSeparatesReasoning) {
  ThinkSplitter s;
  std::string content, reasoning;
  for (const char* piece : {"<th", "ink>\nI should", " answer.</thi", "nk>\n\nThe answer", " is 4."}) {
    ThinkSplitter::Out o = s.push(piece);
    content += o.content;
    reasoning += o.reasoning;
  }
  ThinkSplitter::Out f = s.flush();
  content += f.content;
  reasoning += f.reasoning;
  EXPECT_EQ(reasoning, "I should answer.");
  EXPECT_EQ(content, "The answer is 4.");
  ThinkSplitter opened(true);  // the template already wrote <think>
  ThinkSplitter::Out o = opened.push("\nhmm</think>ok");
  EXPECT_EQ(o.reasoning, "hmm");
  EXPECT_EQ(o.content, "ok");
  EXPECT_TRUE(prompt_opens_think("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(PromptCache, ChoosesTheFreeSlotWithTheLongestSharedPrefix) {
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 9}, empty;
  std::vector<SlotView> slots = {{&a, false, 5}, {&b, false, 1}, {&empty, false, 0}};
  auto [i, keep] = choose_slot(slots, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(i, 0);
  EXPECT_EQ(keep, 4u);
  // The whole prompt cached: its last token is run again for its logits.
  std::tie(i, keep) = choose_slot(slots, {1, 2, 3, 4});
  EXPECT_EQ(i, 0);
  EXPECT_EQ(keep, 3u);
  // Nothing shared: the least recently used slot.
  std::tie(i, keep) = choose_slot(slots, {7, 7});
  EXPECT_EQ(i, 2);
  EXPECT_EQ(keep, 0u);
  slots[0].busy = slots[1].busy = slots[2].busy = true;
  EXPECT_EQ(choose_slot(slots, {1}).first, -1);
}

TEST(Metrics, RendersPrometheusText) {
  Metrics m;
  m.request("/v1/chat/completions", 200);
  m.tokens(10, 4, 3);
  m.generated_token();
  m.set_queue(2, 1);
  const std::string t = m.render();
  for (const char* want : {"moestream_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1",
                           "moestream_prompt_tokens_total 10", "moestream_prompt_cached_tokens_total 4",
                           "moestream_completion_tokens_total 3", "moestream_queue_depth 2",
                           "moestream_expert_telemetry_available 0", "moestream_expert_hit_rate 0",
                           "moestream_expert_h2d_bytes_total 0", "moestream_expert_cpu_share 0",
                           "# TYPE moestream_tokens_per_second gauge"})
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
}

// The value of an unlabelled metric in Prometheus text (NaN when absent).
double metric_value(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = ("\n" + text).find(key);
  if (at == std::string::npos) return std::nan("");
  return std::stod(text.substr(at + key.size() - 1));
}

TEST(Metrics, ExpertTelemetryMapsToTheMetricValues) {
  ExpertTelemetry t;
  t.layers = {{6, 2, 2}, {0, 0, 0}, {3, 1, 0}};  // (resident, streamed, host) pairs per layer: 9 of 14 resident
  t.decode = {1, 1, 1};                         // a subset of the above: must not be counted twice
  t.h2d_bytes = 123456789;
  // Not hybrid: every expert in one place, so nothing is reported whatever the counts say.
  const ExpertMetrics off = expert_metrics(t);
  EXPECT_FALSE(off.available);
  EXPECT_EQ(off.hit_rate, 0);
  EXPECT_EQ(off.h2d_bytes, 0u);
  EXPECT_EQ(off.cpu_expert_share, 0);

  t.hybrid = true;
  const ExpertMetrics on = expert_metrics(t);
  EXPECT_TRUE(on.available);
  EXPECT_DOUBLE_EQ(on.hit_rate, 9.0 / 14.0);
  EXPECT_DOUBLE_EQ(on.cpu_expert_share, 2.0 / 14.0);
  EXPECT_EQ(on.h2d_bytes, 123456789u);
  // Hybrid before any pass: no pairs, no division by zero.
  ExpertTelemetry fresh;
  fresh.hybrid = true;
  EXPECT_EQ(expert_metrics(fresh).hit_rate, 0);
  EXPECT_EQ(expert_metrics(fresh).cpu_expert_share, 0);

  Metrics m;
  m.set_experts(on);
  const std::string text = m.render();
  EXPECT_EQ(metric_value(text, "moestream_expert_telemetry_available"), 1) << text;
  EXPECT_DOUBLE_EQ(metric_value(text, "moestream_expert_hit_rate"), 9.0 / 14.0);
  EXPECT_DOUBLE_EQ(metric_value(text, "moestream_expert_cpu_share"), 2.0 / 14.0);
  EXPECT_EQ(metric_value(text, "moestream_expert_h2d_bytes_total"), 123456789.0);
}

// ---------------------------------------------------------------- the scheduler on the tiny model

struct Tiny : test::TinyCpuModel {
  Tiny() : TinyCpuModel("server_test_") {}

  // generate() on a fresh cache: the reference text.
  std::string reference(const std::vector<int32_t>& prompt, int n) {
    KvCache kv = be->make_cache(512);
    SamplerParams sp;
    sp.temperature = 0;
    Sampler s(sp);
    GenerateParams gp;
    gp.n_predict = n;
    StreamDecoder dec(tok());
    std::string out;
    generate(*be, kv, s, &tok(), prompt, gp, [&](int32_t id) {
      if (!tok().is_eog(id)) out += dec.push(id);
      return true;
    });
    return out + dec.flush();
  }
};

Job greedy_job(std::vector<int32_t> prompt, int n) {
  Job j;
  j.prompt = std::move(prompt);
  j.sampling.temperature = 0;
  j.gen.n_predict = n;
  return j;
}

Update wait(const std::shared_ptr<Request>& r, std::string* text = nullptr) {
  for (;;) {
    Update u = r->take(std::chrono::milliseconds(100));
    if (text) *text += u.content;
    if (u.done) return u;
  }
}

TEST(Scheduler, GreedyOutputEqualsGenerateAndThePromptCacheChangesNothing) {
  Tiny t;
  Scheduler::Options o;
  o.parallel = 1;
  o.ctx = 512;
  o.prefill_chunk = 7;  // several prefill turns
  Scheduler sched(*t.be, t.tok(), o);
  const std::vector<int32_t> p1 = t.tok().encode("Once upon a time there was", true, true);
  std::string text1;
  Update u1 = wait(sched.submit(greedy_job(p1, 12)), &text1);
  EXPECT_EQ(u1.finish_reason, "length");
  EXPECT_EQ(u1.n_completion, 12);
  EXPECT_EQ(u1.n_prompt, static_cast<int>(p1.size()));
  EXPECT_EQ(u1.n_cached, 0);
  EXPECT_EQ(text1, t.reference(p1, 12));

  // The next turn extends the conversation: only the new part is prefilled,
  // and the result is what a fresh prefill of the whole prompt gives.
  std::vector<int32_t> p2 = p1;
  for (int32_t id : t.tok().encode(text1 + " and then", false, true)) p2.push_back(id);
  std::string text2;
  Update u2 = wait(sched.submit(greedy_job(p2, 10)), &text2);
  EXPECT_GE(u2.n_cached, static_cast<int>(p1.size()));
  EXPECT_EQ(text2, t.reference(p2, 10));
}

// A hybrid (qwen35moe): its recurrent state goes back to the longest shared
// prefix a checkpoint holds (each prompt chunk's end), not to nothing.
TEST(Scheduler, HybridPromptCacheReturnsToACheckpoint) {
  struct Tiny35 : test::TinyCpuModel {
    Tiny35() : TinyCpuModel("server_test35_", "qwen35moe") {}
  } t;
  auto reference = [&](const std::vector<int32_t>& prompt, int n) {
    KvCache kv = t.be->make_cache(512);
    SamplerParams sp;
    sp.temperature = 0;
    Sampler s(sp);
    GenerateParams gp;
    gp.n_predict = n;
    StreamDecoder dec(t.tok());
    std::string out;
    generate(*t.be, kv, s, &t.tok(), prompt, gp, [&](int32_t id) {
      if (!t.tok().is_eog(id)) out += dec.push(id);
      return true;
    });
    return out + dec.flush();
  };
  std::vector<int32_t> p1 = t.tok().encode("Once upon a time there was a little model that", true, true);
  ASSERT_GE(p1.size(), 12u);
  // The second prompt shares all but the last three tokens of the first.
  std::vector<int32_t> p2(p1.begin(), p1.end() - 3);
  for (int32_t id : t.tok().encode(" went to the market", false, true)) p2.push_back(id);
  const std::string ref2 = reference(p2, 8);
  Scheduler::Options o;
  o.parallel = 1;
  o.ctx = 512;
  o.prefill_chunk = 4;  // checkpoints every 4 prompt tokens
  Scheduler sched(*t.be, t.tok(), o);
  Update u1 = wait(sched.submit(greedy_job(p1, 6)));
  EXPECT_EQ(u1.n_cached, 0);
  std::string text2;
  Update u2 = wait(sched.submit(greedy_job(p2, 8)), &text2);
  const int shared = static_cast<int>(p1.size()) - 3;
  EXPECT_GT(u2.n_cached, 0) << "a recurrent slot reused none of its prefix";
  EXPECT_LE(u2.n_cached, shared);
  EXPECT_GT(u2.n_cached, shared - 4) << "the newest checkpoint at or below the shared prefix";
  EXPECT_EQ(text2, ref2);
}

// OpenAI's n: one prefill forked into n slots; choice i is what a single
// request with seed + i gives, greedy and sampled, on an attention-only model
// and on a hybrid (its recurrent state forked too).
TEST(Scheduler, ChoicesShareOnePrefillAndEachIsItsSeedsAnswer) {
  for (const char* arch : {"qwen3moe", "qwen35moe"}) {
    test::TinyCpuModel t("server_choices_", arch);
    Scheduler::Options o;
    o.parallel = 3;
    o.ctx = 256;
    o.prefill_chunk = 5;
    const std::vector<int32_t> p = t.tok().encode("The experts of the model were", true, true);
    auto job = [&](double temp, uint64_t seed) {
      Job j = greedy_job(p, 10);
      j.sampling.temperature = temp;
      j.sampling.seed = seed;
      return j;
    };
    std::vector<std::string> single(3), chosen(3);
    std::vector<Update> ups(3);
    {
      Scheduler sched(*t.be, t.tok(), o);
      for (int i = 0; i < 3; ++i) {
        // One at a time, each on a fresh prompt cache (a slot that read it
        // would be chosen again, and the prompt cache changes nothing).
        wait(sched.submit(job(0.9, 40 + static_cast<uint64_t>(i))), &single[static_cast<size_t>(i)]);
      }
    }
    {
      Scheduler sched(*t.be, t.tok(), o);
      auto reqs = sched.submit_choices(job(0.9, 40), 3);
      ASSERT_EQ(reqs.size(), 3u);
      for (int i = 0; i < 3; ++i) ups[static_cast<size_t>(i)] = wait(reqs[static_cast<size_t>(i)], &chosen[static_cast<size_t>(i)]);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(chosen[static_cast<size_t>(i)], single[static_cast<size_t>(i)]) << arch << ": choice " << i;
        EXPECT_EQ(ups[static_cast<size_t>(i)].n_completion, 10) << arch;
      }
      EXPECT_NE(single[0], single[1]) << "different seeds should differ somewhere (else the check above is weak)";
      // Greedy: n identical choices.
      auto greedy = sched.submit_choices(job(0, 1), 2);
      std::string a, b;
      wait(greedy[0], &a);
      wait(greedy[1], &b);
      EXPECT_EQ(a, b) << arch;
      EXPECT_THROW(sched.submit_choices(job(0, 1), 4), Error) << "more choices than slots";
    }
  }
}

TEST(Scheduler, ConcurrentJobsAllFinishAndCancelFreesTheSlot) {
  Tiny t;
  Scheduler::Options o;
  o.parallel = 2;
  o.ctx = 256;
  Scheduler sched(*t.be, t.tok(), o);
  const std::vector<int32_t> p = t.tok().encode("The experts", true, true);
  // References first: the worker owns the backend while jobs run.
  std::vector<std::string> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(t.reference(p, 6 + i));
  // One job that would run to the end of its context, cancelled after a while.
  auto long_job = sched.submit(greedy_job(p, -1));
  std::vector<std::shared_ptr<Request>> rs;
  for (int i = 0; i < 4; ++i) rs.push_back(sched.submit(greedy_job(p, 6 + i)));
  long_job->cancel();
  EXPECT_EQ(wait(long_job).finish_reason, "cancelled");
  for (int i = 0; i < 4; ++i) {
    std::string text;
    Update u = wait(rs[static_cast<size_t>(i)], &text);
    EXPECT_EQ(u.finish_reason, "length");
    EXPECT_EQ(u.n_completion, 6 + i);
    EXPECT_EQ(text, refs[static_cast<size_t>(i)]);  // interleaving does not change any output
  }
  EXPECT_EQ(sched.active_slots(), 0);
  EXPECT_EQ(sched.queue_depth(), 0u);
}

TEST(Scheduler, StopStringsEndWithStopAndAreNotEmitted) {
  Tiny t;
  Scheduler::Options o;
  o.ctx = 256;
  Scheduler sched(*t.be, t.tok(), o);
  const std::vector<int32_t> p = t.tok().encode("Once upon a time", true, true);
  const std::string full = t.reference(p, 16);
  ASSERT_GE(full.size(), 6u);
  Job j = greedy_job(p, 16);
  j.stop = {full.substr(3, 3)};
  std::string text;
  Update u = wait(sched.submit(j), &text);
  EXPECT_EQ(u.finish_reason, "stop");
  EXPECT_EQ(text, full.substr(0, full.find(j.stop[0])));
}

TEST(Scheduler, ShutdownCancelsOpenJobs) {
  Tiny t;
  Scheduler::Options o;
  o.ctx = 128;
  auto sched = std::make_unique<Scheduler>(*t.be, t.tok(), o);
  const std::vector<int32_t> p = t.tok().encode("x", true, true);
  auto a = sched->submit(greedy_job(p, -1));
  auto b = sched->submit(greedy_job(p, -1));
  sched->stop();
  EXPECT_TRUE(wait(a).done);
  EXPECT_EQ(wait(b).finish_reason, "cancelled");
  EXPECT_EQ(sched->submit(greedy_job(p, 1))->take(std::chrono::milliseconds(0)).finish_reason, "cancelled");
}

// --parallel 100000 (issue #28): slots whose KV caches do not fit are
// refused before they are allocated, naming how many fit.
// (Slots whose KV caches do not fit: scheduler_paged_test.cpp, per slot and shared.)

TEST(Scheduler, ReasoningGoesToItsOwnFieldWhenAsked) {
  Tiny t;
  Scheduler::Options o;
  o.ctx = 128;
  Scheduler sched(*t.be, t.tok(), o);
  const std::vector<int32_t> p = t.tok().encode("Once upon a time", true, true);
  const std::string full = t.reference(p, 8);
  Job j = greedy_job(p, 8);
  j.separate_reasoning = true;
  j.starts_in_reasoning = true;  // the template opened <think>; the model never closes it here
  std::string content, reasoning;
  auto r = sched.submit(j);
  for (;;) {
    Update u = r->take(std::chrono::milliseconds(100));
    content += u.content;
    reasoning += u.reasoning;
    if (u.done) break;
  }
  EXPECT_EQ(content, "");
  size_t b = 0;  // leading whitespace after <think> is dropped
  while (b < full.size() && (full[b] == ' ' || full[b] == '\n')) ++b;
  EXPECT_EQ(reasoning, full.substr(b));
}

TEST(Scheduler, MetricsOfTheCpuBackendSayNoExpertTelemetry) {
  Tiny t;
  Metrics metrics;
  Scheduler::Options o;
  o.ctx = 128;
  Scheduler sched(*t.be, t.tok(), o, &metrics);
  EXPECT_EQ(wait(sched.submit(greedy_job(t.tok().encode("x", true, true), 4))).n_completion, 4);
  const std::string text = metrics.render();
  EXPECT_EQ(metric_value(text, "moestream_expert_telemetry_available"), 0) << text;
  EXPECT_EQ(metric_value(text, "moestream_expert_hit_rate"), 0);
  EXPECT_EQ(metric_value(text, "moestream_expert_h2d_bytes_total"), 0);
  EXPECT_EQ(metric_value(text, "moestream_expert_cpu_share"), 0);
  EXPECT_EQ(metric_value(text, "moestream_completion_tokens_total"), 4);
}

// The CPU backend, reporting made-up tiered-expert telemetry that grows with
// each pass, and noting which threads ask for it: a backend's telemetry may
// only be read on the thread that runs its passes.
class TieredCpuBackend final : public Backend {
 public:
  explicit TieredCpuBackend(CpuBackend& be) : be_(be) {}
  void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool all) override {
    {
      std::lock_guard lk(m_);
      forward_threads_.insert(std::this_thread::get_id());
    }
    be_.forward(kv, tokens, logits, all);
    ++passes_;
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return be_.make_cache(ctx, type); }
  const ModelConfig& config() const override { return be_.config(); }
  std::string name() const override { return "tiered-test"; }
  void set_route_hook(RouteHook hook, bool want_hidden = false) override { be_.set_route_hook(std::move(hook), want_hidden); }
  ExpertTelemetry expert_telemetry() const override {
    {
      std::lock_guard lk(m_);
      telemetry_threads_.insert(std::this_thread::get_id());
    }
    ExpertTelemetry t;
    t.hybrid = true;
    const uint64_t n = passes_;
    t.layers = {{3 * n, 0, n}};  // 3 of 4 pairs resident, 1 on the CPU
    t.h2d_bytes = 1000 * n;
    return t;
  }
  uint64_t passes() const { return passes_; }
  std::set<std::thread::id> forward_threads() const {
    std::lock_guard lk(m_);
    return forward_threads_;
  }
  std::set<std::thread::id> telemetry_threads() const {
    std::lock_guard lk(m_);
    return telemetry_threads_;
  }

 private:
  CpuBackend& be_;
  std::atomic<uint64_t> passes_{0};
  mutable std::mutex m_;
  std::set<std::thread::id> forward_threads_;
  mutable std::set<std::thread::id> telemetry_threads_;
};

TEST(Scheduler, ExpertTelemetryReachesMetricsFromTheEngineThreadOnly) {
  Tiny t;
  TieredCpuBackend tiered(*t.be);
  Metrics metrics;
  Scheduler::Options o;
  o.ctx = 128;
  o.prefill_chunk = 3;  // a few prefill passes too
  Scheduler sched(tiered, t.tok(), o, &metrics);
  const std::vector<int32_t> p = t.tok().encode("Once upon a time there was", true, true);
  EXPECT_EQ(wait(sched.submit(greedy_job(p, 6))).n_completion, 6);
  // Scrapes from this thread while the worker idles: they read the snapshot.
  const std::string text = metrics.render();
  const uint64_t passes = tiered.passes();
  EXPECT_GE(passes, 6u);
  // The job's passes are all in the snapshot taken before it reported its end.
  EXPECT_EQ(metric_value(text, "moestream_expert_telemetry_available"), 1) << text;
  EXPECT_EQ(metric_value(text, "moestream_expert_h2d_bytes_total"), 1000.0 * static_cast<double>(passes));
  EXPECT_DOUBLE_EQ(metric_value(text, "moestream_expert_hit_rate"), 0.75);
  EXPECT_DOUBLE_EQ(metric_value(text, "moestream_expert_cpu_share"), 0.25);
  // Asked for on the worker (the thread of the passes), never on a scraping thread.
  const auto fwd = tiered.forward_threads(), tel = tiered.telemetry_threads();
  ASSERT_EQ(fwd.size(), 1u);
  EXPECT_EQ(tel, fwd);
  EXPECT_EQ(tel.count(std::this_thread::get_id()), 0u);
}

TEST(ChatRenderer, PassesTemplateKwargsAndRefusalsAre400) {
  Vocab v = make_synthetic_vocab(512);
  v.chat_template =
      "{% for m in messages %}{% if m.role == 'assistant' and loop.first %}{{ raise_exception('user first') }}"
      "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
      "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}";
  Tokenizer tok(std::move(v));
  ChatRenderer chat(tok);
  const auto user = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "U"}])");
  EXPECT_EQ(chat.render(user, true), "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.render(user, true, nlohmann::ordered_json{{"enable_thinking", false}}),
            "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  try {
    chat.render(nlohmann::ordered_json::parse(R"([{"role": "assistant", "content": "A"}])"), true);
    FAIL() << "the template's raise_exception was not reported";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("user first"), std::string::npos);
  }
}

TEST(ChatRenderer, UsesTheModelsTemplate) {
  Tiny t;
  ChatRenderer chat(t.tok());
  EXPECT_EQ(chat.description(), "the model's Jinja template");
  nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  EXPECT_EQ(chat.render(msgs, true), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  ChatRenderer builtin(t.tok(), "mistral-v3");
  EXPECT_EQ(builtin.render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "U"}])"), true), "[INST] U[/INST]");
}

}  // namespace
}  // namespace ms::server
