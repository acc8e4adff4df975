#include "router/http/http_completion.h"

#include <chrono>
#include <utility>

#include "common/status.h"
#include "proto/status_convert.h"
#include "router/http/http_server.h"
#include "tokenizer/tokenizer.h"

namespace baton::router::http {
namespace {

using nlohmann::json;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string event(const json& j) { return str_cat("data: ", j.dump(), "\n\n"); }

}  // namespace

HttpCompletion::HttpCompletion(HttpServer& server, RouterService& router, std::shared_ptr<Exchange> ex,
                               OpenAiRequest api, Clock::time_point received)
    : server_(server), router_(router), ex_(std::move(ex)), api_(std::move(api)), received_(received) {
  std::vector<baton::v1::GenerateRequest> requests = choice_requests(api_);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto c = std::make_unique<Choice>();
    c->owner = this;
    c->index = i;
    c->request = std::move(requests[i]);
    choices_.push_back(std::move(c));
  }
  context_.model = api_.model;
  context_.created = unix_now();
  context_.endpoint = api_.endpoint;
  context_.want_logprobs = api_.want_logprobs;
  context_.include_usage = api_.include_usage;
  context_.tools = api_.tools;
  context_.tool_parser = server_.options_.tool_call_parser;
  context_.tokenizer = router_.tokenizer();
}

HttpCompletion::~HttpCompletion() { server_.leave(); }

void HttpCompletion::start(const security::KeyId& caller) {
  for (const std::unique_ptr<Choice>& owned : choices_) {
    Choice& c = *owned;
    const std::uint64_t ticket =
        router_.admit_async(c.request, received_, caller,
                            [self = shared_from_this(), &c](absl::StatusOr<std::unique_ptr<AdmittedRequest>> admitted) {
                              self->on_admitted(c, std::move(admitted));
                            });
    if (ticket == 0) continue;  // decided already
    bool leave = false;
    {
      std::lock_guard lock(mu_);
      if (!c.admitted && !c.ended) {
        if (gone_ || error_) leave = true;
        else c.ticket = ticket;
      }
    }
    if (leave) router_.leave_queue(ticket);
  }
}

void HttpCompletion::hung_up() {
  std::vector<std::uint64_t> tickets;
  std::vector<RequestControl*> running;
  {
    std::lock_guard lock(mu_);
    gone_ = true;
    for (const std::unique_ptr<Choice>& c : choices_) {
      if (c->ticket != 0) tickets.push_back(std::exchange(c->ticket, 0));
      if (c->running) running.push_back(&c->admitted->control());
    }
  }
  for (std::uint64_t t : tickets) router_.leave_queue(t);
  for (RequestControl* r : running) r->client_left("the HTTP client closed its connection");
}

