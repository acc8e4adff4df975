// Conversions between the SDK's plain structs (baton/types.h) and the generated baton.v1 messages.
// Private to libbaton_client. Must not: validate what the router validates (it names the field).
#pragma once

#include "baton/status.h"
#include "baton/types.h"
#include "baton/v1/api.pb.h"
#include "grpcpp/support/status.h"

namespace baton::client_internal {

v1::GenerateRequest to_proto(const GenerateRequest& request);
v1::TokenizeRequest to_proto(const TokenizeRequest& request);
Delta from_proto(v1::GenerateResponse& message);  // moves the strings out of `message`
ModelInfo from_proto(const v1::ModelInfo& info);
Status from_grpc(const grpc::Status& status);

}  // namespace baton::client_internal
