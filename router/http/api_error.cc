#include "router/http/api_error.h"

namespace baton::router::http {

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

ApiError bad_field(const std::string& param, const std::string& message) {
  return ApiError{400, message, "invalid_request_error", param, ""};
}

ApiError from_status(const absl::Status& status, const std::string& param) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      // The prompt does not fit the decode node's max_model_len (prompt.h's check): OpenAI's code.
      if (message.find("max_model_len") != std::string::npos) {
        return ApiError{400, message, "invalid_request_error", param, "context_length_exceeded"};
      }
      return ApiError{400, message, "invalid_request_error", param, ""};
    case absl::StatusCode::kNotFound:
      return ApiError{404, message, "invalid_request_error", "", "not_found"};
    case absl::StatusCode::kAlreadyExists:
      return ApiError{409, message, "invalid_request_error", "", "conflict"};
    case absl::StatusCode::kResourceExhausted:
      return ApiError{429, message, "rate_limit_error", "", "rate_limit_exceeded"};
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kFailedPrecondition:
      return ApiError{503, message, "service_unavailable", "", "service_unavailable"};
    case absl::StatusCode::kDeadlineExceeded:
      return ApiError{504, message, "timeout", "", "timeout"};
    default:
      return ApiError{500, message, "internal_error", "", "internal_error"};
  }
}

}  // namespace baton::router::http
