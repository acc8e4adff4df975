// The values of Baton's public API (proto/baton/v1/api.proto, package baton.v1) as plain C++
// structs: what a request asks for and what a completion returns. Field meanings and defaults are
// the proto's (vLLM's SamplingParams / the OpenAI API): an unset optional means "server default".
//
// Standard C++ only. Must not: expose protobuf or gRPC types (the SDK's generated code is private).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "baton/export.h"

namespace baton {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

struct ChatPrompt {
  std::vector<ChatMessage> messages;
  std::optional<bool> add_generation_prompt;  // unset: true
};

// Text (encoded by the server's tokenizer with special tokens), token ids, or chat messages
// (rendered with the model's chat template).
using Prompt = std::variant<std::string, std::vector<std::int32_t>, ChatPrompt>;

struct SamplingParams {
  std::optional<float> temperature;  // <= 1e-5: greedy; server default 1
  std::optional<std::int32_t> top_k;  // 0 or -1: off
  std::optional<float> top_p;         // (0, 1]
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<std::uint64_t> seed;       // same seed, same tokens, whatever else is running
  std::optional<std::int32_t> max_tokens;  // server default 16
  std::optional<std::int32_t> min_tokens;
  std::vector<std::int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings
  std::optional<bool> ignore_eos;
  std::optional<bool> include_stop_str_in_output;
  std::optional<std::int32_t> logprobs;  // the sampled token's logprob plus the top n (0..20)
  // OpenAI's logit_bias: token id -> bias in [-100, 100], added to the token's logit before
  // sampling (-100 in effect bans it, 100 forces it); at most 1024 tokens.
  std::map<std::int32_t, float> logit_bias;
  // OpenAI's response_format as JSON text, e.g. R"({"type":"json_object"})"; empty: free text.
  std::string response_format;
};

struct GenerateRequest {
  std::string request_id;  // "": the router assigns one (every Delta and the result carry it)
  Prompt prompt;
  SamplingParams sampling;
  bool force_local_prefill = false;  // prefill on the decode node even when a prefill node is free
};

enum class FinishReason {
  kNone,    // still running
  kStop,    // EOS, a stop token id or a stop string
  kLength,  // max_tokens or the model's length
  kAbort,   // Client::abort (or the server stopped it)
  kError,   // a fault of the serving side; the result's `error` says what
};

// "none", "stop", "length", "abort", "error" (as `baton generate` prints them).
BATON_CLIENT_API const char* finish_reason_name(FinishReason reason);

struct TopLogprob {
  std::int32_t token = 0;
  float logprob = 0;
};

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0;
  std::vector<TopLogprob> top;
};

struct SpeculationUsage {
  std::int64_t num_drafts = 0;  // verification steps that checked at least one draft token
  std::int64_t num_draft_tokens = 0;
  std::int64_t num_accepted_tokens = 0;
  std::vector<std::int64_t> accepted_per_position;  // [k]: accepted drafts per position, from 0
  std::vector<std::int64_t> proposals_by_length;    // [k + 1]: steps by the draft length asked
  // Entropy verification (lossy) verified its sampled drafts: not the model's distribution.
  bool lossy = false;
  double acceptance_rate() const {
    return num_draft_tokens > 0 ? static_cast<double>(num_accepted_tokens) / static_cast<double>(num_draft_tokens) : 0.0;
  }
  // 1 + accepted per draft: tokens each verification step produced on average.
  double mean_acceptance_length() const {
    return num_drafts > 0 ? 1.0 + static_cast<double>(num_accepted_tokens) / static_cast<double>(num_drafts) : 0.0;
  }
};

// Milliseconds, measured by the router.
struct Timings {
  double time_to_first_token_ms = 0;  // router receipt to first token sent
  double end_to_end_ms = 0;           // router receipt to last message
  double prefill_ms = 0;              // on the prefill node (or locally on the decode node)
  double kv_transfer_ms = 0;          // 0 when prefilled locally
  double router_queue_ms = 0;         // router receipt to the first node call
};

struct Usage {
  std::int32_t prompt_tokens = 0;
  std::int32_t completion_tokens = 0;
  std::int32_t cached_prompt_tokens = 0;  // prefix-cache hits where the prompt was prefilled
  SpeculationUsage speculation;
  Timings timings;
  std::string prefill_node;  // address of the node that prefilled ("" when local)
  std::string decode_node;
  bool local_prefill = false;
  std::string transport;  // "ucx", "grpc" or "" (local)
};

// One message of a streamed completion: the tokens and text new in it. The last one has a
// finish_reason other than kNone, and the usage.
struct Delta {
  std::string request_id;
  std::vector<std::int32_t> token_ids;  // with speculation often several
  std::string text;
  std::vector<TokenLogprob> logprobs;  // one per token id, when requested
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;  // kError: what went wrong
  std::optional<std::int32_t> stop_token;
  std::optional<std::string> stop_string;
  std::optional<Usage> usage;  // on the last delta only
  // vLLM's kv_transfer_params.hidden_states_path (speculative method extract_hidden_states): the
  // prompt's hidden-states file on the node that prefilled it; on the last delta, "" otherwise.
  std::string hidden_states_path;
};

// A whole completion: every delta joined.
struct GenerateResult {
  std::string request_id;
  std::string text;
  std::vector<std::int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;
  std::optional<std::int32_t> stop_token;
  std::optional<std::string> stop_string;
  Usage usage;
  std::string hidden_states_path;  // as in Delta
  double client_time_to_first_token_ms = 0;  // as this client saw them (network included)
  double client_total_ms = 0;

  // Adds one delta (what Client::generate and Client::stream do with each message).
  BATON_CLIENT_API void append(const Delta& delta);
};

struct ModelInfo {
  std::string model;  // the model directory's base name
  std::int32_t vocab_size = 0;
  std::int32_t max_model_len = 0;
  bool has_tokenizer = false;  // false: token-id mode (prompts and output as ids only)
  bool has_chat_template = false;
  std::string speculative_config;  // the decode nodes' config as JSON ("" without speculation)
  std::int32_t num_prefill_nodes = 0;  // healthy ones
  std::int32_t num_decode_nodes = 0;
  std::string backend;  // a decode node's engine, described
};

struct TokenizeRequest {
  std::variant<std::string, ChatPrompt> prompt;
  std::optional<bool> add_special_tokens;  // for text; unset: true (as Generate encodes text)
};

struct TokenizeResult {
  std::vector<std::int32_t> ids;
  std::string prompt;  // the rendered prompt (chat) or the text given
};

}  // namespace baton
