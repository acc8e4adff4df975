#include "security/grpc_credentials.h"

#include <mutex>

#include "common/status.h"
#include "common/text_file.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace baton::security {
namespace {

namespace gx = grpc::experimental;

std::shared_ptr<gx::CertificateProviderInterface> provider(const TlsConfig& c) {
  return std::make_shared<gx::FileWatcherCertificateProvider>(c.key_file, c.cert_file, c.ca_file,
                                                              static_cast<unsigned>(c.reload_interval_s));
}

std::mutex installed_mu;
std::shared_ptr<grpc::ChannelCredentials>& installed() {
  static auto* creds = new std::shared_ptr<grpc::ChannelCredentials>();
  return *creds;
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> cluster_server_credentials(const TlsConfig& c) {
  if (!c.cluster_tls()) return grpc::InsecureServerCredentials();
  gx::TlsServerCredentialsOptions options(provider(c));
  options.watch_identity_key_cert_pairs();
  options.watch_root_certs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ServerCredentials> public_server_credentials(const TlsConfig& c) {
  if (!c.public_tls()) return grpc::InsecureServerCredentials();
  TlsConfig identity_only = c;
  identity_only.ca_file.clear();
  gx::TlsServerCredentialsOptions options(provider(identity_only));
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> make_cluster_channel_credentials(const TlsConfig& c) {
  if (!c.cluster_tls()) return grpc::InsecureChannelCredentials();
  gx::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider(c));
  options.watch_identity_key_cert_pairs();
  options.watch_root_certs();
  options.set_verify_server_certs(true);  // the chain to the cluster CA
  options.set_certificate_verifier(std::make_shared<gx::NoOpCertificateVerifier>());
  options.set_check_call_host(false);
  return grpc::experimental::TlsCredentials(options);
}

InstalledClusterCredentials install_cluster_credentials(const TlsConfig& config) {
  auto creds = make_cluster_channel_credentials(config);
  std::lock_guard lock(installed_mu);
  installed() = std::move(creds);
  InstalledClusterCredentials guard;
  guard.active_ = true;
  return guard;
}

InstalledClusterCredentials& InstalledClusterCredentials::operator=(InstalledClusterCredentials&& other) noexcept {
  if (this != &other) {
    this->~InstalledClusterCredentials();
    active_ = other.active_;
    other.active_ = false;
  }
  return *this;
}

InstalledClusterCredentials::~InstalledClusterCredentials() {
  if (!active_) return;
  std::lock_guard lock(installed_mu);
  installed().reset();
}

std::shared_ptr<grpc::ChannelCredentials> cluster_channel_credentials() {
  std::lock_guard lock(installed_mu);
  if (!installed()) return grpc::InsecureChannelCredentials();
  return installed();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> client_channel_credentials(const std::string& ca_file,
                                                                                    const std::string& flag) {
  if (ca_file.empty()) return grpc::InsecureChannelCredentials();
  BATON_RETURN_IF_ERROR(check_ca_file(ca_file, flag));
  BATON_ASSIGN_OR_RETURN(std::string pem, read_text_file(ca_file));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = std::move(pem);
  return grpc::SslCredentials(ssl);
}

}  // namespace baton::security
