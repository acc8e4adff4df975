// A throwaway certificate authority, made in memory with OpenSSL's C API: `baton up --tls` makes
// one per local cluster (the CA certificate goes to ca.pem, its key never leaves the process) and
// issues each process a certificate for serving and for proving cluster membership; tests make
// one to act as a cluster CA and another as a stranger's.
//
// Keys are ECDSA P-256; certificates carry subjectAltNames for the addresses they serve on and
// both serverAuth and clientAuth usages (a node is a server to its callers and a client of its
// peers). Must not: write files (callers decide where PEMs go) or serve as a production CA.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::security {

struct PemPair {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key (PKCS#8)
};

class CertAuthority {
 public:
  // A self-signed CA named `common_name`, valid from an hour ago for `validity`.
  static absl::StatusOr<CertAuthority> create(const std::string& common_name,
                                              std::chrono::hours validity = std::chrono::hours(24 * 30));
  CertAuthority(CertAuthority&&) noexcept;
  CertAuthority& operator=(CertAuthority&&) noexcept;
  ~CertAuthority();

  const std::string& cert_pem() const { return cert_pem_; }

  // A leaf certificate signed by this CA. `names` become subjectAltNames: an IPv4 or IPv6 literal
  // becomes an IP entry, anything else a DNS entry. `validity` may be negative to make an expired
  // certificate (tests).
  absl::StatusOr<PemPair> issue(const std::string& common_name, const std::vector<std::string>& names,
                                std::chrono::hours validity = std::chrono::hours(24 * 30)) const;

 private:
  struct Keys;
  CertAuthority();
  std::unique_ptr<Keys> keys_;
  std::string cert_pem_;
};

}  // namespace baton::security
