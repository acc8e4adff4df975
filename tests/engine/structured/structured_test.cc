// Constrained decoding's grammar core: the byte-grammar builder refuses what the matcher cannot
// run; the JSON grammar accepts JSON objects and refuses near misses byte for byte; JSON schemas
// become grammars whose every sentence is valid JSON that the reference validator
// (python3-jsonschema) accepts, checked on random walks through the grammar, and which accept
// hand-written valid instances; unsupported keywords are refused by name and place; token masks
// equal feeding every token to the matcher.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/token_mask.h"
#include "nlohmann/json.hpp"

namespace baton::structured {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept(text) && m.complete();
}

TEST(Grammar, BuilderRefusesLeftRecursionAndUndefinedRules) {
  {
    GrammarBuilder b;
    const std::int32_t list = b.rule("list");
    b.add(list, {Symbol::ref(list), Symbol::byte('x')});  // list ::= list "x"
    b.add(list, literal("x"));
    EXPECT_THAT(b.build(list).status().message(), HasSubstr("'list' is left-recursive"));
  }
  {
    // Through a rule that matches "": a ::= b a "x", b ::= "".
    GrammarBuilder b;
    const std::int32_t a = b.rule("a"), e = b.rule("b");
    b.add(a, {Symbol::ref(e), Symbol::ref(a), Symbol::byte('x')});
    b.add(a, {});
    b.add(e, {});
    EXPECT_THAT(b.build(a).status().message(), HasSubstr("left-recursive"));
  }
  {
    GrammarBuilder b;
    const std::int32_t a = b.rule("a"), undefined = b.rule("nothing");
    b.add(a, {Symbol::ref(undefined)});
    EXPECT_THAT(b.build(a).status().message(), HasSubstr("'nothing' has no alternative"));
  }
}

TEST(Grammar, MatcherFollowsAlternativesAndRightRecursion) {
  // s ::= "a" s | "b"  (a*b), and t ::= s | s "c"
  GrammarBuilder b;
  const std::int32_t s = b.rule("s"), t = b.rule("t");
  b.add(s, {Symbol::byte('a'), Symbol::ref(s)});
  b.add(s, literal("b"));
  b.add(t, {Symbol::ref(s)});
  b.add(t, {Symbol::ref(s), Symbol::byte('c')});
  auto g = b.build(t);
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g);
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.can_accept('a'));
  EXPECT_FALSE(m.can_accept('c'));
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(m.accept('a'));
  EXPECT_LE(m.num_stacks(), 4u) << "right recursion must not grow the stacks";
  EXPECT_FALSE(m.accept("bx"));  // all or nothing: the b is not taken either
  EXPECT_TRUE(m.accept('b'));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.finished());  // "c" may follow
  EXPECT_TRUE(m.accept('c'));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.accept('c'));
}

