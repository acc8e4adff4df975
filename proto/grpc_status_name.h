// The name of a gRPC status code as gRPC and its docs spell it ("UNAVAILABLE"), for messages people
// read: "gRPC 14" tells nobody anything.
#pragma once

#include <string>

#include "grpcpp/support/status.h"

namespace baton {

// "OK", "CANCELLED", ... "UNAUTHENTICATED"; "code N" for a number gRPC does not define.
std::string grpc_code_name(grpc::StatusCode code);

}  // namespace baton
