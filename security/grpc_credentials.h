// gRPC credentials from a TlsConfig (tls_config.h). Certificates come from gRPC's file watcher, so
// a renewed certificate, key or CA file is picked up within --tls-reload-s without a restart.
//
//   cluster server:  mutual TLS, the caller's certificate must chain to the cluster CA (or plain
//                    text with --insecure);
//   public server:   TLS with the process's certificate, no client certificate (API keys prove a
//                    client), or plain text with --insecure;
//   cluster channel: mutual TLS: shows the process's certificate, and accepts a peer whose
//                    certificate chains to the cluster CA whatever address it was dialled at
//                    (membership of the cluster is the identity: pods are dialled by IP, and no
//                    certificate can name every pod IP); plain text with --insecure;
//   client channel:  TLS verifying the router's certificate and host name against --tls-ca.
//
// Every channel a process opens to another Baton process takes cluster_channel_credentials():
// installed once at start-up, it cannot be forgotten at a call site the way a parameter could,
// and a forgotten one would fail the handshake against a mutual-TLS peer rather than fall back to
// plain text unnoticed. Must not: read flags (tls_config.h does).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "security/tls_config.h"

namespace baton::security {

std::shared_ptr<grpc::ServerCredentials> cluster_server_credentials(const TlsConfig& config);
std::shared_ptr<grpc::ServerCredentials> public_server_credentials(const TlsConfig& config);
std::shared_ptr<grpc::ChannelCredentials> make_cluster_channel_credentials(const TlsConfig& config);

// Sets what cluster_channel_credentials() returns until the returned guard is destroyed (call it
// before any channel to a peer is made, and keep the guard until the process's gRPC work is
// done: installed credentials hold gRPC's library open, so a process that kept them forever
// would never see gRPC shut down).
class [[nodiscard]] InstalledClusterCredentials {
 public:
  InstalledClusterCredentials() = default;
  InstalledClusterCredentials(InstalledClusterCredentials&& other) noexcept : active_(other.active_) {
    other.active_ = false;
  }
  InstalledClusterCredentials& operator=(InstalledClusterCredentials&& other) noexcept;
  ~InstalledClusterCredentials();

 private:
  friend InstalledClusterCredentials install_cluster_credentials(const TlsConfig& config);
  bool active_ = false;
};
InstalledClusterCredentials install_cluster_credentials(const TlsConfig& config);
// The installed cluster channel credentials; plain text when none are installed (in-process
// tests that never install any).
std::shared_ptr<grpc::ChannelCredentials> cluster_channel_credentials();

// A client of the public API: TLS verifying the server against the CA certificates in `ca_file`,
// or plain text when `ca_file` is "". INVALID_ARGUMENT naming `flag` when the file is unusable.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> client_channel_credentials(const std::string& ca_file,
                                                                                    const std::string& flag = "tls-ca");

}  // namespace baton::security
