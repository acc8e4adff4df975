// HttpCompletion: one POST /v1/completions or /v1/chat/completions from its parsed body to its
// answer. It makes one choice per prompt and sample (openai_request.h: choice_requests), each its
// own request on the router's path: admitted on its own (perhaps after a wait in the admission
// queue), checked, then run. The choices' messages become one body (every choice, one merged
// usage), or the server-sent events of one stream, each chunk carrying its choice's index and
// written whole (the Exchange is thread-safe; each choice waits for room before its next chunk).
// Any choice's failure ends the request: the other choices are cancelled or leave the queue, and
// the answer is that error (its status, or an error event once the stream started). A client that
// hangs up cancels every choice. It is kept alive by the callbacks it hands out and answers once
// the last choice has ended.
//
// Must not: parse bodies or build response JSON (openai_request.h and openai_response.h do), or
// block a thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "http/http_listener.h"
#include "router/http/api_error.h"
#include "router/http/openai_request.h"
#include "router/http/openai_response.h"
#include "router/router_service.h"

namespace baton::router::http {

using baton::http::Exchange;
class HttpServer;

class HttpCompletion final : public std::enable_shared_from_this<HttpCompletion> {
 public:
  HttpCompletion(HttpServer& server, RouterService& router, std::shared_ptr<Exchange> ex, OpenAiRequest api,
                 Clock::time_point received);
  ~HttpCompletion();  // the server's in-flight count goes down

  // Asks for every choice's admission; the rest happens in callbacks.
  void start(const security::KeyId& caller);
  // The client closed its connection: queued choices leave the queue, admitted ones are cancelled
  // on every node.
  void hung_up();

 private:
  struct Choice final : public ResponseSink {
    HttpCompletion* owner = nullptr;
    std::size_t index = 0;
    baton::v1::GenerateRequest request;
    // Under owner->mu_:
    std::uint64_t ticket = 0;                   // while it waits in the admission queue
    std::unique_ptr<AdmittedRequest> admitted;
    bool running = false;                       // its run started and has not ended
    bool ended = false;
    // The run's thread only:
    bool tracked = false;                       // its control is in the server's running set
    std::optional<CompletionBody> body;         // non-streamed
    std::optional<CompletionChunks> chunks;     // streamed

    void write(const baton::v1::GenerateResponse& m, std::function<void(bool)> sent) override {
      owner->write(*this, m, std::move(sent));
    }
  };

  void on_admitted(Choice& c, absl::StatusOr<std::unique_ptr<AdmittedRequest>> admitted);
  void write(Choice& c, const baton::v1::GenerateResponse& m, std::function<void(bool)> sent);
  // The run of an admitted choice ended with `status`.
  void run_ended(Choice& c, const grpc::Status& status);
  // The choice is over (error: why the whole request fails); the last one answers.
  void ended(Choice& c, std::optional<ApiError> error);
  void answer();

  HttpServer& server_;
  RouterService& router_;
  const std::shared_ptr<Exchange> ex_;
  const OpenAiRequest api_;
  const Clock::time_point received_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::once_flag stream_started_;
  std::mutex mu_;
  ResponseContext context_;       // id set by the first admitted choice (mu_)
  bool gone_ = false;             // the client hung up (mu_)
  bool started_ = false;          // streamed: the 200 and its headers went out (mu_)
  std::optional<ApiError> error_;  // the first failure (mu_)
  std::size_t num_ended_ = 0;     // (mu_)
};

}  // namespace baton::router::http
