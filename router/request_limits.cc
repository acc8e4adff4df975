#include "router/request_limits.h"

#include <algorithm>

#include "common/sampling_ranges.h"
#include "engine/structured/json_grammar.h"
#include "common/status.h"

namespace baton::router {
namespace {

absl::Status over(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(str_cat(field, ": ", what));
}

}  // namespace

absl::Status check_request_limits(const baton::v1::GenerateRequest& request, const RequestLimits& limits,
                                  std::int32_t max_model_len) {
  std::size_t prompt_limit = limits.max_prompt_bytes;
  if (max_model_len > 0) {
    prompt_limit = std::min(prompt_limit, static_cast<std::size_t>(max_model_len) * kPromptBytesPerToken);
  }
  const auto prompt_over = [&](std::size_t bytes, const std::string& field) {
    return over(field, str_cat(bytes, " bytes; at most ", prompt_limit, " (--max-prompt-bytes, and ",
                               kPromptBytesPerToken, " bytes per token of max_model_len ", max_model_len,
                               ") before it is tokenized"));
  };
  if (request.has_text() && request.text().size() > prompt_limit) return prompt_over(request.text().size(), "prompt");
  if (request.has_chat()) {
    const auto& messages = request.chat().messages();
    if (static_cast<std::size_t>(messages.size()) > limits.max_chat_messages) {
      return over("messages", str_cat(messages.size(), " messages; at most ", limits.max_chat_messages));
    }
    const auto& tools = request.chat().tools();
    if (static_cast<std::size_t>(tools.size()) > kMaxTools) {
      return over("tools", str_cat(tools.size(), " tools; at most ", kMaxTools));
    }
    std::size_t bytes = 0;
    for (const auto& m : messages) {
      if (static_cast<std::size_t>(m.tool_calls_size()) > kMaxTools) {
        return over("messages", str_cat("a message makes ", m.tool_calls_size(), " tool calls; at most ", kMaxTools));
      }
      bytes += m.role().size() + m.content().size() + m.tool_call_id().size() + m.name().size();
      for (const auto& call : m.tool_calls()) bytes += call.id().size() + call.name().size() + call.arguments().size();
    }
    if (bytes > prompt_limit) return prompt_over(bytes, "messages");
    std::size_t tool_bytes = 0;
    for (const auto& t : tools) tool_bytes += t.name().size() + t.description().size() + t.parameters().size();
    if (tool_bytes > prompt_limit) return prompt_over(tool_bytes, "tools");
  }
  const baton::v1::SamplingParams& s = request.sampling();
  // The engine's own ranges, here at the door: a bad value is the client's error, not a node's.
  SamplingValues v;
  if (s.has_temperature()) v.temperature = s.temperature();
  if (s.has_top_k()) v.top_k = s.top_k();
  if (s.has_top_p()) v.top_p = s.top_p();
  if (s.has_min_p()) v.min_p = s.min_p();
  if (s.has_repetition_penalty()) v.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) v.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) v.frequency_penalty = s.frequency_penalty();
  if (s.has_max_tokens()) v.max_tokens = s.max_tokens();
  if (s.has_min_tokens()) v.min_tokens = s.min_tokens();
  if (s.has_max_speculative_tokens()) v.max_speculative_tokens = s.max_speculative_tokens();
  BATON_RETURN_IF_ERROR(check_sampling_ranges(v));
  for (int i = 0; i < s.stop_size(); ++i) {
    if (s.stop(i).empty()) return over(str_cat("stop"), str_cat("stop string ", i, " is empty"));
  }
  for (int i = 0; i < s.stop_token_ids_size(); ++i) {
    if (s.stop_token_ids(i) < 0) {
      return over("stop_token_ids", str_cat("stop_token_ids[", i, "] is ", s.stop_token_ids(i), "; token ids are >= 0"));
    }
  }
  if (static_cast<std::size_t>(s.stop_size()) > limits.max_stop_strings) {
    return over("stop", str_cat(s.stop_size(), " stop strings; at most ", limits.max_stop_strings,
                                " (--max-stop-strings)"));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    if (s.stop(i).size() > limits.max_stop_string_bytes) {
      return over("stop", str_cat("stop string ", i, " has ", s.stop(i).size(), " bytes; at most ",
                                  limits.max_stop_string_bytes, " (--max-stop-string-bytes)"));
    }
  }
  if (static_cast<std::size_t>(s.stop_token_ids_size()) > limits.max_stop_token_ids) {
    return over("stop_token_ids", str_cat(s.stop_token_ids_size(), " ids; at most ", limits.max_stop_token_ids));
  }
  if (static_cast<std::size_t>(s.logit_bias_size()) > kMaxLogitBiasTokens) {
    return over("logit_bias", str_cat(s.logit_bias_size(), " tokens; at most ", kMaxLogitBiasTokens));
  }
  for (const auto& [token, bias] : s.logit_bias()) BATON_RETURN_IF_ERROR(check_logit_bias_entry(token, bias));
  if (!s.response_format().empty()) {
    if (s.response_format().size() > kMaxResponseFormatBytes) {
      return over("response_format", str_cat(s.response_format().size(), " bytes; at most ",
                                             kMaxResponseFormatBytes));
    }
    // A schema the nodes could not compile is the client's error, found here.
    auto g = structured::response_format_grammar(s.response_format());
    if (!g.ok()) return over("response_format", std::string(g.status().message()));
    if (*g && s.ignore_eos()) return over("response_format", "it cannot be combined with ignore_eos");
  }
  if (s.has_logprobs() && s.logprobs() > limits.max_logprobs) {
    return over("logprobs", str_cat(s.logprobs(), "; at most ", limits.max_logprobs));
  }
  return absl::OkStatus();
}

std::string limited_field(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return "";
  const std::string message(status.message());
  for (const char* field : {"prompt", "messages", "tools", "stop_token_ids", "stop", "logprobs", "logit_bias",
                            "response_format", "request_id", "cache_salt"}) {
    const std::string prefix = str_cat(field, ":");
    if (message.rfind(prefix, 0) == 0) return field;
  }
  // check_sampling_ranges's "<field> must be ...".
  for (const char* field : {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                            "frequency_penalty", "max_tokens", "min_tokens", "max_speculative_tokens"}) {
    const std::string prefix = str_cat(field, " must be");
    if (message.rfind(prefix, 0) == 0) return field;
  }
  return "";
}

}  // namespace baton::router
