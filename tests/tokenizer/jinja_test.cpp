// The Jinja renderer on small templates with known output (Jinja2's, with
// trim_blocks and lstrip_blocks as transformers sets them). The real chat
// templates are compared with Python Jinja2 in jinja_parity_test.cpp.
#include <gtest/gtest.h>

#include "tokenizer/jinja.h"

namespace ms {
namespace {

using jinja::Json;

std::string render(const std::string& src, const Json& ctx = Json::object()) {
  return jinja::Template(src).render(ctx);
}

TEST(Jinja, TextAndExpressions) {
  EXPECT_EQ(render("Hello {{ name }}!", {{"name", "world"}}), "Hello world!");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 1 / 2 }} {{ 'a' ~ 1 }}"), "7 3 2 0.5 a1");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ [1, 'x'] }} {{ 2.0 }}"), "None True [1, 'x'] 2.0");
  EXPECT_EQ(render("{{ missing }}|{{ missing is defined }}"), "|False");
  EXPECT_EQ(render("{{ 'a' if x else 'b' }}", {{"x", 0}}), "b");
}

TEST(Jinja, WhitespaceControlTrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the
  // indentation before it; "-" strips all whitespace on its side.
  EXPECT_EQ(render("{% if true %}\n  yes\n{% endif %}\n"), "  yes\n");
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(render("a {# comment #}\nb"), "a b");
}

TEST(Jinja, LoopsNamespacesAndSlices) {
  Json ctx = {{"xs", {1, 2, 3}}};
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", ctx),
            "01,12,23");
  EXPECT_EQ(render("{% for x in xs[::-1] %}{{ x }}{% endfor %}|{{ xs[1:] }}|{{ 'hello'[-3:] }}", ctx), "321|[2, 3]|llo");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", ctx),
            "6");
  // A plain set inside a loop does not leak out of it.
  EXPECT_EQ(render("{% set n = 0 %}{% for x in xs %}{% set n = x %}{% endfor %}{{ n }}", ctx), "0");
  EXPECT_EQ(render("{% for x in xs if x != 2 %}{{ x }}{% else %}none{% endfor %}", ctx), "13");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx), "1");
  EXPECT_EQ(render("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}), "b=1;a=2;");
}

TEST(Jinja, FiltersMethodsAndMacros) {
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'a,b'.split(',')[-1] }}|{{ '\\nq\\n'.strip('\\n') }}"), "x|b|q");
  EXPECT_EQ(render("{{ xs|length }} {{ xs|join('-') }} {{ xs|first }}", {{"xs", {"a", "b"}}}), "2 a-b a");
  EXPECT_EQ(render("{{ d|tojson }}", {{"d", {{"k", "é\""}, {"n", {1, 2.5}}}}}), "{\"k\": \"é\\\"\", \"n\": [1, 2.5]}");
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|list|length }}",
                   {{"ms", {{{"role", "user"}}, {{"role", "assistant"}}, {{"role", "user"}}}}}),
            "2");
  EXPECT_EQ(render("{% macro greet(who, p='!') %}hi {{ who }}{{ p }}{% endmacro %}{{ greet('bob') }}{{ greet('al', p='?') }}"),
            "hi bob!hi al?");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }} {{ 'x' in 'xyz' }} {{ 3 not in [1, 2] }}"), "True True True");
}

TEST(Jinja, RaiseExceptionAndErrors) {
  EXPECT_THROW(render("{{ raise_exception('roles must alternate') }}"), jinja::TemplateRaised);
  try {
    jinja::Template t("line one\n{% if x %}\n{% unknowntag %}\n{% endif %}");
    FAIL() << "parsed an unknown tag";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(jinja::Template("{% if x %}unclosed"), Error);
  EXPECT_THROW(jinja::Template("{{ 'unterminated }}"), Error);
  EXPECT_THROW(render("{{ 1 + 'a' }}"), Error);
}

}  // namespace
}  // namespace ms
