#include "router/http/http_server.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>

#include "absl/strings/ascii.h"
#include "common/http_listener.h"
#include "common/logging.h"
#include "common/status.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "router/http/api_error.h"
#include "router/http/connection_watch.h"
#include "router/http/dashboard.h"
#include "router/http/openai_request.h"
#include "router/http/openai_response.h"
#include "router/router_service.h"
#include "security/tls_server_context.h"
#include "spdlog/spdlog.h"

namespace baton::router::http {
namespace {

using nlohmann::json;

constexpr const char* kJson = "application/json";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body().dump(), kJson);
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

absl::Status from_grpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// Collects a non-streamed completion.
class BodySink final : public ResponseSink {
 public:
  explicit BodySink(CompletionBody& body) : body_(body) {}
  bool write(const baton::v1::GenerateResponse& m) override {
    body_.add(m);
    return true;
  }

 private:
  CompletionBody& body_;
};

// Frames each message's chunks as server-sent events; false once the client is gone.
class EventSink final : public ResponseSink {
 public:
  EventSink(httplib::DataSink& sink, CompletionChunks& chunks) : sink_(sink), chunks_(chunks) {}
  bool write(const baton::v1::GenerateResponse& m) override {
    for (const json& c : chunks_.on_message(m)) {
      if (!event(c.dump())) return false;
    }
    return true;
  }
  bool event(const std::string& data) {
    const std::string frame = str_cat("data: ", data, "\n\n");
    return sink_.write(frame.data(), frame.size());
  }

 private:
  httplib::DataSink& sink_;
  CompletionChunks& chunks_;
};

// One admitted HTTP request: what its run needs, kept alive until the response is sent.
struct HttpRequest {
  ~HttpRequest() {
    if (unregister) unregister();
  }
  std::function<void()> unregister;  // leaves the server's running set (before `admitted` goes)
  OpenAiRequest api;
  std::unique_ptr<AdmittedRequest> admitted;
  std::unique_ptr<ConnectionWatch::Registration> watched;
  ResponseContext context;
  std::atomic<bool> client_gone{false};
};

}  // namespace

HttpServer::HttpServer(RouterService& router, HttpOptions options)
    : router_(router), options_(std::move(options)) {}

HttpServer::~HttpServer() { stop(); }

absl::StatusOr<int> HttpServer::start() {
  if (server_) return absl::FailedPreconditionError("the HTTP server is started already");
  watch_ = std::make_unique<ConnectionWatch>();
  if (options_.tls.public_tls()) {
    absl::Status tls = absl::OkStatus();
    auto ssl = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
      tls = security::configure_server_context(ctx, options_.tls, /*require_client_cert=*/false);
      return tls.ok();
    });
    if (!tls.ok()) return tls;
    if (!ssl->is_valid()) return absl::InternalError("HTTPS: the TLS context could not be made");
    server_ = std::move(ssl);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  server_->set_socket_options(reuse_address_only);  // a port in use fails instead of being shared
  server_->set_payload_max_length(options_.max_request_bytes);
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  server_->Get("/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"live"})", kJson);
  });
  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
  add_dashboard_routes(*server_, router_, [this](const httplib::Request& req, httplib::Response& res) {
    return options_.public_dashboard || authorize(req, res, /*browser=*/true).has_value();
  });
  server_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorize(req, res)) models(res);
  });
  server_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (auto caller = authorize(req, res)) generate(static_cast<int>(Endpoint::kCompletions), *caller, req, res);
  });
  server_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (auto caller = authorize(req, res)) generate(static_cast<int>(Endpoint::kChat), *caller, req, res);
  });
  // Unknown paths (and any error without a body) in OpenAI's shape.
  server_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      send_error(res, ApiError{413, str_cat("the request body is larger than ", options_.max_request_bytes,
                                            " bytes (--max-request-bytes)"),
                               "invalid_request_error", "", "request_too_large"});
    } else if (res.status == 404) {
      send_error(res, ApiError{404, str_cat("no route ", req.method, " ", req.path), "invalid_request_error", "",
                               "not_found"});
    } else {
      send_error(res, ApiError{res.status, str_cat("HTTP ", res.status), "invalid_request_error", "", ""});
    }
  });
  server_->set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("router: HTTP {} {} failed: {}", printable(req.method, 16), printable(req.path), what);
    send_error(res, ApiError{500, str_cat("internal error: ", what), "internal_error", "", "internal_error"});
  });
  port_ = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                             : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0) {
    server_.reset();
    return absl::UnavailableError(
        str_cat("cannot listen for HTTP on ", options_.host, ":", options_.port, " (in use, or not an address of this host?)"));
  }
  thread_ = start_accept_loop(*server_);
  spdlog::info("router: serving the OpenAI API on {}{}; live page on {}://{}:{}/dashboard{}", base_url(),
               router_.requires_api_key() ? " (API keys required)" : "", scheme(), options_.host, port_,
               options_.public_dashboard || !router_.requires_api_key() ? "" : " (API keys required)");
  return port_;
}

void HttpServer::stop() {
  if (!server_) return;
  {
    // Streams would hold the server's threads until they end; end them now.
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (RequestControl* c : running_) c->cancel("the router is shutting down");
  }
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
  watch_.reset();
}

std::string HttpServer::scheme() const { return options_.tls.public_tls() ? "https" : "http"; }

