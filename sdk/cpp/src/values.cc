// Status names, finish reason names and GenerateResult::append: the SDK's value types.
#include "baton/status.h"

#include "baton/types.h"

namespace baton {

const char* status_code_name(StatusCode code) {
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",           "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < static_cast<int>(std::size(kNames)) ? kNames[i] : "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

void GenerateResult::append(const Delta& d) {
  if (request_id.empty()) request_id = d.request_id;
  text += d.text;
  token_ids.insert(token_ids.end(), d.token_ids.begin(), d.token_ids.end());
  logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  if (d.finish_reason != FinishReason::kNone) {
    finish_reason = d.finish_reason;
    error = d.error;
    stop_token = d.stop_token;
    stop_string = d.stop_string;
    if (d.usage) usage = *d.usage;
    hidden_states_path = d.hidden_states_path;
  }
}

}  // namespace baton
