#include "security/tls_server_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton::security {
namespace {

struct Identity {
  X509* leaf = nullptr;
  STACK_OF(X509)* chain = nullptr;  // intermediates after the leaf
  EVP_PKEY* key = nullptr;
  ~Identity() {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  }
};

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

absl::StatusOr<std::shared_ptr<Identity>> load_identity(const TlsConfig& c) {
  auto id = std::make_shared<Identity>();
  std::unique_ptr<BIO, decltype(&BIO_free)> certs(BIO_new_file(c.cert_file.c_str(), "r"), BIO_free);
  if (!certs) return absl::InvalidArgumentError(str_cat("--tls-cert ", c.cert_file, ": cannot read it"));
  id->leaf = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr);
  if (id->leaf == nullptr) return absl::InvalidArgumentError(str_cat("--tls-cert ", c.cert_file, ": no PEM certificate"));
  id->chain = sk_X509_new_null();
  while (X509* extra = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr)) sk_X509_push(id->chain, extra);
  ERR_clear_error();
  std::unique_ptr<BIO, decltype(&BIO_free)> key(BIO_new_file(c.key_file.c_str(), "r"), BIO_free);
  if (!key) return absl::InvalidArgumentError(str_cat("--tls-key ", c.key_file, ": cannot read it"));
  id->key = PEM_read_bio_PrivateKey(key.get(), nullptr, nullptr, nullptr);
  if (id->key == nullptr) return absl::InvalidArgumentError(str_cat("--tls-key ", c.key_file, ": no PEM private key"));
  if (X509_check_private_key(id->leaf, id->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(str_cat("--tls-key ", c.key_file, " is not the key of --tls-cert ", c.cert_file));
  }
  return id;
}

// What a file holds now ("" when it cannot be read). Compared by content, not by mtime: a rename
// keeps the source's mtime, and a file system's coarse clock gives two writes a few milliseconds
// apart the same one. The files are small and read once per reload interval.
std::string contents_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// What the certificate callback serves, and when it last looked at the files.
class Reloader {
 public:
  Reloader(TlsConfig config, std::shared_ptr<Identity> identity)
      : config_(std::move(config)), identity_(std::move(identity)), stamps_(stamps()) {}

  std::shared_ptr<Identity> current() {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - checked_ >= std::chrono::seconds(config_.reload_interval_s)) {
      checked_ = now;
      const auto seen = stamps();
      if (seen != stamps_) {
        auto fresh = load_identity(config_);
        if (fresh.ok()) {
          identity_ = std::move(*fresh);
          stamps_ = seen;
          spdlog::info("TLS: reloaded {} and {}", config_.cert_file, config_.key_file);
        } else {
          spdlog::warn("TLS: keeping the old certificate: {}", std::string(fresh.status().message()));
        }
      }
    }
    return identity_;
  }

 private:
  std::pair<std::string, std::string> stamps() const {
    return {contents_of(config_.cert_file), contents_of(config_.key_file)};
  }

  const TlsConfig config_;
  std::mutex mu_;
  std::shared_ptr<Identity> identity_;
  std::pair<std::string, std::string> stamps_;  // the files' contents when last loaded
  std::chrono::steady_clock::time_point checked_ = std::chrono::steady_clock::now();
};

int reloader_index() {
  static const int index = SSL_CTX_get_ex_new_index(
      0, nullptr, nullptr, nullptr, [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
        delete static_cast<Reloader*>(ptr);
      });
  return index;
}

int serve_certificate(SSL* ssl, void* arg) {
  std::shared_ptr<Identity> id = static_cast<Reloader*>(arg)->current();
  // override = 1: replaces what the SSL took over from its SSL_CTX.
  return SSL_use_cert_and_key(ssl, id->leaf, id->key, id->chain, 1) == 1 ? 1 : 0;
}

}  // namespace

absl::Status configure_server_context(SSL_CTX& ctx, const TlsConfig& config, bool require_client_cert) {
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<Identity> id, load_identity(config));
  if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_use_cert_and_key(&ctx, id->leaf, id->key, id->chain, 1) != 1) {
    return absl::InternalError(str_cat("TLS: cannot use ", config.cert_file, ": ", openssl_error()));
  }
  if (require_client_cert) {
    if (config.ca_file.empty()) return absl::InvalidArgumentError("TLS: client certificates need --tls-ca");
    if (SSL_CTX_load_verify_locations(&ctx, config.ca_file.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(str_cat("--tls-ca ", config.ca_file, ": ", openssl_error()));
    }
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  auto* reloader = new Reloader(config, std::move(id));
  SSL_CTX_set_ex_data(&ctx, reloader_index(), reloader);  // freed with ctx
  SSL_CTX_set_cert_cb(&ctx, serve_certificate, reloader);
  return absl::OkStatus();
}

}  // namespace baton::security