void HttpCompletion::on_admitted(Choice& c, absl::StatusOr<std::unique_ptr<AdmittedRequest>> admitted) {
  const std::string prompt_field = api_.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (!admitted.ok()) {
    const std::string field = limited_field(admitted.status());
    return ended(c, from_status(admitted.status(), field.empty() ? prompt_field : field));
  }
  bool drop = false;
  {
    std::lock_guard lock(mu_);
    c.ticket = 0;
    c.admitted = std::move(*admitted);
    drop = gone_ || error_.has_value();
  }
  if (drop || ex_->client_gone()) {  // the hang-up, or another choice's failure, came while it waited
    c.admitted->leave_running();
    return ended(c, std::nullopt);
  }
  if (!server_.track(&c.admitted->control())) {
    c.admitted->leave_running();
    return ended(c, from_status(absl::UnavailableError("the router is shutting down")));
  }
  c.tracked = true;
  auto& sampling = *c.request.mutable_sampling();
  if (api_.endpoint == Endpoint::kChat && !api_.max_tokens_given) {
    // OpenAI's chat default: no limit but the model's length.
    const std::int64_t room =
        router_.model_info().max_model_len() - static_cast<std::int64_t>(c.admitted->prompt().ids.size());
    if (room > 0) sampling.set_max_tokens(static_cast<std::int32_t>(room));
  }
  if (absl::Status s = router_.check_servable(*c.admitted, sampling); !s.ok()) {
    c.admitted->leave_running();
    return ended(c, from_status(s, prompt_field));
  }
  ResponseContext context;
  {
    std::lock_guard lock(mu_);
    drop = gone_ || error_.has_value();
    // The first choice admitted names the response; every chunk and the body carry that id.
    if (context_.id.empty()) {
      context_.id = str_cat(api_.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", c.admitted->id());
    }
    context = context_;
    c.running = !drop;
  }
  if (drop) {
    server_.untrack(&c.admitted->control());
    c.tracked = false;
    c.admitted->leave_running();
    return ended(c, std::nullopt);
  }
  context.index = static_cast<int>(c.index);
  context.shared_usage = choices_.size() > 1;
  if (!api_.stream) {
    c.body.emplace(context);
  } else {
    // The 200 and the event-stream headers go out once, before any choice's first chunk; from
    // then on a failure is an error event.
    std::call_once(stream_started_, [&] {
      ex_->start_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
      std::lock_guard lock(mu_);
      started_ = true;
    });
    c.chunks.emplace(context);
  }
  router_.run(*c.admitted, c.request, nullptr, c,
              [self = shared_from_this(), &c](grpc::Status s) { self->run_ended(c, s); });
}

void HttpCompletion::write(Choice& c, const baton::v1::GenerateResponse& m, std::function<void(bool)> sent) {
  if (!c.chunks) {
    c.body->add(m);
    return sent(true);
  }
  std::string events;
  for (const json& chunk : c.chunks->on_message(m)) events += event(chunk);
  if (events.empty()) return sent(!ex_->client_gone());
  ex_->write_async(std::move(events), std::move(sent));
}

void HttpCompletion::run_ended(Choice& c, const grpc::Status& s) {
  if (c.tracked) server_.untrack(&c.admitted->control());
  c.tracked = false;
  {
    std::lock_guard lock(mu_);
    c.running = false;
  }
  if (!s.ok()) return ended(c, from_status(to_absl_status(s)));
  if (c.body && c.body->finish_reason() == baton::v1::FINISH_REASON_ERROR) {
    return ended(c, ApiError{500, c.body->error(), "internal_error", "", "internal_error"});
  }
  ended(c, std::nullopt);
}

void HttpCompletion::ended(Choice& c, std::optional<ApiError> error) {
  std::vector<std::uint64_t> tickets;
  std::vector<RequestControl*> running;
  bool last = false;
  {
    std::lock_guard lock(mu_);
    c.ended = true;
    c.ticket = 0;
    if (error && !error_) {
      error_ = std::move(error);
      for (const std::unique_ptr<Choice>& other : choices_) {
        if (other->ticket != 0) tickets.push_back(std::exchange(other->ticket, 0));
        if (other->running) running.push_back(&other->admitted->control());
      }
    }
    last = ++num_ended_ == choices_.size();
  }
  for (std::uint64_t t : tickets) router_.leave_queue(t);
  for (RequestControl* r : running) r->cancel("another choice of the same request failed");
  if (last) answer();
}

void HttpCompletion::answer() {
  if (ex_->client_gone()) return;  // no one to tell
  // Every choice has ended: nothing changes the state below any more.
  std::vector<const baton::v1::Usage*> usages;
  json choices = json::array();
  for (const std::unique_ptr<Choice>& c : choices_) {
    if (c->body) {
      usages.push_back(&c->body->usage());
      choices.push_back(c->body->choice());
    }
  }
  if (!api_.stream || !started_) {
    if (error_) return ex_->reply(error_reply(*error_));
    if (choices.size() != choices_.size()) {  // cannot happen: a choice without a body has failed
      return ex_->reply(error_reply(from_status(absl::InternalError("a choice ended without an answer"))));
    }
    if (choices_.size() == 1) return ex_->reply(json_reply(choices_[0]->body->body().dump()));
    return ex_->reply(json_reply(completion_body(context_, std::move(choices), merged_usage(usages, api_.n)).dump()));
  }
  std::string tail;
  if (error_) {
    tail = event(error_->body());
  } else if (api_.include_usage && choices_.size() > 1) {
    for (const std::unique_ptr<Choice>& c : choices_) {
      if (c->chunks) usages.push_back(&c->chunks->usage());
    }
    tail = event(usage_chunk(context_, merged_usage(usages, api_.n)));
  }
  tail += "data: [DONE]\n\n";
  ex_->write_async(std::move(tail), [self = shared_from_this()](bool written) {
    if (written) self->ex_->finish();
  });
}

}  // namespace baton::router::http
