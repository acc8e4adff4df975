// baton::Client: the C++ client of Baton's public gRPC API (service baton.v1.Baton, served by
// baton-router and `baton up`). One client holds one channel to one router and may be shared by
// any number of threads; every call has a deadline (CallOptions::timeout, else the client's
// default).
//
//   baton::Client client("127.0.0.1:50051");
//   baton::GenerateRequest req;
//   req.prompt = std::string("def fibonacci(n):");
//   req.sampling.max_tokens = 64;
//   req.sampling.temperature = 0;
//   auto result = client.generate(req);               // or client.stream(req, on_delta)
//   if (!result.ok()) std::cerr << result.status().to_string() << "\n";
//   else std::cout << result->text << "\n";
//
// Errors come back as baton::Status (gRPC's code and message), never as exceptions. Standard C++
// only in these headers. Must not: retry (the router already retried what may be retried).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "baton/export.h"
#include "baton/status.h"
#include "baton/types.h"

namespace baton {

struct BATON_CLIENT_API TlsOptions {
  std::string root_certs_pem;    // "": the system's roots
  std::string private_key_pem;   // client certificate (mutual TLS); "" for none
  std::string cert_chain_pem;

  // Verifies the router against the CA certificates in a PEM file (e.g. the ca.pem that
  // `baton up --tls` prints). An error status names the file when it cannot be read.
  static Result<TlsOptions> from_ca_file(const std::string& path);
};

struct ClientOptions {
  // The deadline of a call that does not set its own.
  std::chrono::milliseconds default_timeout{std::chrono::minutes(10)};
  // Unset: an insecure (plain-text) channel, as `baton up` serves without --tls.
  std::optional<TlsOptions> tls;
  // Sent with every call as `authorization: Bearer KEY` when the router takes API keys. Unset:
  // the environment's BATON_API_KEY, if any.
  std::optional<std::string> api_key;
};

struct CallOptions {
  std::optional<std::chrono::milliseconds> timeout;  // unset: ClientOptions::default_timeout
};

// A streamed completion, read one delta at a time:
//   auto s = client.open_stream(req);
//   while (auto d = s.next()) std::cout << d->text;
//   if (!s.status().ok()) ...
// Not thread-safe, except cancel(), which may be called from any thread.
class BATON_CLIENT_API Stream {
 public:
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  ~Stream();  // cancels the call if it is still running

  // The next delta; nullopt once the stream has ended (see status()).
  std::optional<Delta> next();
  // The call's status once next() has returned nullopt (OK before that).
  const Status& status() const;
  // Ends the call (the router aborts the request); next() then returns nullopt and status() is
  // CANCELLED.
  void cancel();

  struct Impl;

 private:
  friend class Client;
  explicit Stream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class BATON_CLIENT_API Client {
 public:
  // `target` is "host:port" (or any gRPC target, e.g. "dns:///router:50051"). The channel
  // connects lazily: an unreachable router shows as UNAVAILABLE on the first call.
  explicit Client(const std::string& target, ClientOptions options = {});
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  // The whole completion. A completion the server ended with an error is a result with
  // finish_reason kError and `error` set; a failed call (bad request, no nodes, deadline) is a
  // Status.
  Result<GenerateResult> generate(const GenerateRequest& request, const CallOptions& call = {}) const;
  // As generate(), calling on_delta with each message as it arrives (on this thread).
  Result<GenerateResult> stream(const GenerateRequest& request, const std::function<void(const Delta&)>& on_delta,
                                const CallOptions& call = {}) const;
  // Starts a completion and returns it to be read delta by delta.
  Stream open_stream(const GenerateRequest& request, const CallOptions& call = {}) const;
  // Stops a running request by id (every Delta carries it). false: no running request has it.
  Result<bool> abort(const std::string& request_id, const CallOptions& call = {}) const;
  Result<ModelInfo> model_info(const CallOptions& call = {}) const;
  Result<TokenizeResult> tokenize(const TokenizeRequest& request, const CallOptions& call = {}) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
