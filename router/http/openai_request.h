// OpenAI request bodies (POST /v1/completions, /v1/chat/completions) as baton.v1 GenerateRequests,
// with OpenAI's parameter names, defaults and ranges. Every rejection is a 400 naming the field
// (api_error.h); `model` is checked against the served name (404 model_not_found). Sampling values
// inside their OpenAI ranges pass to the nodes, which validate them with the engine's own rules.
//
// Supported: model, prompt (string, token ids, or a list of those), messages (string content or
// text parts; an assistant's tool_calls, tool messages), tools / tool_choice / parallel_tool_calls
// (openai_tools.h), max_tokens / max_completion_tokens, temperature, top_p, seed, stop, n, stream,
// stream_options.include_usage, logprobs (completions: integer; chat: boolean with top_logprobs),
// presence_penalty, frequency_penalty, logit_bias, response_format; vLLM's extras top_k, min_p,
// repetition_penalty, min_tokens, ignore_eos, stop_token_ids, request_id (the id the Abort RPC
// and the logs know the request by; unique among running requests). Unknown fields are ignored.
//
// Also the bodies of vLLM's /tokenize and /detokenize.
//
// Must not: call the router or nodes, or encode prompts (the router's PromptEncoder does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "baton/v1/api.pb.h"
#include "router/http/api_error.h"
#include "router/http/openai_tools.h"

namespace baton::router::http {

enum class Endpoint { kCompletions, kChat };

// A request makes at most this many choices (prompts x n), each its own request on the nodes.
inline constexpr std::size_t kMaxChoices = 128;

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  baton::v1::GenerateRequest generate;  // prompt, sampling, request_id ("" : the router assigns one)
  // Completions with a list of prompts: the requests of the others, as `generate` but the prompt.
  std::vector<baton::v1::GenerateRequest> more_prompts;
  int n = 1;  // choices per prompt
  bool max_tokens_given = false;        // chat without it: up to the model's length
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool want_logprobs = false;           // completions: logprobs set; chat: logprobs true
  int top_logprobs = 0;
  ToolUse tools;  // chat: how the answer is read for tool calls (openai_tools.h)
};

// Every choice's request, in OpenAI's order: prompt p's sample j is choice p * n + j. With n > 1,
// sample j of a seeded request draws with seed + j (so the samples differ and each is
// reproducible); with several choices and a request_id, choice i is known as "<request_id>-<i>".
std::vector<baton::v1::GenerateRequest> choice_requests(const OpenAiRequest& r);

// served_model: the name `model` must equal. auto_tool_choice: the server reads tool calls from
// output (--enable-auto-tool-choice with a --tool-call-parser), so tool_choice "auto" is served.
std::variant<OpenAiRequest, ApiError> parse_request(Endpoint endpoint, const std::string& body,
                                                    const std::string& served_model, bool auto_tool_choice = false);

// vLLM's POST /tokenize: `prompt` (a string; add_special_tokens, default true) or `messages` (as
// chat completions take them; add_generation_prompt, default true); `model` optional, the served
// name when given.
std::variant<baton::v1::TokenizeRequest, ApiError> parse_tokenize(const std::string& body,
                                                                  const std::string& served_model);
// vLLM's POST /detokenize: `tokens`, ids in [0, vocab_size); `model` as above.
std::variant<std::vector<std::int32_t>, ApiError> parse_detokenize(const std::string& body,
                                                                   const std::string& served_model,
                                                                   std::int64_t vocab_size);

}  // namespace baton::router::http
