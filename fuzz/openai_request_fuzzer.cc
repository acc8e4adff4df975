// Fuzzes the OpenAI request parser, router/http/openai_request.h: parse_request(endpoint, body,
// served_model) on the body of POST /v1/completions or /v1/chat/completions, as the router's HTTP
// server calls it for any client.
//
// Input: byte 0 picks the endpoint (even: completions, odd: chat); the rest is the request body as
// sent. The served model is "baton-tiny-code" (the seeds name it, so they get past the model check).
//
// Checks: parse_request returns (never throws or crashes); an error is a 4xx whose body serializes
// as the server sends it (ApiError::body().dump()); a parsed request is of the endpoint asked for,
// names the served model and serializes.
//
// Must not: start the router or a socket, encode prompts, or skip an input by its content.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "fuzz/fuzz_support.h"
#include "router/http/openai_request.h"

namespace {

using baton::router::http::ApiError;
using baton::router::http::Endpoint;
using baton::router::http::OpenAiRequest;

const std::string kServedModel = "baton-tiny-code";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Endpoint endpoint = (data[0] & 1) != 0 ? Endpoint::kChat : Endpoint::kCompletions;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto parsed = baton::router::http::parse_request(endpoint, body, kServedModel);
  if (const auto* error = std::get_if<ApiError>(&parsed)) {
    FUZZ_CHECK(error->status >= 400 && error->status < 500);
    const std::string reply = error->body().dump();  // what http_server.cc's error_reply sends
    FUZZ_CHECK(!reply.empty());
    return 0;
  }
  const OpenAiRequest& r = std::get<OpenAiRequest>(parsed);
  FUZZ_CHECK(r.endpoint == endpoint);
  FUZZ_CHECK(r.model == kServedModel);
  FUZZ_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= 20);
  FUZZ_CHECK(!r.include_usage || r.stream);
  if (endpoint == Endpoint::kChat) {
    FUZZ_CHECK(r.generate.has_chat() && r.generate.chat().messages_size() > 0);
  } else {
    FUZZ_CHECK(!r.generate.has_chat());
  }
  std::string wire;
  FUZZ_CHECK(r.generate.SerializeToString(&wire));
  // Every choice is bounded and carries a prompt.
  const auto choices = baton::router::http::choice_requests(r);
  FUZZ_CHECK(!choices.empty() && choices.size() <= baton::router::http::kMaxChoices);
  FUZZ_CHECK(choices.size() == (1 + r.more_prompts.size()) * static_cast<std::size_t>(r.n));
  for (const auto& c : choices) FUZZ_CHECK(c.prompt_case() != baton::v1::GenerateRequest::PROMPT_NOT_SET);
  return 0;
}
