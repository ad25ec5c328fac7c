// Hostile chat templates (issue #28): a template comes from a model file, so
// recursion, deep nesting, endless loops and huge strings must end in a clear
// LimitExceeded naming the limit, with bounded memory, never in a crash or a
// render that does not return. And the defaults must leave real templates
// with long conversations alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tokenizer/jinja.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
using jinja::Json;
using jinja::Limits;

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Under AddressSanitizer freed memory stays in quarantine, so peak memory
// says little there: not measured.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// The peak resident memory of this process since the last reset_peak_rss(),
// in MiB; reset_peak_rss() is false where Linux does not let us reset it.
bool reset_peak_rss() {
  if (kAsan) return false;
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return f.good();
}
long peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6)) / 1024;
  return -1;
}

// The default limits without the clock: these tests must fail on the limit
// they test, however loaded the machine running them is.
Limits untimed() {
  Limits lim;
  lim.max_render_time = std::chrono::milliseconds(0);
  return lim;
}

// Parses and renders `src`; expects a LimitExceeded whose message names
// `field` (e.g. "max_loop_iterations"), and that the render's memory stayed
// well below what the template asked for.
void expect_limit(const std::string& src, const std::string& field, const Limits& lim = untimed(),
                  const Json& ctx = Json::object()) {
  SCOPED_TRACE(src.size() > 200 ? src.substr(0, 200) + "..." : src);
  const bool measured = reset_peak_rss();
  const long before = peak_rss_mib();
  try {
    jinja::Template t(src, lim);
    t.render(ctx);
    ADD_FAILURE() << "rendered without exceeding " << field;
  } catch (const jinja::LimitExceeded& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("jinja::Limits::" + field), std::string::npos) << m;
    EXPECT_EQ(m.rfind("chat template: ", 0), 0u) << m;
  }
  if (measured && before > 0) EXPECT_LT(peak_rss_mib() - before, 600) << "MiB of peak memory";
}

// The same, for a problem found when the template is loaded.
void expect_parse_limit(const std::string& src, const std::string& field) {
  try {
    jinja::Template t(src);
    ADD_FAILURE() << "parsed without exceeding " << field << ": " << src.substr(0, 100);
  } catch (const jinja::LimitExceeded& e) {
    EXPECT_NE(std::string(e.what()).find("jinja::Limits::" + field), std::string::npos) << e.what();
  }
}

TEST(JinjaLimits, RecursiveMacroStopsAtTheCallDepth) {
  expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "max_call_depth");
  // Recursion through two macros, and through a default argument.
  expect_limit("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
               "max_call_depth");
  // The limit is what it says: 10 levels pass, 11 do not.
  Limits lim = untimed();
  lim.max_call_depth = 10;
  const std::string count_down = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}.{% endmacro %}";
  EXPECT_EQ(jinja::Template(count_down + "{{ f(9) }}", lim).render(Json::object()), "..........");
  expect_limit(count_down + "{{ f(10) }}", "max_call_depth", lim);
}

TEST(JinjaLimits, DeepRecursionWithinTheCallDepthIsBoundedByTheRenderDepth) {
  // Each call nests many evaluation steps: the stack is bounded by
  // max_render_depth even where max_call_depth would allow more.
  Limits lim = untimed();
  lim.max_call_depth = 1000;
  const std::string deep_expr = repeat("(", 200) + "f(n + 1)" + repeat(")", 200);
  expect_limit("{% macro f(n) %}{{ " + deep_expr + " }}{% endmacro %}{{ f(0) }}", "max_render_depth", lim);
}

TEST(JinjaLimits, TwentyThousandNestedIfsFailAtLoad) {
  expect_parse_limit(repeat("{% if true %}", 20000) + "x" + repeat("{% endif %}", 20000), "max_nesting");
  expect_parse_limit(repeat("{% for x in xs %}", 20000) + repeat("{% endfor %}", 20000), "max_nesting");
  // Within the limit they render.
  EXPECT_EQ(jinja::Template(repeat("{% if true %}", 100) + "x" + repeat("{% endif %}", 100)).render(Json::object()),
            "x");
}

