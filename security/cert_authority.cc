#include "security/cert_authority.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/status.h"
#include "security/openssl_ptr.h"

namespace baton::security {
namespace {

// The newest OpenSSL error as text, for messages ("" when the queue is empty).
std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

absl::Status fail(const std::string& what) {
  return absl::InternalError(str_cat("making a certificate: ", what, " failed: ", openssl_error()));
}

absl::StatusOr<KeyPtr> new_key() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return fail("generating a P-256 key");
  return key;
}

bool is_ip_literal(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

absl::Status add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return fail(str_cat("the extension ", OBJ_nid2sn(nid), " = ", value));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? absl::OkStatus() : fail(str_cat("adding ", OBJ_nid2sn(nid)));
}

// A certificate for `key`, named `common_name`, valid from an hour ago for `validity` (when
// negative: it expired that long ago), not yet signed. issuer == nullptr: self-issued.
absl::StatusOr<CertPtr> new_cert(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                                 std::chrono::hours validity) {
  CertPtr cert(X509_new());
  if (!cert) return fail("X509_new");
  if (X509_set_version(cert.get(), 2) != 1) return fail("setting the version");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return fail("drawing a serial number");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  const bool serial_ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) != nullptr;
  BN_free(bn);
  if (!serial_ok) return fail("setting the serial number");
  const long seconds = static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(validity).count());
  const long start = seconds < 0 ? seconds - 3600 : -3600;
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), start) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), seconds < 0 ? -60 : seconds) == nullptr) {
    return fail("setting the validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                                 -1, -1, 0) != 1) {
    return fail("setting the subject name");
  }
  if (X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name) != 1) {
    return fail("setting the issuer name");
  }
  if (X509_set_pubkey(cert.get(), key) != 1) return fail("setting the public key");
  return cert;
}

absl::StatusOr<std::string> to_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return fail("writing a certificate as PEM");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

absl::StatusOr<std::string> to_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return fail("writing a private key as PEM");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

}  // namespace

struct CertAuthority::Keys {
  KeyPtr key;
  CertPtr cert;
};

CertAuthority::CertAuthority() : keys_(std::make_unique<Keys>()) {}
CertAuthority::CertAuthority(CertAuthority&&) noexcept = default;
CertAuthority& CertAuthority::operator=(CertAuthority&&) noexcept = default;
CertAuthority::~CertAuthority() = default;

absl::StatusOr<CertAuthority> CertAuthority::create(const std::string& common_name, std::chrono::hours validity) {
  CertAuthority ca;
  BATON_ASSIGN_OR_RETURN(ca.keys_->key, new_key());
  BATON_ASSIGN_OR_RETURN(ca.keys_->cert, new_cert(ca.keys_->key.get(), common_name, nullptr, validity));
  X509* cert = ca.keys_->cert.get();
  BATON_RETURN_IF_ERROR(add_extension(cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  BATON_RETURN_IF_ERROR(add_extension(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign"));
  BATON_RETURN_IF_ERROR(add_extension(cert, cert, NID_subject_key_identifier, "hash"));
  if (X509_sign(cert, ca.keys_->key.get(), EVP_sha256()) == 0) return fail("signing the CA certificate");
  BATON_ASSIGN_OR_RETURN(ca.cert_pem_, to_pem(cert));
  return ca;
}

absl::StatusOr<PemPair> CertAuthority::issue(const std::string& common_name, const std::vector<std::string>& names,
                                             std::chrono::hours validity) const {
  BATON_ASSIGN_OR_RETURN(KeyPtr key, new_key());
  X509* issuer = keys_->cert.get();
  BATON_ASSIGN_OR_RETURN(CertPtr cert, new_cert(key.get(), common_name, issuer, validity));
  BATON_RETURN_IF_ERROR(add_extension(cert.get(), issuer, NID_basic_constraints, "critical,CA:FALSE"));
  BATON_RETURN_IF_ERROR(add_extension(cert.get(), issuer, NID_key_usage, "critical,digitalSignature"));
  BATON_RETURN_IF_ERROR(add_extension(cert.get(), issuer, NID_ext_key_usage, "serverAuth,clientAuth"));
  BATON_RETURN_IF_ERROR(add_extension(cert.get(), issuer, NID_authority_key_identifier, "keyid"));
  if (!names.empty()) {
    std::string san;
    for (const std::string& n : names) {
      if (n.empty() || n.find_first_of(",\n") != std::string::npos) {
        return absl::InvalidArgumentError(str_cat("certificate name '", n, "' is empty or has a comma or newline"));
      }
      san += str_cat(san.empty() ? "" : ",", is_ip_literal(n) ? "IP:" : "DNS:", n);
    }
    BATON_RETURN_IF_ERROR(add_extension(cert.get(), issuer, NID_subject_alt_name, san));
  }
  if (X509_sign(cert.get(), keys_->key.get(), EVP_sha256()) == 0) return fail("signing a certificate");
  PemPair out;
  BATON_ASSIGN_OR_RETURN(out.cert, to_pem(cert.get()));
  BATON_ASSIGN_OR_RETURN(out.key, to_pem(key.get()));
  return out;
}

}  // namespace baton::security
