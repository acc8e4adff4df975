// How `baton bench serve` sends one request and what it records: the router's gRPC API (Generate
// stream) or the OpenAI-compatible HTTP API (/v1/completions or /v1/chat/completions, streamed as
// server-sent events). Both record, as this client sees them, the time of every message that
// carried tokens, so TTFT, TPOT and inter-token latency are measured the same way for both.
//
// Must not: retry, or count a request that failed as a success (its error is kept).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/serve_dataset.h"

namespace baton::cli {

struct ServeSampling {
  int max_tokens = 128;
  float temperature = 0;  // greedy by default: output lengths then match across runs
  bool ignore_eos = false;
  std::uint64_t seed = 0;
};

struct ServeResult {
  bool ok = false;
  std::string error;
  double ttft_s = 0;                // request sent to first token received
  double e2e_s = 0;                 // request sent to last byte received
  std::vector<double> chunk_times;  // arrival of each token-carrying message, from the send
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;
  // Speculation as the server reported it (0 when it reports none).
  std::int64_t num_drafts = 0, num_draft_tokens = 0, num_accepted_tokens = 0;
};

struct ServeModelInfo {
  std::string model;
  std::int32_t vocab_size = 0;
};

class ServeBackend {
 public:
  virtual ~ServeBackend() = default;
  virtual absl::StatusOr<ServeModelInfo> model_info() = 0;
  // Thread-safe: called from many threads at once.
  virtual ServeResult send(const ServePrompt& prompt, const ServeSampling& sampling) = 0;
};

// endpoint: HOST:PORT of a router. ca_file: TLS verifying the router with this CA ("" : plain
// text). api_key: sent as a bearer token when not empty.
absl::StatusOr<std::unique_ptr<ServeBackend>> make_grpc_backend(const std::string& endpoint, const std::string& ca_file,
                                                                const std::string& api_key);
// base_url: http(s)://HOST:PORT (with or without /v1); chat: use /v1/chat/completions for every
// prompt (otherwise only chat prompts use it). ca_file: for https, the CA to verify the server
// with ("" : the system's). api_key: sent as a bearer token when not empty.
absl::StatusOr<std::unique_ptr<ServeBackend>> make_openai_backend(const std::string& base_url, bool chat,
                                                                  const std::string& ca_file, const std::string& api_key);

}  // namespace baton::cli
