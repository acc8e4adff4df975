// The chat-template interpreter on its own: transformers' whitespace options, Python semantics
// where @huggingface/jinja differs (printing True/None), scoping, macros, and clear errors for
// what it does not support.
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"

namespace baton {
namespace {

using nlohmann::json;

absl::StatusOr<std::string> render(const std::string& source, const json& variables = json::object()) {
  auto t = ChatTemplate::compile(source);
  if (!t.ok()) return t.status();
  return (*t)->render(variables);
}

std::string ok(const std::string& source, const json& variables = json::object()) {
  auto r = render(source, variables);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : "";
}

TEST(ChatTemplate, WhitespaceControlAndBlockTrimming) {
  EXPECT_EQ(ok("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");  // trim/lstrip blocks, one final \n dropped
  EXPECT_EQ(ok("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(ok("a {#- comment -#} b"), "ab");
  EXPECT_EQ(ok("x {{ 'y' }}\nz"), "x y\nz");  // expressions keep their newline
}

TEST(ChatTemplate, PythonSemantics) {
  EXPECT_EQ(ok("{{ true }} {{ none }} {{ 1.0 }} {{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ undefined_name }}."),
            "True None 1.0 3.5 -4 2 .");
  EXPECT_EQ(ok("{{ [1, 'a'] }} {{ {'k': none} }}"), "[1, 'a'] {'k': None}");
  EXPECT_EQ(ok("{{ 'a' if x else 'b' }}{{ x or 'd' }}{{ 0 and 1 }}", {{"x", ""}}), "bd0");
  EXPECT_EQ(ok("{{ '  hi \\n'.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'x y  z'.split() | length }}"),
            "hi|['a', 'b', '', 'c']|3");
  EXPECT_EQ(ok("{{ 'héllo'[1:3] }}{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}"), "élcba3");
  EXPECT_EQ(ok("{{ {'b': 1, 'a': [1, 'x', true, none]} | tojson }}"), R"({"b": 1, "a": [1, "x", true, null]})");
  EXPECT_EQ(ok("{{ {'a': {'b': 1}} | tojson(indent=2) }}"), "{\n  \"a\": {\n    \"b\": 1\n  }\n}");
  EXPECT_EQ(ok("{{ 'é\"\\n' | tojson }}"), "\"é\\\"\\n\"");
}

TEST(ChatTemplate, LoopsScopesNamespacesMacros) {
  EXPECT_EQ(ok("{% for x in xs %}{{ loop.index }}{{ x }}{% if loop.last %}!{% endif %}{% else %}none{% endfor %}",
               {{"xs", {"a", "b"}}}),
            "1a2b!");
  EXPECT_EQ(ok("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(ok("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");  // loop scope
  EXPECT_EQ(ok("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"), "4");
  EXPECT_EQ(ok("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}"
               "{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(ok("{% macro greet(name, punct='!') %}hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', punct='?') }}"),
            "hi a! hi b?");
  EXPECT_EQ(ok("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}, {"b", 2}}}}), "a=1;b=2;");
  EXPECT_EQ(ok("{% set a, b = [1, 2] %}{{ a + b }}{% set c %}x{{ a }}{% endset %}{{ c }}"), "3x1");
}

TEST(ChatTemplate, FiltersAndTests) {
  json messages = json::parse(R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"}])");
  EXPECT_EQ(ok("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}",
               {{"messages", messages}}),
            "a");
  EXPECT_EQ(ok("{{ messages | map(attribute='role') | reject('equalto', 'user') | list | length }}",
               {{"messages", messages}}),
            "1");
  EXPECT_EQ(ok("{{ x is defined }} {{ y is none }} {{ 3 is odd }} {{ 'a' is string }} {{ 4 is divisibleby 2 }}",
               {{"y", nullptr}}),
            "False True True True True");
  EXPECT_EQ(ok("{{ x | default('d') }} {{ '' | default('e', true) }} {{ 'AbC' | lower }} {{ ' x ' | trim }}"), "d e abc x");
}

TEST(ChatTemplate, ErrorsNameTheConstructAndLine) {
  auto r = render("line one\n{% include 'other.jinja' %}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("include"), std::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("line 2"), std::string_view::npos) << r.status();

  r = render("{{ x | frobnicate }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("frobnicate"), std::string_view::npos) << r.status();

  r = render("{{ raise_exception('roles must alternate') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("roles must alternate"), std::string_view::npos) << r.status();

  r = render("{% if x %}unterminated");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("endif"), std::string_view::npos) << r.status();

  r = render("{{ missing.attr }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("attr"), std::string_view::npos) << r.status();
}

}  // namespace
}  // namespace baton