TEST(JsonGrammar, ObjectsAreAcceptedAndNearMissesRefused) {
  const auto g = json_object_grammar();
  for (const std::string& ok : std::vector<std::string>{"{}", "{ }", R"({"a":1})", "{\n\"a\": [1, 2.5, -3e+7, 0.0, true, false, null],\t\"b\": {}\n}",
                               R"({"esc\"aped\\ \/ \b\f\n\r\t \u00e9":"x"})", "{\"utf8\":\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"}",
                               R"({"nested":{"deeper":[[[]],{"x":[{}]}]}})", " {\"padded\":0} "}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  const std::string blanks(kMaxWhitespace + 1, ' ');
  for (const std::string& bad : std::vector<std::string>{"", "[]", "1", R"("s")", "{", R"({"a":1,})", R"({'a':1})", R"({"a":01})", R"({"a":1.})",
                                R"({"a":.5})", R"({"a":+1})", R"({a:1})", "{\"a\":\"\x01\"}", R"({"a":"\q"})",
                                R"({"a":"\u12G4"})", "{\"a\":\"\xC0\x80\"}", "{\"a\":\"\xED\xA0\x80\"}", "{\"a\":\"\xF5\x80\x80\x80\"}",
                                R"({"a":tru})", R"({"a":1}{})", "{" + blanks + "}"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
}

TEST(JsonSchemaGrammar, UnsupportedKeywordsAreNamedWithTheirPlace) {
  const auto error = [](const std::string& schema) { return std::string(json_schema_grammar(schema).status().message()); };
  EXPECT_THAT(error(R"({"type":"object","properties":{"id":{"type":"string","pattern":"^a"}}})"),
              HasSubstr("'pattern' at /properties/id is not supported"));
  EXPECT_THAT(error(R"({"type":"integer","minimum":3})"), HasSubstr("'minimum' at / is not supported"));
  EXPECT_THAT(error(R"({"type":"array","items":{"$ref":"#/$defs/missing"}})"), HasSubstr("'$ref' at /items"));
  EXPECT_THAT(error(R"({"type":"string","maxLength":100000})"), HasSubstr("'maxLength' at / must be an integer in [0, 256]"));
  EXPECT_THAT(error(R"({"type":"object","required":["x"]})"), HasSubstr("names 'x', which is not in 'properties'"));
  EXPECT_THAT(error(R"({"type":"thing"})"), HasSubstr("not a JSON Schema type"));
  EXPECT_THAT(error(R"({"allOf":[{"type":"string"},{"maxLength":3}]})"), HasSubstr("'allOf' at / with more than one"));
  EXPECT_THAT(error("false"), HasSubstr("no value is valid"));
  // A client's schema nested thousands deep is refused, not followed down the stack.
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += R"({"type":"array","items":)";
  deep += "true" + std::string(5000, '}');
  EXPECT_THAT(error(deep), HasSubstr("nested more than 64 deep"));
  EXPECT_THAT(error("{"), HasSubstr("not valid JSON"));
}

// Schemas with hand-written instances the grammar must accept, and texts it must refuse.
struct SchemaCase {
  std::string schema;
  std::vector<std::string> valid, invalid;
};

std::vector<SchemaCase> schema_cases() {
  return {
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age"],"additionalProperties":false})",
       {R"({"name":"Ada","age":36})", R"({"name":"Ada","age":36,"tags":["x","y"]})", "{\n\"name\": \"\",\n\"age\": -1\n}"},
       {R"({"age":36,"name":"Ada"})", R"({"name":"Ada"})", R"({"name":"Ada","age":3.5})", R"({"name":"Ada","age":36,"other":1})", "{}"}},
      {R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"enum":["x",1,null,{"k":[true]}]}}})",
       {"{}", R"({"b":null})", R"({"a":true,"c":{"k":[true]}})", R"({"c":1})", R"({"a":false,"b":null,"c":"x"})"},
       {R"({"b":null,"a":true})", R"({"c":2})", R"({"a":true,})", R"({,"a":true})"}},
      {R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"number"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},"required":["value"]}},"$ref":"#/$defs/node"})",
       {R"({"value":1})", R"({"value":1.5e3,"children":[{"value":2},{"value":3,"children":[]}]})"},
       {R"({"value":1,"children":[{},{"value":1}]})", R"({"value":1,"children":[{"value":1},{"value":1},{"value":1},{"value":1}]})"}},
      {R"({"anyOf":[{"type":"string","minLength":2,"maxLength":4},{"type":"array","minItems":1,"maxItems":2},{"const":{"fixed":[1,2]}}]})",
       {R"("ab")", R"("abcd")", "\"\xC3\xA9\xC3\xA9\"", R"([1])", R"([{},"x"])", R"({"fixed":[1,2]})"},
       {R"("a")", R"("abcde")", "[]", "[1,2,3]", R"({"fixed":[1,2,3]})"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {"{}", R"({"x":1,"y":-2})"},
       {R"({"x":"1"})", R"({"x":1.0})"}},
      {R"({"type":["integer","null"],"description":"maybe a count"})", {"0", "-12", "null"}, {"1.5", "\"1\"", ""}},
  };
}

TEST(JsonSchemaGrammar, AcceptsValidInstancesAndRefusesInvalidOnes) {
  for (const SchemaCase& c : schema_cases()) {
    SCOPED_TRACE(c.schema);
    auto g = json_schema_grammar(c.schema);
    ASSERT_TRUE(g.ok()) << g.status();
    for (const std::string& v : c.valid) EXPECT_TRUE(matches(*g, v)) << v;
    for (const std::string& v : c.invalid) EXPECT_FALSE(matches(*g, v)) << v;
  }
}