TEST(JinjaLimits, DeepExpressionsFailAtLoad) {
  expect_parse_limit("{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}", "max_nesting");
  expect_parse_limit("{{ " + repeat("[", 100000) + repeat("]", 100000) + " }}", "max_nesting");
  expect_parse_limit("{{ " + repeat("not ", 100000) + "x }}", "max_nesting");
  expect_parse_limit("{{ " + repeat("-", 100000) + "1 }}", "max_nesting");
  // Chains nest as deep as they are long, without recursion in the parser.
  expect_parse_limit("{{ 1" + repeat(" + 1", 100000) + " }}", "max_nesting");
  expect_parse_limit("{{ x" + repeat("|trim", 100000) + " }}", "max_nesting");
  expect_parse_limit("{{ x" + repeat(".a", 100000) + " }}", "max_nesting");
  expect_parse_limit("{{ f" + repeat("()", 100000) + " }}", "max_nesting");
  // Moderate depth is fine.
  EXPECT_EQ(jinja::Template("{{ " + repeat("(", 50) + "1" + repeat(" + 1)", 50) + " }}").render(Json::object()), "51");
}

TEST(JinjaLimits, HugeRangeLoopStops) {
  expect_limit("{% for i in range(1000000000) %}x{% endfor %}", "max_loop_iterations");
  expect_limit("{% for i in range(10 ** 15) %}{% endfor %}", "max_loop_iterations");
  expect_limit("{{ range(-9223372036854775807, 9223372036854775807)|length }}", "max_loop_iterations");
}

TEST(JinjaLimits, NestedLoopsWithAHugeProductStop) {
  expect_limit(
      "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}"
      "{% endfor %}{% endfor %}{% endfor %}",
      "max_loop_iterations");
  Limits lim = untimed();
  lim.max_loop_iterations = 99;
  EXPECT_EQ(jinja::Template("{% for i in range(9) %}{% for j in range(10) %}{% endfor %}{% endfor %}ok", lim)
                .render(Json::object()),
            "ok");  // 9 + 90 iterations
  expect_limit("{% for i in range(10) %}{% for j in range(9) %}{% endfor %}{% endfor %}", "max_loop_iterations", lim);
}

TEST(JinjaLimits, HugeStringRepetitionFailsBeforeAllocating) {
  expect_limit("{{ 'x' * 1e9 }}", "max_value_bytes");
  expect_limit("{{ 'x' * 1000000000 }}", "max_value_bytes");
  expect_limit("{{ 1000000000000000000 * 'abc' }}", "max_value_bytes");
  expect_limit("{{ ('x' * 100000)|replace('x', 'y' * 1000) }}", "max_value_bytes");
  expect_limit("{{ 'x'|indent(10 ** 12) }}", "max_value_bytes");
  expect_limit("{{ [[1]]|tojson(indent=10 ** 12) }}", "max_value_bytes");
  EXPECT_EQ(jinja::Template("{{ 'ab' * 3 }}|{{ 'x' * -1 }}").render(Json::object()), "ababab|");
}

// The empty string repeated is empty whatever the count: found by fuzz_jinja,
// which saw '' * 1e9 append nothing a billion times until its timeout.
TEST(JinjaLimits, RepeatingTheEmptyStringAHugeNumberOfTimesIsEmptyAtOnce) {
  EXPECT_EQ(jinja::Template("x{{ '' * 1e9 }}{{ ('ab' * 6)|replace('a', 'xyz') }}").render(Json::object()),
            "x" + repeat("xyzb", 6));
  EXPECT_EQ(jinja::Template("[{{ 1000000000000000000 * '' }}]").render(Json::object()), "[]");
  EXPECT_EQ(jinja::Template("[{{ 'abc' * 0 }}]").render(Json::object()), "[]");
}

