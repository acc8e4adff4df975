// What a process's flags say about transport security, checked before anything listens:
//   --tls-cert FILE, --tls-key FILE  the identity it serves with and shows its peers (PEM; the
//                                    certificate file may hold the chain);
//   --tls-ca FILE                    the cluster CA: callers and peers inside the cluster must show
//                                    a certificate it signed (mutual TLS);
//   --tls-reload-s N                 how often the three files are checked for a change (a renewed
//                                    certificate is served without a restart);
//   --insecure                       plain text wherever no TLS is configured, said in the log.
// A node (prefill, decode, proposer) serves only cluster members: mutual TLS (all three files) or
// --insecure. The router's public port serves TLS with --tls-cert/--tls-key (clients prove
// themselves with API keys, not certificates); its cluster side is mutual TLS with --tls-ca.
// Clients (baton generate --endpoint, bench serve, verify-lossless) take --tls-ca only, to verify
// the router.
//
// The files are read and checked here (each parses, the key belongs to the certificate, the
// certificate is in date and signed by the CA) so that a mistake is an error naming the flag and
// file at start-up, not a failed handshake later. Must not: create credentials (grpc_credentials.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"

namespace baton::security {

enum class TlsRole {
  kNode,    // every listener is internal: mutual TLS or --insecure
  kRouter,  // a public listener (TLS optional) and a cluster side (mutual TLS optional)
};

struct TlsConfig {
  std::string cert_file;  // "" when not given
  std::string key_file;
  std::string ca_file;
  int reload_interval_s = 60;
  bool insecure = false;

  // The public listener (router) serves TLS.
  bool public_tls() const { return !cert_file.empty(); }
  // Cluster traffic (node listeners, the router's node calls and registry, node to node) is
  // mutual TLS.
  bool cluster_tls() const { return !cert_file.empty() && !ca_file.empty(); }
};

// The flags above, for a program's FlagSpec list.
std::vector<FlagSpec> tls_flag_specs();

// Reads the flags and checks the files. INVALID_ARGUMENT naming the flag and file for anything
// missing, unreadable, malformed, mismatched or expired; FAILED_PRECONDITION when neither TLS nor
// --insecure is given (or, for a node, TLS without --tls-ca).
absl::StatusOr<TlsConfig> tls_config_from_flags(const ParsedFlags& flags, TlsRole role);

// Checks a CA file given to a client (--tls-ca): it exists and holds at least one certificate.
absl::Status check_ca_file(const std::string& path, const std::string& flag);

// One line for the log, e.g. "mutual TLS (cluster CA ca.pem)" or "PLAIN TEXT (--insecure): ...".
std::string describe(const TlsConfig& config, TlsRole role);

}  // namespace baton::security
