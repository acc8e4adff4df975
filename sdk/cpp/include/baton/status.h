// baton::Status and baton::Result<T>: how the client SDK reports errors. A Status is a gRPC status
// code and message, as the router sent them (or as gRPC made them, e.g. UNAVAILABLE when the
// router cannot be reached, DEADLINE_EXCEEDED when a call's deadline passed).
//
// Standard C++ only, so that SDK users need neither abseil nor gRPC headers. Must not: throw.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "baton/export.h"

namespace baton {

// The gRPC status codes (same numbers as grpc::StatusCode and absl::StatusCode).
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "OK", "INVALID_ARGUMENT", ... (gRPC's names).
BATON_CLIENT_API const char* status_code_name(StatusCode code);

class BATON_CLIENT_API Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: sampling.temperature must be >= 0"; "OK" when ok.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status saying why there is none. value() on an error is a precondition
// violation (checked with an assertion in debug builds); test ok() first.
template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  // An error. An OK status here is a caller's bug: it becomes UNKNOWN, never a value-less "ok".
  Result(Status status)  // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? Status(StatusCode::kUnknown, "Result made from an OK status without a value")
                            : std::move(status)) {}

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace baton
