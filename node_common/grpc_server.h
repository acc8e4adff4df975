// Starting a node's gRPC server the same way everywhere: bound to host:port (port 0 picks a free
// one, reported back), grpc.health.v1 and server reflection on, large messages allowed (KV over
// the gRPC transport, hand-off records), and the health status flipped to SERVING only when the
// node says it is ready.
//
// Must not: know any service's contents.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace baton {

struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address;  // host:port as bound
};

// Builds and starts a server for `services` (owned by the caller, outliving the server) with
// `credentials` (security/grpc_credentials.h: a node's are mutual TLS with the cluster CA, or plain
// text under --insecure). The health service reports NOT_SERVING until set_serving(true).
absl::StatusOr<GrpcServer> start_grpc_server(const std::string& host, int port, const std::vector<grpc::Service*>& services,
                                             std::shared_ptr<grpc::ServerCredentials> credentials,
                                             const std::function<void(grpc::ServerBuilder&)>& configure = nullptr);

// Flips grpc.health.v1 for the whole server ("" service) and every service on it.
void set_serving(grpc::Server& server, bool serving);

// Splits "host:port"; InvalidArgument naming the flag when it is not one.
absl::StatusOr<std::pair<std::string, int>> parse_host_port(const std::string& text, const std::string& what);

}  // namespace baton
