// TLS for the HTTP listeners (the router's OpenAI API, /metrics) through OpenSSL directly, with
// the same files and reload behaviour as gRPC's side (grpc_credentials.h): configure() loads
// --tls-cert and --tls-key into an SSL_CTX (TLS 1.2 or newer) and installs a certificate callback
// that, at most once per --tls-reload-s, looks at the files' modification times and, when they
// changed and the new pair loads and matches, serves the new certificate from the next handshake
// on (a pair that fails to load is logged and the old one kept). With `require_client_cert`, the
// peer must show a certificate that chains to --tls-ca.
// Must not: accept connections or know HTTP (the server library does both).
#pragma once

#include <openssl/ssl.h>

#include "absl/status/status.h"
#include "security/tls_config.h"

namespace baton::security {

// `ctx` is owned by the caller (e.g. cpp-httplib's SSLServer) and must outlive every handshake;
// the reload state lives as long as `ctx` (freed with it through ex_data).
absl::Status configure_server_context(SSL_CTX& ctx, const TlsConfig& config, bool require_client_cert);

}  // namespace baton::security
