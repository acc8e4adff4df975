// Mutual TLS and TLS on real gRPC servers and channels in this process, with certificates from a
// cluster CA and from a stranger's: who gets through and who is refused, that cluster channels
// check the chain and not the address dialled, that public clients check the host name too, and
// that renewed certificate files are served without a restart.
#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "node_common/grpc_server.h"
#include "security/grpc_credentials.h"
#include "tests/security/security_test_support.h"

namespace baton::testing {
namespace {

grpc::Status check(const std::string& target, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return health_check(target, std::move(credentials));
}

struct Server {
  GrpcServer server;
  std::string target;
  ~Server() {
    if (server.server) server.server->Shutdown(std::chrono::system_clock::now());
  }
};

std::unique_ptr<Server> serve(std::shared_ptr<grpc::ServerCredentials> credentials) {
  auto s = start_grpc_server("127.0.0.1", 0, {}, std::move(credentials));
  EXPECT_TRUE(s.ok()) << s.status();
  auto out = std::make_unique<Server>();
  out->server = std::move(*s);
  out->target = out->server.address;
  return out;
}

class TlsGrpc : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.issue("node");
    cluster_.issue("router");
    stranger_.issue("rogue");
  }
  const std::filesystem::path dir_ = scratch_path("security-tls-grpc");
  TestCa cluster_{dir_ / "cluster", "cluster CA"};
  TestCa stranger_{dir_ / "stranger", "stranger CA"};
};

TEST_F(TlsGrpc, MutualTlsServesClusterMembersOnly) {
  auto server = serve(security::cluster_server_credentials(cluster_.config("node")));
  // A member: its certificate chains to the cluster CA.
  const grpc::Status member = check(server->target, security::make_cluster_channel_credentials(cluster_.config("router")));
  EXPECT_TRUE(member.ok()) << member.error_message();

  // A rogue with a certificate of another CA, trusting the cluster's CA (so it gets as far as
  // showing its certificate).
  security::TlsConfig rogue = stranger_.config("rogue");
  rogue.ca_file = cluster_.ca_file();
  EXPECT_EQ(check(server->target, security::make_cluster_channel_credentials(rogue)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A rogue that trusts only its own CA refuses the node as well.
  EXPECT_EQ(check(server->target, security::make_cluster_channel_credentials(stranger_.config("rogue"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // TLS without a client certificate, and plain text, are refused.
  auto no_cert = security::client_channel_credentials(cluster_.ca_file());
  ASSERT_TRUE(no_cert.ok());
  EXPECT_EQ(check(server->target, *no_cert).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(check(server->target, grpc::InsecureChannelCredentials()).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The server served on: the member still gets in.
  EXPECT_TRUE(check(server->target, security::make_cluster_channel_credentials(cluster_.config("router"))).ok());
}

TEST_F(TlsGrpc, ClusterChannelsCheckTheChainNotTheAddressDialled) {
  // Pods are dialled by IP, which no certificate names: a member's certificate for another name is
  // accepted...
  cluster_.issue("elsewhere", {"node-7.baton.example"});
  auto member = serve(security::cluster_server_credentials(cluster_.config("elsewhere")));
  const grpc::Status ok = check(member->target, security::make_cluster_channel_credentials(cluster_.config("router")));
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  // ...but a server whose certificate another CA signed is not, whatever it names.
  security::TlsConfig impostor = stranger_.config("rogue");
  impostor.ca_file = cluster_.ca_file();  // it would accept our certificate: the refusal is ours
  auto rogue = serve(grpc::experimental::TlsServerCredentials([&] {
    auto provider = std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
        std::vector<grpc::experimental::IdentityKeyCertPair>{
            {read_file(stranger_.key_file("rogue")), read_file(stranger_.cert_file("rogue"))}});
    grpc::experimental::TlsServerCredentialsOptions o(provider);
    o.watch_identity_key_cert_pairs();
    return o;
  }()));
  EXPECT_EQ(check(rogue->target, security::make_cluster_channel_credentials(cluster_.config("router"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsGrpc, PublicTlsTakesAnyClientAndIsCheckedByHostName) {
  cluster_.issue("public", {"127.0.0.1", "localhost"});
  auto server = serve(security::public_server_credentials(cluster_.config("public")));
  auto client = security::client_channel_credentials(cluster_.ca_file());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(check(server->target, *client).ok());  // no client certificate needed
  const std::string port = server->target.substr(server->target.rfind(':') + 1);
  EXPECT_TRUE(check("localhost:" + port, *client).ok());
  EXPECT_EQ(check(server->target, grpc::InsecureChannelCredentials()).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A certificate that does not name the address the client dialled is refused by a public client.
  cluster_.issue("misnamed", {"router.example"});
  auto misnamed = serve(security::public_server_credentials(cluster_.config("misnamed")));
  EXPECT_EQ(check(misnamed->target, *client).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A CA file that is not one is an error naming it, not a silent plain-text channel.
  const auto bad = security::client_channel_credentials(cluster_.key_file("public"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr(cluster_.key_file("public")));
}

TEST_F(TlsGrpc, RenewedCertificateFilesAreServedWithoutARestart) {
  TestCa next(dir_ / "next", "next CA");
  cluster_.issue("rotating");
  security::TlsConfig config = cluster_.config("rotating");
  config.reload_interval_s = 1;
  auto server = serve(security::public_server_credentials(config));
  auto old_client = security::client_channel_credentials(cluster_.ca_file());
  auto new_client = security::client_channel_credentials(next.ca_file());
  ASSERT_TRUE(old_client.ok() && new_client.ok());
  ASSERT_TRUE(check(server->target, *old_client).ok());
  EXPECT_FALSE(check(server->target, *new_client).ok());

  // Renew: the new pair replaces the files in place (rename, as cert-manager and kubelet do).
  next.issue("renewed");
  std::filesystem::rename(next.key_file("renewed"), config.key_file);
  std::filesystem::rename(next.cert_file("renewed"), config.cert_file);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool renewed = false;
  while (!renewed && std::chrono::steady_clock::now() < deadline) {
    renewed = check(server->target, *new_client).ok();  // each check is a new connection
  }
  EXPECT_TRUE(renewed) << "the server kept its old certificate for 30 s";
  EXPECT_FALSE(check(server->target, *old_client).ok());
}

}  // namespace
}  // namespace baton::testing
