#include "router/http/http_server.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>

#include "common/logging.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "proto/status_convert.h"
#include "router/http/api_error.h"
#include "router/http/dashboard.h"
#include "router/http/http_completion.h"
#include "router/http/openai_request.h"
#include "router/http/openai_response.h"
#include "router/router_service.h"
#include "spdlog/spdlog.h"
#include "tokenizer/tokenizer.h"

namespace baton::router::http {
using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// 429 (over a limit) and 503 (draining, no node) say when to come back, as OpenAI's API does; the
// clients' retry logic reads it.
Reply error_reply(const ApiError& e) {
  Reply r;
  r.status = e.status;
  r.body = e.body().dump();
  if (e.status == 429 || e.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

Reply json_reply(std::string body) {
  Reply r;
  r.body = std::move(body);
  return r;
}

namespace {

// The path of a request target, without its query.
std::string_view path_of(boost::beast::string_view target) {
  const std::string_view t(target.data(), target.size());
  return t.substr(0, t.find('?'));
}

}  // namespace

HttpServer::HttpServer(RouterService& router, HttpOptions options)
    : router_(router), options_(std::move(options)) {}

HttpServer::~HttpServer() { stop(); }

absl::StatusOr<int> HttpServer::start() {
  if (listener_) return absl::FailedPreconditionError("the HTTP server is started already");
  baton::http::ListenerOptions o;
  o.host = options_.host;
  o.port = options_.port;
  o.tls = options_.tls;
  o.max_connections = options_.max_connections;
  o.max_body_bytes = options_.max_request_bytes;
  o.idle_timeout = options_.idle_timeout;
  o.header_timeout = options_.header_timeout;
  o.error_reply = [this](int status, const std::string& message) {
    std::string code;
    std::string type = "invalid_request_error";
    switch (status) {
      case 413: code = "request_too_large"; break;
      case 503: code = "service_unavailable"; type = "service_unavailable"; break;
      default: break;
    }
    std::string text = message;
    if (status == 413) text += " (--max-request-bytes)";
    if (status == 503) text += " (--max-http-connections)";
    return error_reply(ApiError{status, text, type, "", code});
  };
  auto listener = std::make_unique<HttpListener>(o, [this](std::shared_ptr<Exchange> ex) { handle(std::move(ex)); });
  BATON_ASSIGN_OR_RETURN(port_, listener->start());
  listener_ = std::move(listener);
  spdlog::info("router: serving the OpenAI API on {}{}; live page on {}://{}:{}/dashboard{}", base_url(),
               router_.requires_api_key() ? " (API keys required)" : "", scheme(), options_.host, port_,
               options_.public_dashboard || !router_.requires_api_key() ? "" : " (API keys required)");
  return port_;
}

void HttpServer::stop() {
  if (!listener_) return;
  {
    // End the requests now: their threads return once their runs do.
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (RequestControl* c : running_) c->cancel("the router is shutting down");
  }
  listener_->stop();  // every connection closes: a thread writing to one learns it at once
  std::unique_lock lock(mu_);
  while (!idle_.wait_for(lock, std::chrono::seconds(10), [&] { return in_flight_ == 0; })) {
    spdlog::warn("router: stopping the HTTP API: {} completions still finishing", in_flight_);
  }
  lock.unlock();
  listener_.reset();
}

std::string HttpServer::scheme() const { return options_.tls.public_tls() ? "https" : "http"; }

std::string HttpServer::base_url() const { return str_cat(scheme(), "://", options_.host, ":", port_, "/v1"); }

bool HttpServer::enter() {
  std::lock_guard lock(mu_);
  if (stopping_ || in_flight_ >= options_.max_in_flight) return false;
  ++in_flight_;
  return true;
}

void HttpServer::leave() {
  std::lock_guard lock(mu_);
  if (--in_flight_ == 0) idle_.notify_all();
}

// On an I/O thread: cheap routes answer here; completions start here and go on from callbacks.
void HttpServer::handle(std::shared_ptr<Exchange> ex) {
  const baton::http::Request& req = ex->request();
  const std::string_view path = path_of(req.target());
  const bool get = req.method() == boost::beast::http::verb::get;
  const bool post = req.method() == boost::beast::http::verb::post;
  if (get && path == "/live") return ex->reply(json_reply(R"({"status":"live"})"));
  if (get && path == "/health") return ex->reply(health());
  if (get && path.substr(0, 10) == "/dashboard") {
    if (!options_.public_dashboard && !authorize(*ex, /*browser=*/true)) return;
    if (auto reply = dashboard_reply(router_, path)) {
      if (reply->status == 404 && reply->body.empty()) {
        reply->body = ApiError{404, str_cat("no route GET ", printable(path)), "invalid_request_error", "", "not_found"}
                          .body()
                          .dump();
        reply->content_type = kJson;
      }
      return ex->reply(std::move(*reply));
    }
  }
  if (get && path == "/metrics") {
    // vLLM serves /metrics on its API port; the same families as --metrics-port, behind the same
    // key rule (open with --public-dashboard).
    if (!options_.public_dashboard && !authorize(*ex)) return;
    Reply r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = router_.metrics_text();
    return ex->reply(std::move(r));
  }
  if (get && path == "/v1/models") {
    if (authorize(*ex)) ex->reply(models());
    return;
  }
  if (post && (path == "/tokenize" || path == "/detokenize")) {
    if (!authorize(*ex)) return;
    const std::string& body = ex->request().body();
    return ex->reply(path == "/tokenize" ? tokenize(body) : detokenize(body));
  }
  const bool completions = path == "/v1/completions", chat = path == "/v1/chat/completions";
  if (post && (completions || chat)) {
    auto caller = authorize(*ex);
    if (!caller) return;
    const int endpoint = static_cast<int>(chat ? Endpoint::kChat : Endpoint::kCompletions);
    if (!enter()) {
      return ex->reply(error_reply(from_status(absl::ResourceExhaustedError(str_cat(
          "the router is serving ", options_.max_in_flight, " HTTP completions, its limit; try again later")))));
    }
    return generate(endpoint, *caller, std::move(ex));
  }
  ex->reply(error_reply(ApiError{404, str_cat("no route ", printable(std::string(req.method_string()), 16), " ",
                                              printable(path)),
                                 "invalid_request_error", "", "not_found"}));
}

std::optional<security::KeyId> HttpServer::authorize(Exchange& ex, bool browser) const {
  const auto& header = ex.request()[boost::beast::http::field::authorization];
  absl::StatusOr<security::KeyId> caller = router_.authenticate(std::string_view(header.data(), header.size()));
  if (caller.ok()) return std::move(*caller);
  Reply r = error_reply(
      ApiError{401, std::string(caller.status().message()), "invalid_request_error", "", "invalid_api_key"});
  if (browser) r.headers.emplace_back("WWW-Authenticate", R"(Basic realm="baton", charset="UTF-8")");
  ex.reply(std::move(r));
  return std::nullopt;
}

Reply HttpServer::models() const {
  const baton::v1::ModelInfo info = router_.model_info();
  json model = {{"id", info.model()}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "baton"}};
  if (info.max_model_len() > 0) model["max_model_len"] = info.max_model_len();
  return json_reply(json{{"object", "list"}, {"data", json::array({model})}}.dump());
}

Reply HttpServer::tokenize(const std::string& body) const {
  auto parsed = parse_tokenize(body, router_.served_model_name());
  if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
  const auto& request = std::get<baton::v1::TokenizeRequest>(parsed);
  absl::StatusOr<EncodedPrompt> prompt = router_.tokenize(request);
  if (!prompt.ok()) return error_reply(from_status(prompt.status(), request.has_chat() ? "messages" : "prompt"));
  json out = {{"count", prompt->ids.size()}, {"tokens", prompt->ids}};
  if (const std::int32_t len = router_.decode_max_model_len(); len > 0) out["max_model_len"] = len;
  return json_reply(out.dump());
}

Reply HttpServer::detokenize(const std::string& body) const {
  const Tokenizer* tokenizer = router_.tokenizer();
  if (tokenizer == nullptr) {
    return error_reply(from_status(absl::FailedPreconditionError(
        "this router runs in token-id mode (its --model directory has no tokenizer files): it has no text for tokens")));
  }
  auto parsed = parse_detokenize(body, router_.served_model_name(), tokenizer->vocab_size());
  if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
  const auto& ids = std::get<std::vector<std::int32_t>>(parsed);
  return json_reply(json{{"prompt", tokenizer->decode(ids, /*skip_special_tokens=*/false)}}.dump());
}

Reply HttpServer::health() const {
  if (router_.draining()) {
    return error_reply(ApiError{503, "the router is draining (shutting down)", "service_unavailable", "",
                                "service_unavailable"});
  }
  if (router_.has_usable_decode_node()) return json_reply(R"({"status":"ok"})");
  return error_reply(ApiError{503, "no decode node is usable", "service_unavailable", "", "service_unavailable"});
}

void HttpServer::generate(int endpoint_value, const security::KeyId& caller, std::shared_ptr<Exchange> ex) {
  const Clock::time_point received = Clock::now();
  const auto endpoint = static_cast<Endpoint>(endpoint_value);
  auto parsed = parse_request(endpoint, ex->request().body(), router_.served_model_name(),
                              options_.enable_auto_tool_choice && options_.tool_call_parser.has_value());
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    leave();
    return ex->reply(error_reply(*e));
  }
  // From here the completion leaves the in-flight count when it goes.
  auto c = std::make_shared<HttpCompletion>(*this, router_, ex, std::move(std::get<OpenAiRequest>(parsed)), received);
  // A client that hangs up cancels the request on every node, even between writes, or leaves the
  // admission queue.
  ex->on_hangup([weak = std::weak_ptr<HttpCompletion>(c)] {
    if (auto alive = weak.lock()) alive->hung_up();
  });
  c->start(caller);
}

bool HttpServer::track(RequestControl* control) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  running_.insert(control);
  return true;
}

void HttpServer::untrack(RequestControl* control) {
  std::lock_guard lock(mu_);
  running_.erase(control);
}

}  // namespace baton::router::http
