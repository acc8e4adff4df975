// Fuzzes chat templates, tokenizer/chat_template.h: ChatTemplate::compile(source) on the input
// (tokenizer_config.json's "chat_template", a Jinja template: lexer, parser), and, when it
// compiles, render() of a small fixed conversation with it (the evaluator and every builtin filter,
// test, method and global the template names).
//
// Input: the template source. Inputs over 8 KiB are not compiled (the -max_len of scripts/fuzz.sh
// is the same; real templates are a few KiB).
//
// Bounds: the renderer bounds itself (tokenizer/chat_template_limits.h: evaluation depth, steps,
// string, list and range sizes, value nesting) and ends a runaway template with an error, so a
// template that still hits libFuzzer's -timeout or -rss_limit_mb is a finding (docs/fuzzing.md).
//
// Checks: compile and render return a status (never throw, crash or hit undefined behaviour).
//
// Must not: read files, or skip an input by its content.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"

namespace {

constexpr std::size_t kMaxInputBytes = 8 << 10;

const nlohmann::json& variables() {
  static const nlohmann::json v = nlohmann::json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Hi! What is 2 + 2?"},
      {"role": "assistant", "content": "4.", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "{\"sum\": 4}"},
      {"role": "user", "content": "Thanks \u00e9\u65e5"}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInputBytes) return 0;
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto compiled = baton::ChatTemplate::compile(source);
  if (!compiled.ok()) return 0;
  (void)(*compiled)->render(variables());
  return 0;
}