// A random sentence: random bytes among those the grammar allows, half the time preferring ones
// that close what is open, until it may end (then it does, most of the time) or gets too long.
std::optional<std::string> random_sentence(const std::shared_ptr<const Grammar>& g, std::mt19937& rng) {
  GrammarMatcher m(g);
  std::string out;
  const std::string closing = "\"}]0123456789,:el";
  while (out.size() < 4000) {
    if (m.finished() || (m.complete() && rng() % 4 != 0)) return out;
    std::vector<std::uint8_t> choices, preferred;
    for (int b = 0; b < 256; ++b) {
      if (!m.can_accept(static_cast<std::uint8_t>(b))) continue;
      choices.push_back(static_cast<std::uint8_t>(b));
      if (closing.find(static_cast<char>(b)) != std::string::npos) preferred.push_back(static_cast<std::uint8_t>(b));
    }
    if (choices.empty()) return std::nullopt;  // a dead end: the grammar would be wrong
    const auto& from = !preferred.empty() && rng() % 2 == 0 ? preferred : choices;
    const std::uint8_t b = from[rng() % from.size()];
    EXPECT_TRUE(m.accept(b));
    out.push_back(static_cast<char>(b));
  }
  return out;  // too long: the caller skips it
}

TEST(JsonSchemaGrammar, EverySentenceValidatesWithTheReferenceValidator) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("baton-structured-" + std::to_string(::getpid()) + ".jsonl");
  std::mt19937 rng(11);
  std::size_t written = 0;
  {
    std::ofstream out(file);
    std::vector<std::pair<std::string, std::shared_ptr<const Grammar>>> grammars;
    grammars.emplace_back(R"({"type":"object"})", json_object_grammar());
    for (const SchemaCase& c : schema_cases()) grammars.emplace_back(c.schema, *json_schema_grammar(c.schema));
    for (const auto& [schema, g] : grammars) {
      int kept = 0;
      for (int i = 0; i < 400 && kept < 60; ++i) {
        const std::optional<std::string> s = random_sentence(g, rng);
        ASSERT_TRUE(s.has_value()) << schema << ": a dead end";
        if (s->size() >= 4000) continue;
        out << json{{"schema", json::parse(schema)}, {"text", *s}}.dump(-1, ' ', false, json::error_handler_t::replace)
            << "\n";
        ++kept;
        ++written;
      }
      EXPECT_GE(kept, 30) << schema << ": most random sentences should be short";
    }
  }
  const std::string command = "/usr/bin/python3 " + std::string(BATON_SOURCE_DIR) +
                              "/tests/engine/structured/validate_instances.py " + file.string() + " 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string report;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) report += buf;
  const int status = ::pclose(p);
  std::filesystem::remove(file);
  EXPECT_EQ(status, 0) << report;
  EXPECT_THAT(report, HasSubstr("0 bad"));
  EXPECT_GT(written, 200u);
}

TEST(TokenMask, EqualsFeedingEveryTokenToTheMatcher) {
  // Every byte, JSON-ish pieces, and random strings (some ending inside a UTF-8 sequence); an EOS
  // and a special token without bytes.
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"{\"", "\":", "\",", "\"}", "true", "false", "null", "  ", "\n  ", "},{", "[]", "{}", "12", ".5",
                        "e+", "\\u00", "\xC3", "\xA9\"", "name", "\"name\"", "age", "\":\"", "]}"}) {
    vocab.emplace_back(t);
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    std::string t;
    for (std::size_t n = 1 + rng() % 5; n > 0; --n) t.push_back(static_cast<char>("{}[]\",: a1e.-\\\xC3\xA9"[rng() % 17]));
    vocab.push_back(t);
  }
  const auto eos = static_cast<std::int32_t>(vocab.size());
  vocab.emplace_back();  // EOS: no bytes
  vocab.emplace_back();  // another special token
  const TokenMasker masker(vocab, {eos});
  auto g = json_schema_grammar(schema_cases()[0].schema);
  ASSERT_TRUE(g.ok());
  std::vector<std::uint8_t> allowed;
  for (int walk = 0; walk < 20; ++walk) {
    GrammarMatcher m(*g);
    for (int step = 0; step < 60; ++step) {
      masker.allowed(m, allowed);
      ASSERT_EQ(allowed.size(), vocab.size());
      std::vector<std::int32_t> ids;
      for (std::size_t id = 0; id < vocab.size(); ++id) {
        GrammarMatcher trial = m;
        const bool fits = static_cast<std::int32_t>(id) == eos ? m.complete() : !vocab[id].empty() && trial.accept(vocab[id]);
        ASSERT_EQ(allowed[id] != 0, fits) << "walk " << walk << " step " << step << " token " << id;
        if (fits) ids.push_back(static_cast<std::int32_t>(id));
      }
      ASSERT_FALSE(ids.empty());
      const std::int32_t pick = ids[rng() % ids.size()];
      if (pick == eos) break;
      ASSERT_TRUE(m.accept(vocab[static_cast<std::size_t>(pick)]));
    }
  }
}

}  // namespace
}  // namespace baton::structured
