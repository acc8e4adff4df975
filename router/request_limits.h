// The bounds a public request must keep before the router spends anything on it (tokenizing,
// placing, node calls): sizes of the message and prompt, and of what the nodes would have to
// carry for it (stop strings, stop token ids, logprobs, chat messages and tools). Every limit has
// a default that protects a router and its nodes and a flag to change it (router/main.cc).
//
// Over a limit: INVALID_ARGUMENT whose message starts with the field it names ("prompt: ...",
// "stop: ..."), so that the HTTP front end can name it as OpenAI's `param`; the router serves on.
// Must not: tokenize, or check what the nodes check with the engine's rules (ranges of sampling
// values).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "baton/v1/api.pb.h"

namespace baton::router {

struct RequestLimits {
  std::size_t max_request_bytes = 16u << 20;  // an HTTP body or a gRPC message
  // Prompt text (or chat contents) before tokenizing; also at most 64 bytes per token of the
  // decode node's max_model_len, since a longer text cannot fit the model anyway.
  std::size_t max_prompt_bytes = 8u << 20;
  std::size_t max_chat_messages = 1024;
  std::size_t max_stop_strings = 64;
  std::size_t max_stop_string_bytes = 1024;
  std::size_t max_stop_token_ids = 1024;
  std::int32_t max_logprobs = 20;
};

inline constexpr std::size_t kPromptBytesPerToken = 64;
// Tools a chat request may offer, and calls one message may hold.
inline constexpr std::size_t kMaxTools = 128;

// `max_model_len`: the decode nodes' (0: not known yet).
absl::Status check_request_limits(const baton::v1::GenerateRequest& request, const RequestLimits& limits,
                                  std::int32_t max_model_len);

// The field an error of check_request_limits names ("prompt", "stop", ...), or "".
std::string limited_field(const absl::Status& status);

}  // namespace baton::router