std::string HttpServer::base_url() const { return str_cat(scheme(), "://", options_.host, ":", port_, "/v1"); }

std::optional<security::KeyId> HttpServer::authorize(const httplib::Request& req, httplib::Response& res,
                                                     bool browser) const {
  const std::string header = req.get_header_value("Authorization");
  absl::StatusOr<security::KeyId> caller = router_.authenticate(header);
  if (caller.ok()) return std::move(*caller);
  if (browser) res.set_header("WWW-Authenticate", R"(Basic realm="baton", charset="UTF-8")");
  send_error(res, ApiError{401, std::string(caller.status().message()), "invalid_request_error", "", "invalid_api_key"});
  return std::nullopt;
}

void HttpServer::models(httplib::Response& res) {
  const baton::v1::ModelInfo info = router_.model_info();
  json model = {{"id", info.model()}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "baton"}};
  if (info.max_model_len() > 0) model["max_model_len"] = info.max_model_len();
  res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), kJson);
}

void HttpServer::health(httplib::Response& res) {
  if (router_.draining()) {
    send_error(res, ApiError{503, "the router is draining (shutting down)", "service_unavailable", "",
                             "service_unavailable"});
    return;
  }
  if (router_.has_usable_decode_node()) {
    res.set_content(R"({"status":"ok"})", kJson);
    return;
  }
  send_error(res, ApiError{503, "no decode node is usable", "service_unavailable", "", "service_unavailable"});
}

void HttpServer::generate(int endpoint_value, const security::KeyId& caller, const httplib::Request& req,
                          httplib::Response& res) {
  const Clock::time_point received = Clock::now();
  const auto endpoint = static_cast<Endpoint>(endpoint_value);
  const std::string prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  auto parsed = parse_request(endpoint, req.body, router_.served_model_name());
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  auto r = std::make_shared<HttpRequest>();
  r->api = std::move(std::get<OpenAiRequest>(parsed));
  auto admitted = router_.admit(r->api.generate, received, caller);
  if (!admitted.ok()) {
    const std::string field = limited_field(admitted.status());
    return send_error(res, from_status(admitted.status(), field.empty() ? prompt_field : field));
  }
  r->admitted = std::move(*admitted);
  {
    std::lock_guard lock(mu_);
    if (stopping_) return send_error(res, from_status(absl::UnavailableError("the router is shutting down")));
    running_.insert(&r->admitted->control());
  }
  r->unregister = [this, control = &r->admitted->control()] {
    std::lock_guard lock(mu_);
    running_.erase(control);
  };
  auto& sampling = *r->api.generate.mutable_sampling();
  if (endpoint == Endpoint::kChat && !r->api.max_tokens_given) {
    // OpenAI's chat default: no limit but the model's length.
    const std::int64_t room = router_.model_info().max_model_len() - static_cast<std::int64_t>(r->admitted->prompt().ids.size());
    if (room > 0) sampling.set_max_tokens(static_cast<std::int32_t>(room));
  }
  if (absl::Status s = router_.check_servable(*r->admitted, sampling); !s.ok()) {
    return send_error(res, from_status(s, prompt_field));
  }
  const int fd = ConnectionWatch::find_socket(req.remote_addr, req.remote_port, req.local_port);
  if (fd >= 0) {
    std::weak_ptr<HttpRequest> weak = r;
    r->watched = watch_->watch(fd, [weak] {
      if (auto alive = weak.lock()) {
        alive->client_gone = true;
        alive->admitted->control().cancel("the HTTP client closed its connection");
      }
    });
  } else {
    spdlog::warn("router: cannot find the socket of {}:{}; a hang-up will cancel it only when a write fails",
                 req.remote_addr, req.remote_port);
  }
  r->context.id = str_cat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", r->admitted->id());
  r->context.model = r->api.model;
  r->context.created = unix_now();
  r->context.endpoint = endpoint;
  r->context.want_logprobs = r->api.want_logprobs;
  r->context.include_usage = r->api.include_usage;
  r->context.tokenizer = router_.tokenizer();

  if (!r->api.stream) {
    CompletionBody body(r->context);
    BodySink sink(body);
    const grpc::Status s = router_.run(*r->admitted, r->api.generate, nullptr, sink);
    if (!s.ok()) return send_error(res, from_status(from_grpc(s)));
    if (body.finish_reason() == baton::v1::FINISH_REASON_ERROR) {
      return send_error(res, ApiError{500, body.error(), "internal_error", "", "internal_error"});
    }
    res.set_content(body.body().dump(), kJson);
    return;
  }
  // Streamed: the run happens in the content provider, on this connection's thread, after the
  // 200 and the event-stream headers went out; a failure from now on is an error event.
  res.set_chunked_content_provider("text/event-stream", [this, r](std::size_t, httplib::DataSink& data) {
    CompletionChunks chunks(r->context);
    EventSink sink(data, chunks);
    const grpc::Status s = router_.run(*r->admitted, r->api.generate, nullptr, sink);
    if (r->client_gone) return false;
    if (!s.ok() && !sink.event(from_status(from_grpc(s)).body().dump())) return false;
    if (!sink.event("[DONE]")) return false;
    data.done();
    return true;
  });
  res.set_header("Cache-Control", "no-cache");
}

}  // namespace baton::router::http
