// A client's channel to a router's public API (baton generate --endpoint, bench serve,
// verify-lossless, tests): TLS verifying the router against --tls-ca (or plain text without it),
// and every call carrying `authorization: Bearer KEY` when a key is given. The key goes on through
// a client interceptor, which works over plain text too (gRPC's call credentials refuse
// insecure channels, and a local cluster without --tls still takes keys).
// Must not: read the environment or flags (callers pass --tls-ca and BATON_API_KEY).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"

namespace baton::security {

absl::StatusOr<std::shared_ptr<grpc::Channel>> public_api_channel(const std::string& endpoint,
                                                                  const std::string& ca_file,
                                                                  const std::string& api_key,
                                                                  const grpc::ChannelArguments& args = {});

}  // namespace baton::security
