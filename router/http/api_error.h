// An error of the OpenAI-compatible HTTP API: its HTTP status and OpenAI's body
// {"error": {"message", "type", "param", "code"}}, and the mapping from the router's absl/gRPC
// status codes to it (INVALID_ARGUMENT 400, NOT_FOUND 404, RESOURCE_EXHAUSTED 429, UNAVAILABLE
// and FAILED_PRECONDITION 503, DEADLINE_EXCEEDED 504, anything else 500).
//
// Must not: know about HTTP servers or sockets (http_server.h sends these).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace baton::router::http {

struct ApiError {
  int status = 500;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" : null
  std::string code;   // "" : null

  nlohmann::json body() const;
};

// 400 for a request field: `param` is the field, as OpenAI names it ("messages[1].content").
ApiError bad_field(const std::string& param, const std::string& message);
// The router's status for a request, with the field its INVALID_ARGUMENT is about ("" : none).
ApiError from_status(const absl::Status& status, const std::string& param = "");

}  // namespace baton::router::http
