// What the security tests share: a cluster CA (and a stranger's) with certificates written to a
// scratch folder, in the layout the --tls-* flags take.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "security/cert_authority.h"
#include "security/tls_config.h"
#include "tests/support/scratch.h"

namespace baton::testing {

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// One grpc.health.v1 Check (every server of ours serves it) on a new connection, failing fast: no
// wait for ready, and a subchannel of its own (no backoff inherited from an earlier failure).
inline grpc::Status health_check(const std::string& target, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(target, std::move(credentials), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response);
}

// A CA whose certificates are written as DIR/NAME.pem and DIR/NAME-key.pem, its own as DIR/ca.pem.
class TestCa {
 public:
  TestCa(const std::filesystem::path& dir, const std::string& name) : dir_(dir) {
    std::filesystem::create_directories(dir_);
    auto ca = security::CertAuthority::create(name);
    EXPECT_TRUE(ca.ok()) << ca.status();
    ca_ = std::make_unique<security::CertAuthority>(std::move(*ca));
    write_text(ca_file(), ca_->cert_pem());
  }

  std::string ca_file() const { return (dir_ / "ca.pem").string(); }
  std::string cert_file(const std::string& name) const { return (dir_ / (name + ".pem")).string(); }
  std::string key_file(const std::string& name) const { return (dir_ / (name + "-key.pem")).string(); }
  const security::CertAuthority& ca() const { return *ca_; }

  // Issues NAME (for 127.0.0.1 and localhost unless `names` says otherwise) and writes it.
  void issue(const std::string& name, std::vector<std::string> names = {"127.0.0.1", "localhost"},
             std::chrono::hours validity = std::chrono::hours(24)) const {
    auto pair = ca_->issue(name, names, validity);
    ASSERT_TRUE(pair.ok()) << pair.status();
    write_text(cert_file(name), pair->cert);
    write_text(key_file(name), pair->key);
  }

  // The TlsConfig a process named NAME of this CA runs with (mutual TLS).
  security::TlsConfig config(const std::string& name) const {
    security::TlsConfig c;
    c.cert_file = cert_file(name);
    c.key_file = key_file(name);
    c.ca_file = ca_file();
    return c;
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<security::CertAuthority> ca_;
};

}  // namespace baton::testing
