#include "cli/probe.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/status.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "security/grpc_credentials.h"
#include "security/tls_config.h"

namespace baton::cli {
namespace {

const std::vector<FlagSpec>& probe_flags() {
  static const std::vector<FlagSpec> flags = {
      {"address", "HOST:PORT", "the process to probe (required)"},
      {"tls-cert", "FILE", "this side's certificate (mutual TLS; with --tls-key and --tls-ca)"},
      {"tls-key", "FILE", "its private key"},
      {"tls-ca", "FILE", "the cluster CA the process's certificate must chain to"},
      {"timeout-ms", "MS", "deadline of the check (default 3000)"},
      {"help", "", "show this help"},
  };
  return flags;
}

constexpr const char* kSynopsis =
    "--address HOST:PORT [--tls-cert FILE --tls-key FILE --tls-ca FILE] [--timeout-ms MS]\n\n"
    "Asks a Baton process's grpc.health.v1 service whether it serves; exit 0 when SERVING.";

}  // namespace

int probe_main(int argc, char** argv) {
  auto f = parse_flags(probe_flags(), argc, argv);
  if (!f.ok() || f->has("help") || !f->has("address")) {
    if (!f.ok()) std::fprintf(stderr, "baton probe: %s\n\n", std::string(f.status().message()).c_str());
    std::printf("%s", usage("baton probe", kSynopsis, probe_flags()).c_str());
    return f.ok() && f->has("help") ? 0 : 2;
  }
  security::TlsConfig tls;
  tls.cert_file = f->get("tls-cert").value_or("");
  tls.key_file = f->get("tls-key").value_or("");
  tls.ca_file = f->get("tls-ca").value_or("");
  if (!tls.cert_file.empty() && (tls.key_file.empty() || tls.ca_file.empty())) {
    std::fprintf(stderr, "baton probe: --tls-cert needs --tls-key and --tls-ca\n");
    return 2;
  }
  auto timeout = f->get_int("timeout-ms");
  if (!timeout.ok()) {
    std::fprintf(stderr, "baton probe: %s\n", std::string(timeout.status().message()).c_str());
    return 2;
  }
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(*f->get("address"), security::make_cluster_channel_credentials(tls)));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout->value_or(3000)));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response);
  if (!s.ok()) {
    std::fprintf(stderr, "baton probe: %s: %s\n", f->get("address")->c_str(), s.error_message().c_str());
    return 1;
  }
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    std::fprintf(stderr, "baton probe: %s: %s\n", f->get("address")->c_str(),
                 grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace baton::cli
