#include "router/request_flow.h"

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "baton/v1/node.grpc.pb.h"
#include "common/draining.h"
#include "common/serial_queue.h"
#include "common/status.h"
#include "grpcpp/support/client_callback.h"
#include "proto/status_convert.h"
#include "router/node_calls.h"
#include "router/prompt.h"
#include "security/capability.h"
#include "spdlog/spdlog.h"

namespace baton::router {
namespace {

using baton::node::v1::DecodeRequest;
using baton::node::v1::DecodeResponse;
using baton::node::v1::KvDestination;
using baton::node::v1::PrefillRequest;
using baton::node::v1::PrefillResponse;
using baton::node::v1::ReserveRequest;
using baton::v1::FinishReason;
using baton::v1::GenerateResponse;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Failures of a node that another node may not share: worth the one retry before the first token.
bool node_fault(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// A draining node refuses new work before anything ran; with every node of a kind restarting in
// turn (a rolling update) a request may meet more than one, so these refusals have a budget of
// their own.
constexpr int kMaxDrainingRetries = 4;

bool refused_by_draining_node(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE && says_node_draining(s.error_message());
}

struct Outcome {
  grpc::Status status;
  bool retry = false;    // failed before the client saw a token; may run once more elsewhere
  std::string exclude;   // the failed node's address (left out of the retry's placement)
};

// One Decode stream: its call, what it reads into, and how it ended. Owned by the run from its
// start until gRPC's OnDone (a cancelled stream outlives its attempt until then). Its reactions
// only post to the run's queue, so the stream holds itself open (AddHold) until the run reads no
// more: a read is never started on a call gRPC finished meanwhile.
class RequestRun;
struct DecodeCall final : public grpc::ClientReadReactor<DecodeResponse> {
  DecodeCall(std::shared_ptr<RequestRun> run, std::unique_ptr<grpc::ClientContext> context, RequestControl& control)
      : run(std::move(run)), context(std::move(context)), scope(std::make_unique<RequestControl::CallScope>(control, *this->context)) {}
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  // On the run's queue:
  void start() {
    AddHold();
    StartCall();
  }
  void read() {
    reading = true;
    StartRead(&message);
  }
  // No more reads: gRPC may end the call (OnDone) once its status is in.
  void let_go() {
    if (!held) return;
    held = false;
    RemoveHold();
  }

  std::shared_ptr<RequestRun> run;  // until OnDone: the run outlives its streams
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<RequestControl::CallScope> scope;
  DecodeRequest request;
  DecodeResponse message;
  bool reading = false;               // a read is outstanding
  bool held = true;                   // start()'s hold, until let_go()
  std::optional<grpc::Status> ended;  // OnDone came
  bool last_seen = false;             // the message with the finish reason was read
  std::unique_ptr<CallWatchdog::Watch> watch;  // last: it goes before the context it watches
};

// A unary node call in flight: what it must keep alive until its answer.
template <class Request, class Response>
struct UnaryCall {
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<RequestControl::CallScope> scope;
  Request request;
  Response response;
  std::unique_ptr<CallWatchdog::Watch> watch;  // last: it goes before the context it watches
};

// One request's run: its state, timings and the messages it writes. Every method but start() and
// the gRPC reactions runs on its queue.
class RequestRun : public std::enable_shared_from_this<RequestRun> {
 public:
  RequestRun(NodePool& pool, RouterStats& stats, CallWatchdog& watchdog, const FlowOptions& options,
             const baton::v1::GenerateRequest& request, const std::string& client_id, const std::string& node_id,
             std::uint64_t cache_salt, const std::vector<std::int32_t>& prompt, RequestControl& control,
             const grpc::ServerContextBase* server, ResponseSink& sink, Clock::time_point received, FlowDone done)
      : pool_(pool),
        stats_(stats),
        watchdog_(watchdog),
        options_(options),
        request_(request),
        client_id_(client_id),
        rid_(node_id),
        cache_salt_(cache_salt),
        prompt_(prompt),
        sink_(sink),
        received_(received),
        done_(std::move(done)),
        calls_(pool, stats, control, server, received + options.request_timeout, options.abort_timeout) {}

  void start() {
    post([this] { next_attempt(); });
  }

  // Runs `task` on the run's queue. The run lives until the queue ran it, and until this returns
  // (the thread that drains the queue must not see it destroyed under it).
  void post(std::function<void()> task) {
    std::shared_ptr<RequestRun> keep = shared_from_this();
    queue_.post([keep, task = std::move(task)] { task(); });
  }

  // DecodeCall's reactions, on the queue.
  void decode_read(DecodeCall* call, bool ok);
  void decode_ended(DecodeCall* call, const grpc::Status& status);

 private:
  void enter(RequestState next);
  void next_attempt();
  void note_site(const ChosenNodes& chosen, const std::string& id);
  // Disaggregated: Reserve on D, then Prefill on P.
  void reserve();
  void reserved(const grpc::Status& status);
  void prefill(const KvDestination& destination);
  void prefilled(grpc::Status status);
  // Local prefill, or after P's first token: D's stream to the client.
  void open_decode(bool local);
  void forward();
  void read_next();
  // A stream's OnDone came: forget it; this attempt's, ended before its last message, fails it.
  void close_stream(DecodeCall* call);
  void cancel_stream();
  // The attempt failed: the next one, or the end.
  void attempt_failed(Outcome outcome);
  // The request stopped (Abort RPC, client gone, deadline): abort it where it runs.
  void stop(bool abort_decode, bool abort_prefill);
  void finish(const grpc::Status& status);
  void finish_if_settled();
  // Writes one message; `then` runs on the queue once the client took it (true) or is gone.
  void write(GenerateResponse& response, std::function<void(bool)> then);
  // Best effort; the run ends only once they did.
  void release_decode();
  void abort_on(const std::shared_ptr<Node>& node);
  std::function<void()> settle() {
    ++in_flight_;
    return [self = shared_from_this()] { self->post([run = self.get()] { --run->in_flight_; run->finish_if_settled(); }); };
  }
  void fill_usage(baton::v1::Usage* usage, const DecodeResponse* last);
  // The last message's kv_transfer_params (extract_hidden_states' file), when a node reported any.
  void set_kv_transfer_params(GenerateResponse& out) const {
    if (!hidden_states_path_.empty()) out.mutable_kv_transfer_params()->set_hidden_states_path(hidden_states_path_);
  }
  void count_watchdog(const CallWatchdog::Watch& watch) {
    (watch.reason() == CallWatchdog::Watch::Reason::kNoProgress ? stats_.calls_stalled : stats_.calls_node_unreachable)
        .fetch_add(1, std::memory_order_relaxed);
  }
  Node& decode() { return *chosen_->decode; }
  Node& prefill_node() { return *chosen_->prefill; }

  NodePool& pool_;
  RouterStats& stats_;
  CallWatchdog& watchdog_;
  const FlowOptions& options_;
  const baton::v1::GenerateRequest& request_;
  const std::string& client_id_;  // what responses carry
  const std::string& rid_;        // the node id: node calls are "<rid_>.<attempt>"
  const std::uint64_t cache_salt_;
  const std::vector<std::int32_t>& prompt_;
  ResponseSink& sink_;
  const Clock::time_point received_;
  FlowDone done_;
  NodeCalls calls_;
  SerialQueue queue_;

  RequestState state_ = RequestState::kAdmitted;
  int attempt_ = 0;
  int retries_left_ = 1;
  int draining_retries_left_ = kMaxDrainingRetries;
  std::set<std::string> excluded_;
  grpc::Status previous_;  // the failure the retry follows (what the client hears if none is left)
  std::optional<ChosenNodes> chosen_;
  std::string id_;  // this attempt's node-call id
  std::unique_ptr<UnaryCall<ReserveRequest, KvDestination>> reserve_call_;
  std::unique_ptr<UnaryCall<PrefillRequest, PrefillResponse>> prefill_call_;
  DecodeCall* stream_ = nullptr;  // this attempt's Decode stream while it is open
  std::map<DecodeCall*, std::unique_ptr<DecodeCall>> streams_;  // every stream until its OnDone
  bool writing_ = false;
  int in_flight_ = 0;  // node calls (streams, Release, Abort) whose end the run waits for
  std::optional<grpc::Status> final_;
  bool done_called_ = false;

  // What the usage in the last message reports.
  std::string decode_address_, prefill_address_, transport_;
  std::string capability_;  // the current attempt's token (node.proto): D's from Reserve, or ours for a local prefill
  bool local_ = false;
  double prefill_ms_ = 0, kv_transfer_ms_ = 0;
  std::int32_t cached_prompt_tokens_ = 0;
  std::string hidden_states_path_;  // extract_hidden_states: the prefilling node's file of the prompt
  std::int64_t tokens_sent_ = 0;
  std::optional<Clock::time_point> first_call_at_, first_token_at_;
};

void DecodeCall::OnReadDone(bool ok) {
  run->post([r = run.get(), this, ok] { r->decode_read(this, ok); });
}

void DecodeCall::OnDone(const grpc::Status& status) {
  // The run deletes this on its queue: keep it alive through the post, whose task may run here.
  std::shared_ptr<RequestRun> r = run;
  r->post([r, this, status] { r->decode_ended(this, status); });
}

void RequestRun::enter(RequestState next) {
  spdlog::debug("router: request {}: {} -> {}", rid_, state_name(state_), state_name(next));
  state_ = next;
  stats_.enter(next);
}

void RequestRun::next_attempt() {
  if (attempt_ > 0 && calls_.stopped()) return stop(false, false);
  ++attempt_;
  PlacementRequest placement;
  placement.prompt_len = static_cast<std::int64_t>(prompt_.size());
  placement.force_local_prefill = request_.force_local_prefill();
  placement.local_prefill_max_tokens = options_.local_prefill_max_tokens;
  placement.local_fallback = options_.local_fallback;
  chosen_.reset();  // the last attempt's claims go before this one's placement
  absl::StatusOr<ChosenNodes> chosen = pool_.choose(placement, excluded_);
  if (!chosen.ok()) {
    if (attempt_ == 1) return finish(to_grpc_status(chosen.status()));
    // Nowhere to retry: the first failure is what the client needs to know.
    return finish(grpc::Status(previous_.error_code(),
                               str_cat(previous_.error_message(), " (not retried: ", chosen.status().message(), ")")));
  }
  if (attempt_ == 1) {
    const auto& info = chosen->decode_info;
    absl::Status limits = check_prompt_limits(prompt_, request_.sampling(), info.vocab_size(), info.max_model_len(),
                                              chosen->decode->label());
    if (!limits.ok()) return finish(to_grpc_status(limits));
  }
  chosen_ = std::move(*chosen);
  id_ = str_cat(rid_, ".", attempt_);
  note_site(*chosen_, id_);
  if (!first_call_at_) first_call_at_ = Clock::now();
  if (chosen_->prefill) return reserve();
  transport_.clear();
  capability_ = security::new_capability();  // later aborts of the request on D present it
  open_decode(/*local=*/true);
  forward();
}

void RequestRun::note_site(const ChosenNodes& chosen, const std::string& id) {
  decode_address_ = chosen.decode->address();
  local_ = chosen.prefill == nullptr;
  prefill_address_ = local_ ? "" : chosen.prefill->address();
  if (!local_) {
    stats_.disaggregated.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("router: {} prefills on {}, decodes on {}", id, chosen.prefill->label(), chosen.decode->label());
    return;
  }
  std::string why;
  switch (chosen.site) {
    case PrefillSite::kLocalForced:
      stats_.local_prefill_forced.fetch_add(1, std::memory_order_relaxed);
      why = "the request set force_local_prefill";
      break;
    case PrefillSite::kLocalShortPrompt:
      stats_.local_prefill_short_prompt.fetch_add(1, std::memory_order_relaxed);
      why = str_cat("its prompt has ", prompt_.size(), " tokens <= --local-prefill-max-tokens ",
                    options_.local_prefill_max_tokens);
      break;
    case PrefillSite::kLocalNoPrefill:
      stats_.local_prefill_no_prefill_node.fetch_add(1, std::memory_order_relaxed);
      why = "no prefill node is usable";
      break;
    case PrefillSite::kPrefillNode:
      break;
  }
  spdlog::info("router: {} prefills locally on {}: {}", id, chosen.decode->label(), why);
}

void RequestRun::reserve() {
  enter(RequestState::kReserving);
  capability_.clear();  // until D's Reserve gives this attempt's
  auto call = std::make_unique<UnaryCall<ReserveRequest, KvDestination>>();
  // Not cancelled with the request (no CallScope): a Reserve cut off after D reserved would leave
  // the reservation without its token, and so unreleasable until its lease ran out. It is short
  // (bounded by its deadline); reserved() gives the reservation back if the request stopped.
  call->context = calls_.context(options_.node_timeout);
  call->request.set_request_id(id_);
  call->request.set_prompt_len(static_cast<std::int32_t>(prompt_.size()));
  call->request.set_transport(pair_transport(chosen_->prefill_info, chosen_->decode_info));  // "": D's preferred
  auto* c = call.get();
  reserve_call_ = std::move(call);
  decode().decode().async()->Reserve(c->context.get(), &c->request, &c->response,
                                     [self = shared_from_this()](grpc::Status s) {
                                       self->post([run = self.get(), s] { run->reserved(s); });
                                     });
}

void RequestRun::reserved(const grpc::Status& s) {
  const KvDestination destination = std::move(reserve_call_->response);
  reserve_call_.reset();
  if (!s.ok()) {
    if (calls_.stopped()) return stop(true, false);
    return attempt_failed({calls_.failed(decode(), s), node_fault(s.error_code()), decode().address()});
  }
  transport_ = destination.transport();
  capability_ = destination.capability();
  if (calls_.stopped()) {  // cancelled while D reserved: free the reservation now its token is known
    release_decode();
    return stop(false, false);
  }
  if (options_.open_decode_before_prefill) open_decode(/*local=*/false);
  prefill(destination);
}

void RequestRun::prefill(const KvDestination& destination) {
  enter(RequestState::kPrefilling);
  auto call = std::make_unique<UnaryCall<PrefillRequest, PrefillResponse>>();
  call->context = calls_.context(options_.prefill_timeout);
  call->scope = std::make_unique<RequestControl::CallScope>(calls_.control(), *call->context);
  call->request.set_request_id(id_);
  call->request.mutable_prompt()->Assign(prompt_.begin(), prompt_.end());
  *call->request.mutable_sampling() = request_.sampling();
  *call->request.mutable_destination() = destination;
  call->request.set_cache_salt(cache_salt_);
  // No progress limit (the prefill's own deadline bounds it), but a P that stops answering its
  // health checks ends the call, and the request is retried elsewhere.
  call->watch = std::make_unique<CallWatchdog::Watch>(watchdog_, prefill_node(), *call->context,
                                                      std::chrono::milliseconds(0), std::chrono::milliseconds(0));
  auto* c = call.get();
  prefill_call_ = std::move(call);
  prefill_node().prefill().async()->Prefill(c->context.get(), &c->request, &c->response,
                                            [self = shared_from_this()](grpc::Status st) {
                                              self->post([run = self.get(), st] { run->prefilled(st); });
                                            });
}

void RequestRun::prefilled(grpc::Status s) {
  if (!s.ok() && prefill_call_->watch->fired()) {
    count_watchdog(*prefill_call_->watch);
    s = grpc::Status(grpc::StatusCode::UNAVAILABLE, prefill_call_->watch->why());
  }
  const PrefillResponse first = std::move(prefill_call_->response);
  prefill_call_.reset();
  chosen_->prefill_claim.reset();
  if (!s.ok()) {
    cancel_stream();
    if (calls_.stopped()) return stop(true, true);
    release_decode();
    const bool rejected = s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
    if (!rejected) abort_on(chosen_->prefill);
    return attempt_failed({calls_.failed(prefill_node(), s), !rejected, prefill_node().address()});
  }

  prefill_ms_ = first.prefill_ms();
  kv_transfer_ms_ = first.kv_transfer_ms();
  cached_prompt_tokens_ = first.num_cached_prompt_tokens();
  hidden_states_path_ = first.hidden_states_path();
  GenerateResponse out;
  out.add_token_ids(first.first_token());
  out.set_text(first.text());
  if (first.has_logprob()) *out.add_logprobs() = first.logprob();
  tokens_sent_ = 1;
  first_token_at_ = Clock::now();
  if (first.finished()) {
    // Nothing was committed: the reservation is the router's to free.
    cancel_stream();
    release_decode();
    out.set_finish_reason(first.finish_reason());
    if (first.has_stop_token()) out.set_stop_token(first.stop_token());
    if (first.has_stop_string()) out.set_stop_string(first.stop_string());
    fill_usage(out.mutable_usage(), nullptr);
    set_kv_transfer_params(out);
    return write(out, [this](bool written) {
      if (!written) return stop(false, false);
      finish(grpc::Status::OK);
    });
  }
  write(out, [this](bool written) {
    if (!written) {
      cancel_stream();
      return stop(true, false);
    }
    if (stream_ == nullptr) open_decode(/*local=*/false);
    forward();
  });
}

void RequestRun::open_decode(bool local) {
  auto owned = std::make_unique<DecodeCall>(shared_from_this(), calls_.context_until_request_deadline(), calls_.control());
  DecodeCall* call = owned.get();
  DecodeRequest& r = call->request;
  r.set_request_id(id_);
  r.set_capability(capability_);
  r.set_commit_timeout_ms(options_.commit_timeout.count());
  if (local) {
    r.mutable_local()->mutable_prompt()->Assign(prompt_.begin(), prompt_.end());
    *r.mutable_local()->mutable_sampling() = request_.sampling();
    r.mutable_local()->set_cache_salt(cache_salt_);
  }
  streams_.emplace(call, std::move(owned));
  stream_ = call;
  ++in_flight_;  // until its OnDone
  decode().decode().async()->Decode(call->context.get(), &call->request, call);
  call->start();
}

void RequestRun::forward() {
  enter(RequestState::kStreaming);
  // D must keep the stream moving: a message within the progress timeout (the first one, after a
  // local prefill, within the prefill timeout), and answer its health checks.
  stream_->watch = std::make_unique<CallWatchdog::Watch>(
      watchdog_, decode(), *stream_->context, local_ ? options_.prefill_timeout : options_.progress_timeout,
      options_.progress_timeout);
  read_next();
}

void RequestRun::read_next() { stream_->read(); }

void RequestRun::decode_read(DecodeCall* call, bool ok) {
  call->reading = false;
  // The stream's end (OnDone follows with its status), or a read of a cancelled stream: no more
  // reads. After the last message, it is read to its end.
  if (!ok || call != stream_) return call->let_go();
  if (call->last_seen) return call->read();
  call->watch->progress();
  const DecodeResponse& m = call->message;
  GenerateResponse out;
  out.mutable_token_ids()->CopyFrom(m.token_ids());
  out.set_text(m.text());
  out.mutable_logprobs()->CopyFrom(m.logprobs());
  tokens_sent_ += m.token_ids_size();
  if (m.finish_reason() != baton::v1::FINISH_REASON_UNSPECIFIED) {
    if (local_) {
      prefill_ms_ = m.prefill_ms();
      cached_prompt_tokens_ = m.num_cached_prompt_tokens();
      hidden_states_path_ = m.hidden_states_path();
    }
    out.set_finish_reason(m.finish_reason());
    out.set_error(m.error());
    if (m.has_stop_token()) out.set_stop_token(m.stop_token());
    if (m.has_stop_string()) out.set_stop_string(m.stop_string());
    if (!first_token_at_ && m.token_ids_size() > 0) first_token_at_ = Clock::now();
    fill_usage(out.mutable_usage(), &m);
    set_kv_transfer_params(out);
    call->last_seen = true;
    call->watch.reset();
    call->read();  // to its end, whose status is only logged
    return write(out, [this](bool written) {
      if (!written) return stop(false, false);
      finish(grpc::Status::OK);
    });
  }
  if (out.token_ids_size() == 0 && out.text().empty()) return read_next();
  if (!first_token_at_) first_token_at_ = Clock::now();
  write(out, [this](bool written) {
    if (!written) {
      cancel_stream();
      return stop(true, false);
    }
    read_next();
  });
}

void RequestRun::decode_ended(DecodeCall* call, const grpc::Status& status) {
  // Only after let_go(): the run reads this stream no more.
  call->ended = status;
  close_stream(call);
}

void RequestRun::close_stream(DecodeCall* call) {
  std::unique_ptr<DecodeCall> owned = std::move(streams_.at(call));
  streams_.erase(call);
  --in_flight_;
  const grpc::Status status = *call->ended;
  const bool current = call == stream_;
  if (current) stream_ = nullptr;
  if (call->last_seen && !status.ok()) {
    spdlog::warn("router: {} sent the last message of {} and then ended with {}: {}", decode_address_,
                 call->request.request_id(), grpc_code_name(status.error_code()), status.error_message());
  }
  if (!current || call->last_seen) {  // cancelled, or done with
    owned.reset();  // before the run may end: its CallScope names the request's control
    return finish_if_settled();
  }

  // This attempt's stream ended before its last message.
  grpc::Status s = status;
  const bool fired = call->watch != nullptr && call->watch->fired();
  if (fired) {
    count_watchdog(*call->watch);
    s = grpc::Status(grpc::StatusCode::UNAVAILABLE, call->watch->why());
  }
  owned.reset();
  if (calls_.stopped()) return stop(true, false);
  // Stalled or frozen: the node's blocks are freed by the abort (or, for a frozen node, by the
  // cancelled stream once it runs again).
  if (fired) abort_on(chosen_->decode);
  if (s.ok()) s = grpc::Status(grpc::StatusCode::INTERNAL, "its Decode stream ended without a finish reason");
  // Before any token reached the client (local prefill), another decode node may still serve it.
  attempt_failed({calls_.failed(decode(), s), !first_token_at_ && node_fault(s.error_code()), decode().address()});
}

void RequestRun::cancel_stream() {
  if (stream_ == nullptr) return;
  DecodeCall* call = stream_;
  stream_ = nullptr;
  // D aborts a cancelled Decode; the stream is forgotten at its OnDone.
  call->watch.reset();
  call->context->TryCancel();
  if (!call->reading) call->let_go();  // else its read ends (not ok) and lets go
}

void RequestRun::attempt_failed(Outcome outcome) {
  if (outcome.retry && !calls_.stopped()) {
    const bool draining = refused_by_draining_node(outcome.status);
    int& budget = draining ? draining_retries_left_ : retries_left_;
    if (budget > 0) {
      --budget;
      stats_.retries.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("router: request {} failed before its first token ({}); trying {} without {}", rid_,
                   outcome.status.error_message(), draining ? "another node" : "once more", outcome.exclude);
      excluded_.insert(outcome.exclude);
      if (!draining || previous_.ok()) previous_ = outcome.status;
      return next_attempt();
    }
  }
  finish(outcome.status);
}

void RequestRun::stop(bool abort_decode, bool abort_prefill) {
  stats_.requests_aborted.fetch_add(1, std::memory_order_relaxed);
  if (chosen_ && abort_decode) abort_on(chosen_->decode);
  if (chosen_ && abort_prefill && chosen_->prefill) abort_on(chosen_->prefill);
  if (calls_.client_gone()) return finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request"));
  if (calls_.aborted_by_rpc()) {
    GenerateResponse out;
    out.set_finish_reason(baton::v1::FINISH_REASON_ABORT);
    out.set_error(calls_.control().reason());
    fill_usage(out.mutable_usage(), nullptr);
    return write(out, [this](bool) { finish(grpc::Status::OK); });
  }
  if (calls_.request_deadline_passed()) {
    return finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                               str_cat("request ", client_id_, " did not finish within --request-timeout-ms (",
                                       options_.request_timeout.count(), " ms)")));
  }
  // The client's stream failed without its call being cancelled (yet).
  finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client's stream closed"));
}

void RequestRun::finish(const grpc::Status& status) {
  if (final_) return;
  enter(status.ok() ? RequestState::kFinished : RequestState::kFailed);
  final_ = status;
  finish_if_settled();
}

void RequestRun::finish_if_settled() {
  if (!final_ || in_flight_ > 0 || done_called_) return;
  done_called_ = true;
  chosen_.reset();  // its claims
  FlowDone done = std::move(done_);
  done(*final_);
}

void RequestRun::write(GenerateResponse& response, std::function<void(bool)> then) {
  response.set_request_id(client_id_);
  writing_ = true;
  sink_.write(response, [self = shared_from_this(), then = std::move(then)](bool sent) {
    self->post([run = self.get(), then, sent] {
      run->writing_ = false;
      then(sent);
    });
  });
}

void RequestRun::release_decode() { calls_.release(chosen_->decode, id_, capability_, settle()); }

void RequestRun::abort_on(const std::shared_ptr<Node>& node) {
  if (!calls_.abort(node, id_, capability_, settle())) --in_flight_;  // sent before: nothing to wait for
}

void RequestRun::fill_usage(baton::v1::Usage* usage, const DecodeResponse* last) {
  const auto now = Clock::now();
  usage->set_prompt_tokens(last != nullptr && last->num_prompt_tokens() > 0 ? last->num_prompt_tokens()
                                                                             : static_cast<std::int32_t>(prompt_.size()));
  usage->set_completion_tokens(last != nullptr && last->num_output_tokens() > 0
                                   ? last->num_output_tokens()
                                   : static_cast<std::int32_t>(tokens_sent_));
  usage->set_cached_prompt_tokens(cached_prompt_tokens_);
  if (last != nullptr) *usage->mutable_speculation() = last->speculation();
  auto* t = usage->mutable_timings();
  if (first_token_at_) t->set_time_to_first_token_ms(ms_between(received_, *first_token_at_));
  t->set_end_to_end_ms(ms_between(received_, now));
  t->set_prefill_ms(prefill_ms_);
  t->set_kv_transfer_ms(kv_transfer_ms_);
  if (first_call_at_) t->set_router_queue_ms(ms_between(received_, *first_call_at_));
  usage->set_prefill_node(prefill_address_);
  usage->set_decode_node(decode_address_);
  usage->set_local_prefill(local_);
  usage->set_transport(transport_);
}

}  // namespace

void RequestFlow::start(const baton::v1::GenerateRequest& request, const std::string& client_id,
                        const std::string& node_id, std::uint64_t cache_salt, const std::vector<std::int32_t>& prompt,
                        RequestControl& control, const grpc::ServerContextBase* server, ResponseSink& sink,
                        Clock::time_point received, FlowDone done) const {
  auto run = std::make_shared<RequestRun>(pool_, stats_, watchdog_, options_, request, client_id, node_id, cache_salt,
                                          prompt, control, server, sink, received, std::move(done));
  run->start();
}

}  // namespace baton::router
