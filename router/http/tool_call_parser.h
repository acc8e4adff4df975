// The model's tool calls, found in its output text as it streams: what each piece of text adds to
// the answer's content and to its calls. One parser per choice; feed() each text delta in order,
// then finish() once. Fed the whole text at once or byte by byte, a parser says the same thing:
// the concatenated content and calls do not depend on how the text was split, so a streamed
// answer equals the non-streamed one.
//
// The formats (the tool_choice that picks them: openai_request.h):
//   hermes       (--tool-call-parser hermes; Qwen 2.5 / 3, Hermes): <tool_call>{"name": ...,
//                "arguments": {...}}</tool_call> blocks; the text around them is content. A block
//                whose JSON is not such an object is content, as written.
//   llama3_json  (--tool-call-parser llama3_json; Llama 3.1+): the whole output, after an optional
//                <|python_tag|>, is {"name": ..., "parameters" | "arguments": {...}} objects
//                separated by ";". An output that is not that is content.
//   named        (tool_choice naming a function): the whole output is that function's arguments,
//                streamed as they come.
//   required     (tool_choice "required"): the output is [{"name": ..., "parameters": {...}}, ...].
// Text that may still become a call (a "<tool_" at the end of the text so far, a JSON output not
// yet complete) is held back until it is decided.
//
// Must not: know HTTP or requests; generate ids (the response does).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::router::http {

// Part of one call: its first part carries the name, every part some of the arguments' JSON text.
struct ToolCallPart {
  std::size_t index = 0;  // the call's place among this output's calls
  std::string name;       // set on the call's first part only
  std::string arguments;  // the next bytes of its arguments (a JSON object's text)
};

struct ParsedText {
  std::string content;
  std::vector<ToolCallPart> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual ParsedText feed(std::string_view text) = 0;
  // The output ended: what was held back.
  virtual ParsedText finish() = 0;
};

// The parsers --tool-call-parser names.
enum class ToolCallFormat { kHermes, kLlama3Json };
absl::StatusOr<ToolCallFormat> tool_call_format(std::string_view name);  // "hermes", "llama3_json"
const char* tool_call_format_name(ToolCallFormat format);

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format);
std::unique_ptr<ToolCallParser> make_named_call_parser(std::string name);
std::unique_ptr<ToolCallParser> make_required_calls_parser();

}  // namespace baton::router::http
