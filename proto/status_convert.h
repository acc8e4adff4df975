// absl::Status <-> grpc::Status, keeping the code and the message (both use the canonical codes).
// Must not: rewrite messages.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace baton {

inline grpc::Status to_grpc_status(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status to_absl_status(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace baton