TEST(JinjaLimits, StringDoublingInALoopStops) {
  expect_limit(
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
      "max_value_bytes");
  expect_limit(
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "max_value_bytes");
  // Lists that double, and lists that nest deeper each time.
  expect_limit("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "max_value_bytes");
  expect_limit("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}",
               "max_value_bytes");
  expect_limit("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}",
               "max_nesting");
  expect_limit("{% set ns = namespace() %}{% for i in range(100) %}{% set ns.x = ns %}{% set ns.y = ns %}{% endfor %}",
               "max_value_bytes");
}

// Searching long template-built strings for long ones ('a'*N for 'a'*M + 'b')
// took N*M steps in one call, out of the clock's reach (a fuzzer found the
// 'in' test run for minutes). Each of these answers after a linear scan.
TEST(JinjaLimits, SearchesOfLongStringsForLongStringsAreLinear) {
  const std::string hay = "('a' * 1000000)", miss = "('a' * 300000 ~ 'b')";
  auto render = [](const std::string& src) { return jinja::Template(src, untimed()).render(Json::object()); };
  EXPECT_EQ(render("{{ " + miss + " in " + hay + " }}"), "False");
  EXPECT_EQ(render("{{ (" + miss + " ~ 'x') in (" + hay + " ~ " + miss + " ~ 'x') }}"), "True");
  EXPECT_EQ(render("{{ " + hay + ".find(" + miss + ") }}"), "-1");
  EXPECT_EQ(render("{{ " + hay + ".split(" + miss + ")|length }}"), "1");
  EXPECT_EQ(render("{{ (" + hay + "|replace(" + miss + ", 'z'))|length }}"), "1000000");
  EXPECT_EQ(render("{{ " + hay + ".replace(" + miss + ", 'z')|length }}"), "1000000");
  // strip's characters are a set, not a search per byte.
  EXPECT_EQ(render("{{ (" + hay + ".strip(('b' * 500000) ~ 'a'))|length }}"), "0");
  EXPECT_EQ(render("{{ ('xyzabcxyz').strip('zyx') }}"), "abc");
}

TEST(JinjaLimits, OutputSizeIsBounded) {
  expect_limit("{% for i in range(1000000) %}{{ 'x' * 10000 }}{% endfor %}", "max_output_bytes");
  // Text a macro or a block renders is bounded as well.
  expect_limit("{% macro m() %}{% for i in range(1000000) %}{{ 'x' * 10000 }}{% endfor %}{% endmacro %}{{ m()|length }}",
               "max_output_bytes");
  expect_limit("{% set s %}{% for i in range(1000000) %}{{ 'x' * 10000 }}{% endfor %}{% endset %}", "max_output_bytes");
}

TEST(JinjaLimits, AllValuesBuiltTogetherAreBounded) {
  // Each value is small, but together they are a lot of work and memory.
  Limits lim = untimed();
  lim.max_built_bytes = 10 << 20;
  expect_limit("{% for i in range(1000000) %}{% set s = 'x' * 100 ~ i %}{% endfor %}", "max_built_bytes", lim);
}

TEST(JinjaLimits, ATemplateThatRendersForeverViaRecursionHitsTheTimeLimit) {
  // 2^40 calls, none deeper than 40 and no loop: only the clock stops it.
  Limits lim;
  lim.max_render_time = std::chrono::milliseconds(200);
  expect_limit("{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
               "max_render_time", lim);
  // A built-in's own loop (quadratic unique) checks the clock too.
  expect_limit("{{ range(1000000)|unique|length }}", "max_render_time", lim);
}

TEST(JinjaLimits, ContextNestedTooDeeplyIsRefused) {
  Json deep = Json::array();
  for (int i = 0; i < 100000; ++i) deep = Json::array({std::move(deep)});
  // Moved, not copied, into the context: nlohmann's copy recurses (the test
  // itself would overflow the stack, under ASan's larger frames).
  Json ctx = Json::object();
  ctx["x"] = std::move(deep);
  expect_limit("{{ x|tojson }}", "max_nesting", untimed(), ctx);
}

TEST(JinjaLimits, RenderCanBeCancelled) {
  const jinja::Template t("{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}");
  std::atomic<bool> cancel{true};
  jinja::RenderOptions opt;
  opt.cancel = &cancel;
  EXPECT_THROW(t.render(Json::object(), opt), jinja::Cancelled);
  // Set from another thread while the render runs (it would run for the
  // time limit, 5 s, otherwise).
  cancel = false;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel = true;
  });
  EXPECT_THROW(t.render(Json::object(), opt), jinja::Cancelled);
  stopper.join();
  // Not set: renders as usual.
  cancel = false;
  EXPECT_EQ(jinja::Template("{{ 1 + 1 }}").render(Json::object(), opt), "2");
}

TEST(JinjaLimits, IntegerArithmeticPastInt64DoesNotOverflow) {
  // Python's integers grow; here they turn into floats (never undefined behaviour).
  const auto r = [](const std::string& s) { return jinja::Template(s).render(Json::object()); };
  EXPECT_EQ(r("{{ 9223372036854775807 + 1 }}"), "9.223372036854776e+18");
  EXPECT_EQ(r("{{ 3037000500 * 3037000500 }}"), "9.22337203700025e+18");
  EXPECT_EQ(r("{{ 2 ** 10 }} {{ 2 ** 62 }}"), "1024 4611686018427387904");
  EXPECT_EQ(r("{{ 2 ** 1000000000000000 }}"), "inf");
  EXPECT_EQ(r("{{ 99999999999999999999 }}"), "1e+20");
  EXPECT_THROW(r("{{ range(1e300) }}"), Error);
  EXPECT_THROW(r("{{ '\\xZZ' }}"), Error);
}

