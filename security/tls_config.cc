#include "security/tls_config.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>

#include "common/status.h"
#include "common/text_file.h"
#include "security/openssl_ptr.h"

namespace baton::security {
namespace {

std::string flag_file(const std::string& flag, const std::string& path) { return str_cat("--", flag, " ", path); }

absl::StatusOr<std::string> read(const std::string& flag, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(str_cat("--", flag, " is empty"));
  auto text = read_text_file(path);
  if (!text.ok()) return absl::InvalidArgumentError(str_cat("--", flag, ": ", text.status().message()));
  return *text;
}

// Every certificate in a PEM text, in order.
absl::StatusOr<std::vector<CertPtr>> parse_certs(const std::string& pem, const std::string& where) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<CertPtr> out;
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(c);
  ERR_clear_error();  // the read that ended the loop
  if (out.empty()) return absl::InvalidArgumentError(str_cat(where, " holds no PEM certificate"));
  return out;
}

absl::Status check_in_date(X509* cert, const std::string& where) {
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    return absl::InvalidArgumentError(str_cat(where, ": the certificate is not valid yet"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    return absl::InvalidArgumentError(str_cat(where, ": the certificate has expired"));
  }
  return absl::OkStatus();
}

// The leaf (first certificate of `chain`) verifies against the CA certificates, through the
// intermediates that follow it in the chain.
absl::Status check_signed_by(const std::vector<CertPtr>& chain, const std::vector<CertPtr>& cas,
                             const std::string& cert_where, const std::string& ca_where) {
  StorePtr store(X509_STORE_new());
  for (const CertPtr& ca : cas) X509_STORE_add_cert(store.get(), ca.get());
  STACK_OF(X509)* intermediates = sk_X509_new_null();
  for (std::size_t i = 1; i < chain.size(); ++i) sk_X509_push(intermediates, chain[i].get());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  const bool ok = X509_STORE_CTX_init(ctx.get(), store.get(), chain.front().get(), intermediates) == 1 &&
                  X509_verify_cert(ctx.get()) == 1;
  const int error = X509_STORE_CTX_get_error(ctx.get());
  sk_X509_free(intermediates);
  ERR_clear_error();
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(str_cat(cert_where, " is not signed by the CA of ", ca_where, " (",
                                            X509_verify_cert_error_string(error),
                                            "): cluster peers would refuse it"));
}

}  // namespace

std::vector<FlagSpec> tls_flag_specs() {
  return {
      {"tls-cert", "FILE", "TLS certificate (PEM, may hold the chain) this process serves with and shows its "
                           "peers; reloaded when the file changes"},
      {"tls-key", "FILE", "the private key of --tls-cert (PEM)"},
      {"tls-ca", "FILE", "the cluster CA (PEM): cluster peers must show a certificate it signed (mutual TLS)"},
      {"tls-reload-s", "N", "how often the TLS files are checked for a change (default 60)"},
      {"insecure", "", "serve and talk plain text where no TLS is configured: anyone who reaches the port can "
                       "call it (the log says so)"},
  };
}

absl::Status check_ca_file(const std::string& path, const std::string& flag) {
  BATON_ASSIGN_OR_RETURN(const std::string pem, read(flag, path));
  return parse_certs(pem, flag_file(flag, path)).status();
}

absl::StatusOr<TlsConfig> tls_config_from_flags(const ParsedFlags& flags, TlsRole role) {
  TlsConfig c;
  c.cert_file = flags.get("tls-cert").value_or("");
  c.key_file = flags.get("tls-key").value_or("");
  c.ca_file = flags.get("tls-ca").value_or("");
  c.insecure = flags.has("insecure");
  BATON_ASSIGN_OR_RETURN(auto reload, flags.get_int("tls-reload-s"));
  if (reload) {
    if (*reload < 1 || *reload > 86400) return absl::InvalidArgumentError("--tls-reload-s must be in [1, 86400]");
    c.reload_interval_s = static_cast<int>(*reload);
  }
  const bool any_tls = flags.has("tls-cert") || flags.has("tls-key") || flags.has("tls-ca");
  if (flags.has("tls-cert") != flags.has("tls-key")) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  if (flags.has("tls-ca") && !flags.has("tls-cert")) {
    return absl::InvalidArgumentError(
        "--tls-ca needs --tls-cert and --tls-key: cluster peers must see this process's own certificate");
  }
  if (role == TlsRole::kNode) {
    if (any_tls && c.insecure) {
      return absl::InvalidArgumentError("--insecure and the --tls-* flags contradict each other: choose one");
    }
    if (!any_tls && !c.insecure) {
      return absl::FailedPreconditionError(
          "no TLS: give --tls-cert, --tls-key and --tls-ca (mutual TLS with the cluster CA), or --insecure to "
          "serve in plain text");
    }
    if (any_tls && !flags.has("tls-ca")) {
      return absl::FailedPreconditionError(
          "--tls-ca is needed with --tls-cert: a node serves only callers whose certificate the cluster CA signed");
    }
  } else if (!any_tls && !c.insecure) {
    return absl::FailedPreconditionError(
        "no TLS: give --tls-cert and --tls-key (and --tls-ca for mutual TLS with the nodes), or --insecure to "
        "serve in plain text");
  } else if (any_tls && !flags.has("tls-ca") && !c.insecure) {
    return absl::FailedPreconditionError(
        "--tls-ca is needed to reach the nodes over mutual TLS; give it, or --insecure to reach them in plain text");
  }
  if (!any_tls) return c;

  BATON_ASSIGN_OR_RETURN(const std::string cert_pem, read("tls-cert", c.cert_file));
  BATON_ASSIGN_OR_RETURN(const std::string key_pem, read("tls-key", c.key_file));
  const std::string cert_where = flag_file("tls-cert", c.cert_file);
  const std::string key_where = flag_file("tls-key", c.key_file);
  BATON_ASSIGN_OR_RETURN(std::vector<CertPtr> chain, parse_certs(cert_pem, cert_where));
  BATON_RETURN_IF_ERROR(check_in_date(chain.front().get(), cert_where));
  BioPtr bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!key) return absl::InvalidArgumentError(str_cat(key_where, " holds no PEM private key (or it is encrypted)"));
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(str_cat(key_where, " is not the key of the certificate in ", cert_where));
  }
  if (!c.ca_file.empty()) {
    BATON_ASSIGN_OR_RETURN(const std::string ca_pem, read("tls-ca", c.ca_file));
    const std::string ca_where = flag_file("tls-ca", c.ca_file);
    BATON_ASSIGN_OR_RETURN(std::vector<CertPtr> cas, parse_certs(ca_pem, ca_where));
    BATON_RETURN_IF_ERROR(check_signed_by(chain, cas, cert_where, ca_where));
  }
  return c;
}

std::string describe(const TlsConfig& c, TlsRole role) {
  const std::string plain =
      "PLAIN TEXT (--insecure): no encryption, and anyone who reaches the port can call it";
  const std::string cluster =
      c.cluster_tls() ? str_cat("mutual TLS (cluster CA ", c.ca_file, ")") : plain;
  if (role == TlsRole::kNode) return cluster;
  const std::string pub = c.public_tls() ? str_cat("TLS (", c.cert_file, ")") : plain;
  return str_cat("public port: ", pub, "; cluster: ", cluster);
}

}  // namespace baton::security
