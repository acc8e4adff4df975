#include "proto/grpc_status_name.h"

#include <iterator>

namespace baton {

std::string grpc_code_name(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {
      "OK",           "CANCELLED",     "UNKNOWN",           "INVALID_ARGUMENT",    "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
      "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",          "UNAVAILABLE",         "DATA_LOSS",         "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  if (i >= 0 && i < static_cast<int>(std::size(kNames))) return kNames[i];
  return "code " + std::to_string(i);
}

}  // namespace baton
