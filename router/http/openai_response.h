// baton.v1 GenerateResponses as OpenAI response bodies: one body for a whole completion
// (`text_completion` / `chat.completion`), or the server-sent-event chunks of a streamed one
// (`text_completion` / `chat.completion.chunk`: chat's first chunk carries the role, the last
// choice chunk the finish_reason, then a usage chunk with no choices when include_usage). Usage
// has OpenAI's token counts plus `prompt_tokens_details.cached_tokens` and Baton's `speculation`
// counts. A request that extract_hidden_states saved has vLLM's `kv_transfer_params`
// ({"hidden_states_path": ...}) in its choice, and at the top level when it is the only choice (a
// stream: in the finishing chunk). Logprobs in each endpoint's shape, tokens as their text (token-id mode: "token_id:N").
// A request with several choices (n > 1, a list of prompts) builds each choice's part with its
// index and merges them: one body with every choice, one usage for all. A chat with tools has its
// output read for calls (tool_call_parser.h): the message's `tool_calls` (finish_reason
// "tool_calls", except for a named tool_choice, as OpenAI does), or the stream's tool_calls
// deltas, each call's first with its id, type and name.
//
// Must not: do I/O (http_server.h frames and sends what this builds).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/v1/api.pb.h"
#include "nlohmann/json.hpp"
#include "router/http/openai_request.h"
#include "router/http/tool_call_parser.h"

namespace baton {
class Tokenizer;
}

namespace baton::router::http {

struct ResponseContext {
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  std::string model;
  std::int64_t created = 0;  // unix seconds
  Endpoint endpoint = Endpoint::kCompletions;
  bool want_logprobs = false;
  bool include_usage = false;
  const Tokenizer* tokenizer = nullptr;  // null: token-id mode
  int index = 0;  // the choice's index
  // A stream of one choice among several: it sends no usage chunk of its own (the request's,
  // merged, comes last: usage_chunk()).
  bool shared_usage = false;
  ToolUse tools;                                // chat: how output is read for calls
  std::optional<ToolCallFormat> tool_parser;    // --tool-call-parser (tool_choice "auto")
};

// "stop", "length", "abort", "error"; null while running.
nlohmann::json finish_reason_json(baton::v1::FinishReason reason);
nlohmann::json usage_json(const baton::v1::Usage& usage);
// One usage for a request's choices (in choice order, n per prompt): each prompt's tokens once
// (its first choice's prompt and cached counts), every choice's completion tokens and speculation.
baton::v1::Usage merged_usage(const std::vector<const baton::v1::Usage*>& by_choice, int n);
// A whole response from its choices (CompletionBody::choice()) and usage.
nlohmann::json completion_body(const ResponseContext& context, nlohmann::json choices, const baton::v1::Usage& usage);
// A stream's usage chunk: no choices, the usage.
nlohmann::json usage_chunk(const ResponseContext& context, const baton::v1::Usage& usage);

// A whole completion, message by message.
class CompletionBody {
 public:
  explicit CompletionBody(ResponseContext context) : context_(std::move(context)) {}
  void add(const baton::v1::GenerateResponse& message);
  bool finished() const { return finish_ != baton::v1::FINISH_REASON_UNSPECIFIED; }
  baton::v1::FinishReason finish_reason() const { return finish_; }
  const std::string& error() const { return error_; }
  const baton::v1::Usage& usage() const { return usage_; }
  nlohmann::json choice() const;  // this choice, with its index
  nlohmann::json body() const;    // a response of this choice alone

 private:
  ResponseContext context_;
  std::string text_;
  std::vector<baton::v1::TokenLogprob> logprobs_;
  baton::v1::FinishReason finish_ = baton::v1::FINISH_REASON_UNSPECIFIED;
  std::string error_;
  baton::v1::Usage usage_;
  std::string hidden_states_path_;  // the last message's kv_transfer_params
};

// A streamed completion: the chunks each message makes, in order.
class CompletionChunks {
 public:
  explicit CompletionChunks(ResponseContext context);
  std::vector<nlohmann::json> on_message(const baton::v1::GenerateResponse& message);
  const baton::v1::Usage& usage() const { return usage_; }  // the last message's

 private:
  nlohmann::json chunk(nlohmann::json choice) const;
  ResponseContext context_;
  std::unique_ptr<ToolCallParser> tool_parser_;  // null: output is content
  std::vector<std::string> call_ids_;           // by call index
  bool role_sent_ = false;
  std::size_t text_offset_ = 0;
  baton::v1::Usage usage_;
};

}  // namespace baton::router::http
