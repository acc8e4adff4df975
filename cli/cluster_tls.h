// The certificates of a local cluster started with `baton up --tls`: a throwaway CA
// (security/cert_authority.h) and one certificate per process, written under DIR as ca.pem,
// NAME.pem and NAME-key.pem (keys readable by the owner only). The CA's own key is never written:
// once the cluster is up nobody can issue another certificate it would trust.
// Must not: start processes (cluster.h does).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::cli {

struct ClusterTlsFiles {
  std::string dir;
  std::string ca_file;  // DIR/ca.pem: what clients pass as --tls-ca
  // The --tls-cert, --tls-key and --tls-ca flags for the process called `name`.
  std::vector<std::string> flags_for(const std::string& name) const;
};

// Makes the CA and a certificate for each of `names`, valid for `hosts` (the listen address, plus
// 127.0.0.1, ::1 and localhost) for 30 days.
absl::StatusOr<ClusterTlsFiles> make_cluster_tls(const std::string& dir, const std::vector<std::string>& names,
                                                 const std::string& host);

}  // namespace baton::cli
