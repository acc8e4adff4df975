// A client of the router's streaming Generate call that collects one completion: token ids,
// logprobs, text, finish reason, usage, and the time to first token and to the end as this client
// saw them. Shared by `baton generate --endpoint` and the serving benchmark.
//
// Must not: retry (the router already retried what may be retried).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "baton/v1/api.grpc.pb.h"
#include "engine/engine.h"
#include "grpcpp/grpcpp.h"

namespace baton::cli {

struct RemoteResult {
  grpc::Status status;
  std::vector<std::int32_t> ids;
  std::vector<TokenOutput> tokens;
  std::string text;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  std::string error;
  v1::Usage usage;
  std::string hidden_states_path;  // kv_transfer_params (extract_hidden_states), on the prefilling node
  double ttft_s = 0, total_s = 0;
};

// Streams one request (deadline `timeout`); `on_text` sees each text delta as it arrives.
RemoteResult run_request(v1::Baton::Stub& stub, const v1::GenerateRequest& request,
                         const std::function<void(const std::string&)>& on_text,
                         std::chrono::milliseconds timeout = std::chrono::hours(1));

}  // namespace baton::cli
