// OpenAI's tool calling in a chat request: `tools`, `tool_choice`, `parallel_tool_calls`, and the
// history's assistant `tool_calls` and `tool` messages, checked and turned into the baton.v1 chat
// (the tools reach the chat template) and into how the answer is read:
//   "none"      the tools are shown to the model; its output is content.
//   "auto"      (the default when tools are given) the output is read for calls by the server's
//               --tool-call-parser; needs --enable-auto-tool-choice, as in vLLM.
//   "required"  decoding is constrained to [{"name": TOOL, "parameters": ARGS}, ...] (one call
//               with parallel_tool_calls false), ARGS valid for the tool's parameters schema.
//   {"type": "function", "function": {"name": TOOL}}  decoding is constrained to TOOL's
//               arguments.
// The constraints are response_format JSON schemas, the same structured decoding (so a forced
// call is exact under speculation too); a tool whose schema uses a keyword that decoding cannot
// enforce is refused with tool_choice "required" / named, naming the tool and the keyword.
//
// Errors are ApiError (400) naming the field, thrown as openai_request.cc's parser does.
// Must not: parse the model's output (tool_call_parser.h does) or build responses.
#pragma once

#include <string>

#include "baton/v1/api.pb.h"
#include "nlohmann/json.hpp"

namespace baton::router::http {

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// How a chat answer is read for tool calls.
struct ToolUse {
  ToolChoice choice = ToolChoice::kNone;
  std::string name;       // kNamed: the function
  bool parallel = true;   // parallel_tool_calls: false keeps one call
};

// `body`: the chat request as written (an ordered_json keeps each schema's property order).
// Fills chat.tools; for "required" and named sets sampling.response_format (refusing one the
// client set too). auto_tool_choice: the server has --enable-auto-tool-choice and a parser.
ToolUse parse_tools(const nlohmann::ordered_json& body, bool auto_tool_choice, baton::v1::ChatMessages& chat,
                    baton::v1::SamplingParams& sampling);

// An assistant message's `tool_calls` ([{"id", "type": "function", "function": {"name",
// "arguments": JSON text}}]) and a tool message's `tool_call_id` / `name`. `where`: "messages[i]".
void parse_message_tools(const nlohmann::json& message, const std::string& where, baton::v1::ChatMessage& out);

}  // namespace baton::router::http
