#include "node_common/grpc_server.h"

#include "absl/strings/numbers.h"
#include "common/status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace baton {

namespace {
constexpr int kMaxMessageBytes = 256 << 20;  // KV chunks and hand-off records (features) fit easily
}

absl::StatusOr<GrpcServer> start_grpc_server(const std::string& host, int port, const std::vector<grpc::Service*>& services,
                                             std::shared_ptr<grpc::ServerCredentials> credentials,
                                             const std::function<void(grpc::ServerBuilder&)>& configure) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(str_cat(host, ":", port), std::move(credentials), &bound);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  for (grpc::Service* s : services) builder.RegisterService(s);
  if (configure) configure(builder);
  GrpcServer out;
  out.server = builder.BuildAndStart();
  if (!out.server || bound == 0) {
    return absl::UnavailableError(str_cat("cannot listen on ", host, ":", port, " (in use, or not a local address?)"));
  }
  out.port = bound;
  out.address = str_cat(host, ":", bound);
  set_serving(*out.server, false);
  return out;
}

void set_serving(grpc::Server& server, bool serving) {
  if (grpc::HealthCheckServiceInterface* h = server.GetHealthCheckService()) h->SetServingStatus(serving);
}

absl::StatusOr<std::pair<std::string, int>> parse_host_port(const std::string& text, const std::string& what) {
  const std::size_t colon = text.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(text.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(str_cat(what, ": '", text, "' is not HOST:PORT"));
  }
  return std::make_pair(text.substr(0, colon), port);
}

}  // namespace baton
