// Fuzzes the tool-call parsers, router/http/tool_call_parser.h, on model output (text a model
// writes is as untrusted as a request: a prompt can make it write anything).
//
// Input: byte 0 picks the parser (mod 4: hermes, llama3_json, named, required), byte 1 where the
// text is cut; the rest is the output text.
//
// Checks: the parsers return (never throw or crash); fed whole, cut in two at that point, or byte
// by byte, a parser says the same content and the same calls (the property that makes a streamed
// answer equal the whole one); every call has a name on its first part only, indexes in order, and
// (but for the named parser, which passes the model's text through) arguments that are a JSON
// object.
//
// Must not: start a server, or skip an input by its content.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "nlohmann/json.hpp"
#include "router/http/tool_call_parser.h"

namespace {

using baton::router::http::ParsedText;
using baton::router::http::ToolCallParser;

struct Said {
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> arguments;
  bool operator==(const Said&) const = default;
};

std::unique_ptr<ToolCallParser> make(int kind) {
  using namespace baton::router::http;
  switch (kind) {
    case 0: return make_tool_call_parser(ToolCallFormat::kHermes);
    case 1: return make_tool_call_parser(ToolCallFormat::kLlama3Json);
    case 2: return make_named_call_parser("f");
    default: return make_required_calls_parser();
  }
}

Said said(int kind, const std::vector<std::string>& pieces) {
  auto parser = make(kind);
  Said s;
  const auto take = [&](const ParsedText& p) {
    s.content += p.content;
    for (const auto& part : p.calls) {
      FUZZ_CHECK(part.index <= s.names.size());
      if (part.index == s.names.size()) {
        FUZZ_CHECK(!part.name.empty());
        s.names.push_back(part.name);
        s.arguments.emplace_back();
      } else {
        FUZZ_CHECK(part.name.empty());
      }
      s.arguments[part.index] += part.arguments;
    }
  };
  for (const std::string& piece : pieces) take(parser->feed(piece));
  take(parser->finish());
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const int kind = data[0] % 4;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::size_t cut = text.empty() ? 0 : data[1] % (text.size() + 1);
  const Said whole = said(kind, {text});
  FUZZ_CHECK(said(kind, {text.substr(0, cut), text.substr(cut)}) == whole);
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  FUZZ_CHECK(said(kind, bytes) == whole);
  if (kind != 2) {
    for (const std::string& a : whole.arguments) {
      FUZZ_CHECK(nlohmann::json::parse(a, nullptr, /*allow_exceptions=*/false).is_object());
    }
  }
  return 0;
}
