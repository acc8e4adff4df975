#include "cli/cluster_tls.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/status.h"
#include "security/cert_authority.h"

namespace baton::cli {
namespace {

absl::Status write_file(const std::filesystem::path& path, const std::string& text, mode_t mode) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(str_cat("cannot write ", path.string()));
  out << text;
  out.close();
  if (!out || ::chmod(path.c_str(), mode) != 0) return absl::UnavailableError(str_cat("cannot write ", path.string()));
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> ClusterTlsFiles::flags_for(const std::string& name) const {
  const std::filesystem::path d(dir);
  return {"--tls-cert", (d / (name + ".pem")).string(), "--tls-key", (d / (name + "-key.pem")).string(), "--tls-ca",
          ca_file};
}

absl::StatusOr<ClusterTlsFiles> make_cluster_tls(const std::string& dir, const std::vector<std::string>& names,
                                                 const std::string& host) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(str_cat("cannot create ", dir, ": ", ec.message()));
  BATON_ASSIGN_OR_RETURN(security::CertAuthority ca, security::CertAuthority::create("baton up cluster CA"));
  std::vector<std::string> hosts = {"127.0.0.1", "::1", "localhost"};
  if (std::find(hosts.begin(), hosts.end(), host) == hosts.end() && host != "0.0.0.0" && host != "::") {
    hosts.push_back(host);
  }
  ClusterTlsFiles files;
  files.dir = dir;
  files.ca_file = (std::filesystem::path(dir) / "ca.pem").string();
  BATON_RETURN_IF_ERROR(write_file(files.ca_file, ca.cert_pem(), 0644));
  for (const std::string& name : names) {
    BATON_ASSIGN_OR_RETURN(security::PemPair pair, ca.issue(str_cat("baton ", name), hosts));
    BATON_RETURN_IF_ERROR(write_file(std::filesystem::path(dir) / (name + ".pem"), pair.cert, 0644));
    BATON_RETURN_IF_ERROR(write_file(std::filesystem::path(dir) / (name + "-key.pem"), pair.key, 0600));
  }
  return files;
}

}  // namespace baton::cli