TEST(JinjaLimits, MalformedTemplatesFailWithAnMsError) {
  // Each once escaped as another exception (std::invalid_argument from stoul,
  // std::out_of_range, a JSON type error), past a caller catching ms::Error.
  const auto r = [](const std::string& s) { return jinja::Template(s).render(Json::object()); };
  EXPECT_THROW(r("{{ '\\xZZ' }}"), Error);
  EXPECT_THROW(r("{{ '\\u12' }}"), Error);
  EXPECT_THROW(r("{% raw %}endraw"), Error);
  EXPECT_THROW(r("{% raw %}x{% endraw"), Error);
  EXPECT_THROW(r("{{ 'a'.startswith([1]) }}"), Error);
  EXPECT_THROW(r("{{ 'a'.strip(1) }}"), Error);
  EXPECT_THROW(r("{{ (1e300 * 1e300)|int }}"), Error);
  EXPECT_EQ(r("{{ 1e999 }}"), "inf");
}

// ---- the defaults leave real templates alone

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 200 messages of user / assistant turns, with tools offered; `with_calls`:
// after a system prompt, every fourth assistant turn is a tool call
// answered by a tool message (Mistral's templates want plain alternation).
Json long_conversation(bool with_calls) {
  Json tools = Json::array();
  for (int t = 0; t < 8; ++t)
    tools.push_back(Json::parse(R"({"type": "function", "function": {"name": "tool_)" + std::to_string(t) +
                                R"(", "description": "A tool that does something useful with a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"},
        "days": {"type": "integer", "description": "how many days"}}, "required": ["city"]}}})"));
  Json msgs = Json::array();
  if (with_calls) msgs.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  const std::string text = "Some text of a realistic length, with \"quotes\" and unicode: h\u00e9llo. ";
  for (int i = 0; msgs.size() < 199; ++i) {
    msgs.push_back({{"role", "user"}, {"content", "Question " + std::to_string(i) + ": " + repeat(text, 8)}});
    if (with_calls && i % 4 == 3) {
      msgs.push_back(Json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"id": "call_)" +
                                 std::to_string(i) + R"(", "type": "function", "function": {"name": "tool_1",
          "arguments": {"city": "Paris", "days": 3}}}]})"));
      msgs.push_back({{"role", "tool"}, {"tool_call_id", "call_" + std::to_string(i)}, {"content", "{\"temp\": 21}"}});
    } else {
      msgs.push_back({{"role", "assistant"}, {"content", "Answer " + std::to_string(i) + ": " + repeat(text, 12)}});
    }
  }
  msgs.push_back({{"role", "user"}, {"content", "The last question."}});
  return {{"messages", msgs}, {"tools", tools}, {"add_generation_prompt", true}, {"bos_token", "<s>"},
          {"eos_token", "</s>"}, {"enable_thinking", true}};
}

TEST(JinjaLimits, DefaultsRenderRealTemplatesWithLongConversations) {
  const fs::path fetched = fs::path(MS_SOURCE_DIR) / "tools" / "chat_templates" / "out";
  const fs::path ours = fs::path(MS_SOURCE_DIR) / "tests" / "tokenizer" / "templates";
  std::vector<fs::path> files = {ours / "Mixtral-8x7B-Instruct-v0.1.jinja"};
  for (const char* name : {"Qwen-Qwen3-0.6B", "Qwen3.5-4B", "Qwen3-Coder", "openai-gpt-oss-120b",
                           "mistralai-Mistral-Nemo-Instruct-2407", "meta-llama-Llama-3.3-70B-Instruct"}) {
    const fs::path p = fetched / (std::string(name) + ".jinja");
    if (fs::exists(p)) files.push_back(p);
  }
  if (files.size() == 1) std::printf("note: scripts/fetch_chat_templates.sh not run: only Mixtral checked\n");
  const Json with_calls = long_conversation(true), plain = long_conversation(false);
  ASSERT_GE(with_calls["messages"].size(), 200u);
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.filename().string());
    const jinja::Template t(read(f));
    const std::string name = f.filename().string();
    const bool mistral = name.find("istral") != std::string::npos || name.find("Mixtral") != std::string::npos;
    std::string out;
    try {
      out = t.render(mistral ? plain : with_calls);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_NE(out.find("The last question."), std::string::npos);
    EXPECT_NE(out.find("Question 60: "), std::string::npos);
  }
}

}  // namespace
}  // namespace ms
