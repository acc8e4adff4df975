// Example: stream one greedy completion from a Baton router with the C++ client SDK.
//   baton up --port 50051 &
//   baton_client_generate 127.0.0.1:50051 "def fibonacci(n):" 64
// The text goes to stdout as it arrives; usage and speculation counts to stderr.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "baton/client.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s HOST:PORT PROMPT [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  baton::Client client(argv[1]);
  baton::GenerateRequest request;
  request.prompt = std::string(argv[2]);
  request.sampling.max_tokens = argc > 3 ? std::atoi(argv[3]) : 64;
  request.sampling.temperature = 0;  // greedy

  auto result = client.stream(request, [](const baton::Delta& delta) {
    std::fwrite(delta.text.data(), 1, delta.text.size(), stdout);
    std::fflush(stdout);
  });
  if (!result.ok()) {
    std::fprintf(stderr, "\nerror: %s\n", result.status().to_string().c_str());
    return 1;
  }
  const baton::Usage& u = result->usage;
  std::fprintf(stderr, "\n%d prompt + %d generated tokens, finish: %s, time to first token %.1f ms\n", u.prompt_tokens,
               u.completion_tokens, baton::finish_reason_name(result->finish_reason), u.timings.time_to_first_token_ms);
  if (u.speculation.num_drafts > 0) {
    std::fprintf(stderr, "speculation: %lld drafts, %lld draft tokens, %lld accepted (mean acceptance length %.3f)\n",
                 static_cast<long long>(u.speculation.num_drafts), static_cast<long long>(u.speculation.num_draft_tokens),
                 static_cast<long long>(u.speculation.num_accepted_tokens), u.speculation.mean_acceptance_length());
  }
  return result->finish_reason == baton::FinishReason::kError ? 1 : 0;
}
