// HTTPS on our HTTP listeners (security/tls_server_context.h), through a real MetricsServer in this
// process and cpp-httplib clients: TLS with the process's certificate, client certificates of the
// cluster CA when required, an Authorization check in front of the scrape, and renewed files
// served without a restart.
#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "metrics/metrics_server.h"
#include "tests/security/security_test_support.h"

namespace baton::testing {
namespace {

class TlsHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.issue("node");
    cluster_.issue("prometheus");
    stranger_.issue("rogue");
  }

  std::unique_ptr<metrics::MetricsServer> start(metrics::MetricsServerOptions options) {
    auto m = metrics::MetricsServer::start("127.0.0.1", 0, std::move(options));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }

  static int port_of(const metrics::MetricsServer& m) {
    return std::stoi(m.address().substr(m.address().rfind(':') + 1));
  }

  // GET /metrics over HTTPS, verifying the server with `ca`; -1 when the connection failed.
  static int get(int port, const std::string& ca, const std::string& cert = "", const std::string& key = "",
                 const httplib::Headers& headers = {}) {
    httplib::SSLClient client("127.0.0.1", port, cert, key);
    client.set_ca_cert_path(ca.c_str());
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(5);
    auto res = client.Get("/metrics", headers);
    return res ? res->status : -1;
  }

  const std::filesystem::path dir_ = scratch_path("security-tls-http");
  TestCa cluster_{dir_ / "cluster", "cluster CA"};
  TestCa stranger_{dir_ / "stranger", "stranger CA"};
};

TEST_F(TlsHttp, ServesHttpsAndNotPlainText) {
  metrics::MetricsServerOptions o;
  o.tls = cluster_.config("node");
  auto m = start(o);
  ASSERT_TRUE(m);
  EXPECT_THAT(m->url(), ::testing::StartsWith("https://"));
  EXPECT_EQ(get(port_of(*m), cluster_.ca_file()), 200);
  EXPECT_EQ(get(port_of(*m), stranger_.ca_file()), -1);  // the client does not trust it
  httplib::Client plain("127.0.0.1", port_of(*m));
  plain.set_connection_timeout(5);
  plain.set_read_timeout(5);
  auto res = plain.Get("/metrics");
  EXPECT_TRUE(!res || res->status != 200);
}

TEST_F(TlsHttp, ClientCertificatesOfTheClusterCaOnlyWhenRequired) {
  metrics::MetricsServerOptions o;
  o.tls = cluster_.config("node");
  o.require_client_cert = true;
  auto m = start(o);
  ASSERT_TRUE(m);
  const int port = port_of(*m);
  EXPECT_EQ(get(port, cluster_.ca_file(), cluster_.cert_file("prometheus"), cluster_.key_file("prometheus")), 200);
  EXPECT_EQ(get(port, cluster_.ca_file()), -1);
  EXPECT_EQ(get(port, cluster_.ca_file(), stranger_.cert_file("rogue"), stranger_.key_file("rogue")), -1);
  // Still serving members after the refusals.
  EXPECT_EQ(get(port, cluster_.ca_file(), cluster_.cert_file("prometheus"), cluster_.key_file("prometheus")), 200);
}

TEST_F(TlsHttp, AnAuthorizationCheckGuardsTheScrape) {
  metrics::MetricsServerOptions o;
  o.tls = cluster_.config("node");
  o.authorize = [](const std::string& authorization) { return authorization == "Bearer scrape-key"; };
  auto m = start(o);
  ASSERT_TRUE(m);
  EXPECT_EQ(get(port_of(*m), cluster_.ca_file()), 401);
  EXPECT_EQ(get(port_of(*m), cluster_.ca_file(), "", "", {{"Authorization", "Bearer wrong"}}), 401);
  EXPECT_EQ(get(port_of(*m), cluster_.ca_file(), "", "", {{"Authorization", "Bearer scrape-key"}}), 200);
}

TEST_F(TlsHttp, RenewedCertificateFilesAreServedWithoutARestart) {
  TestCa next(dir_ / "next", "next CA");
  cluster_.issue("rotating");
  metrics::MetricsServerOptions o;
  o.tls = cluster_.config("rotating");
  o.tls.reload_interval_s = 1;
  auto m = start(o);
  ASSERT_TRUE(m);
  const int port = port_of(*m);
  ASSERT_EQ(get(port, cluster_.ca_file()), 200);
  next.issue("renewed");
  // The renewed files carry the old ones' mtime, as two writes within one tick of a file system's
  // coarse clock do (and a rename keeps it): the listener must notice the new contents anyway.
  std::filesystem::last_write_time(next.key_file("renewed"), std::filesystem::last_write_time(o.tls.key_file));
  std::filesystem::last_write_time(next.cert_file("renewed"), std::filesystem::last_write_time(o.tls.cert_file));
  std::filesystem::rename(next.key_file("renewed"), o.tls.key_file);
  std::filesystem::rename(next.cert_file("renewed"), o.tls.cert_file);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool renewed = false;
  while (!renewed && std::chrono::steady_clock::now() < deadline) renewed = get(port, next.ca_file()) == 200;
  EXPECT_TRUE(renewed) << "the listener kept its old certificate for 30 s";
  EXPECT_EQ(get(port, cluster_.ca_file()), -1);
}

}  // namespace
}  // namespace baton::testing
