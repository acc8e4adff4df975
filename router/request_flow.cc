#include "router/request_flow.h"

#include <memory>
#include <optional>
#include <set>

#include "common/draining.h"
#include "common/status.h"
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

grpc::Status to_grpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
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

// A Decode stream with its context, registered with the request's control while open.
struct DecodeStream {
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<RequestControl::CallScope> scope;
  std::unique_ptr<grpc::ClientReader<DecodeResponse>> reader;

  // Cancels the stream (D aborts a cancelled Decode) and waits for its end.
  void cancel() {
    if (!reader) return;
    context->TryCancel();
    (void)reader->Finish();
    reader.reset();
    scope.reset();
    context.reset();
  }
  ~DecodeStream() { cancel(); }
};

// One request's run: its state, timings and the messages it writes.
class RequestRun {
 public:
  RequestRun(NodePool& pool, RouterStats& stats, CallWatchdog& watchdog, const FlowOptions& options,
             const baton::v1::GenerateRequest& request,
             const std::string& client_id, const std::string& node_id, std::uint64_t cache_salt,
             const std::vector<std::int32_t>& prompt, RequestControl& control, const grpc::ServerContextBase* server,
             ResponseSink& sink, Clock::time_point received)
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
        calls_(pool, stats, control, server, received + options.request_timeout, options.abort_timeout) {}

  grpc::Status run();

 private:
  void note_site(const ChosenNodes& chosen, const std::string& id);
  Outcome run_disaggregated(ChosenNodes& chosen, const std::string& id);
  Outcome run_local(ChosenNodes& chosen, const std::string& id);
  void open_decode(Node& decode, const std::string& id, bool local, DecodeStream& stream);
  // Forwards D's stream to the client until its last message.
  Outcome forward(Node& decode, const std::string& id, DecodeStream& stream);
  // The request stopped (Abort RPC, client gone, deadline): abort it where it runs.
  Outcome stop(Node* decode, Node* prefill, const std::string& id);
  bool write(GenerateResponse& response);
  void fill_usage(baton::v1::Usage* usage, const DecodeResponse* last);
  void count_watchdog(const CallWatchdog::Watch& watch) {
    (watch.reason() == CallWatchdog::Watch::Reason::kNoProgress ? stats_.calls_stalled : stats_.calls_node_unreachable)
        .fetch_add(1, std::memory_order_relaxed);
  }
  void mark_first_call() {
    if (!first_call_at_) first_call_at_ = Clock::now();
  }

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
  NodeCalls calls_;

  // What the usage in the last message reports.
  std::string decode_address_, prefill_address_, transport_;
  std::string capability_;  // the current attempt's token (node.proto): D's from Reserve, or ours for a local prefill
  bool local_ = false;
  double prefill_ms_ = 0, kv_transfer_ms_ = 0;
  std::int32_t cached_prompt_tokens_ = 0;
  std::int64_t tokens_sent_ = 0;
  std::optional<Clock::time_point> first_call_at_, first_token_at_;
};

grpc::Status RequestRun::run() {
  std::set<std::string> excluded;
  grpc::Status previous;
  int retries_left = 1;
  int draining_retries_left = kMaxDrainingRetries;
  for (int attempt = 1;; ++attempt) {
    PlacementRequest placement;
    placement.prompt_len = static_cast<std::int64_t>(prompt_.size());
    placement.force_local_prefill = request_.force_local_prefill();
    placement.local_prefill_max_tokens = options_.local_prefill_max_tokens;
    placement.local_fallback = options_.local_fallback;
    absl::StatusOr<ChosenNodes> chosen = pool_.choose(placement, excluded);
    if (!chosen.ok()) {
      if (attempt == 1) return to_grpc(chosen.status());
      // Nowhere to retry: the first failure is what the client needs to know.
      return grpc::Status(previous.error_code(),
                          str_cat(previous.error_message(), " (not retried: ", chosen.status().message(), ")"));
    }
    if (attempt == 1) {
      const auto& info = chosen->decode_info;
      absl::Status limits = check_prompt_limits(prompt_, request_.sampling(), info.vocab_size(), info.max_model_len(),
                                                chosen->decode->label());
      if (!limits.ok()) return to_grpc(limits);
    }
    const std::string id = str_cat(rid_, ".", attempt);
    note_site(*chosen, id);
    Outcome outcome = chosen->prefill ? run_disaggregated(*chosen, id) : run_local(*chosen, id);
    if (outcome.retry && !calls_.stopped()) {
      const bool draining = refused_by_draining_node(outcome.status);
      int& budget = draining ? draining_retries_left : retries_left;
      if (budget > 0) {
        --budget;
        stats_.retries.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("router: request {} failed before its first token ({}); trying {} without {}", rid_,
                     outcome.status.error_message(), draining ? "another node" : "once more", outcome.exclude);
        excluded.insert(outcome.exclude);
        if (!draining || previous.ok()) previous = outcome.status;
        continue;
      }
    }
    return outcome.status;
  }
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

void RequestRun::open_decode(Node& decode, const std::string& id, bool local, DecodeStream& stream) {
  stream.context = calls_.context_until_request_deadline();
  stream.scope = std::make_unique<RequestControl::CallScope>(calls_.control(), *stream.context);
  DecodeRequest r;
  r.set_request_id(id);
  r.set_capability(capability_);
  r.set_commit_timeout_ms(options_.commit_timeout.count());
  if (local) {
    r.mutable_local()->mutable_prompt()->Assign(prompt_.begin(), prompt_.end());
    *r.mutable_local()->mutable_sampling() = request_.sampling();
    r.mutable_local()->set_cache_salt(cache_salt_);
  }
  stream.reader = decode.decode().Decode(stream.context.get(), r);
}

Outcome RequestRun::run_disaggregated(ChosenNodes& chosen, const std::string& id) {
  Node& d = *chosen.decode;
  Node& p = *chosen.prefill;
  mark_first_call();
  capability_.clear();  // until D's Reserve gives this attempt's

  KvDestination destination;
  {
    auto context = calls_.context(options_.node_timeout);
    RequestControl::CallScope scope(calls_.control(), *context);
    ReserveRequest r;
    r.set_request_id(id);
    r.set_prompt_len(static_cast<std::int32_t>(prompt_.size()));
    r.set_transport(pair_transport(chosen.prefill_info, chosen.decode_info));  // "": D's preferred
    grpc::Status s = d.decode().Reserve(context.get(), r, &destination);
    if (!s.ok()) {
      if (calls_.stopped()) return stop(&d, nullptr, id);
      return {calls_.failed(d, s), node_fault(s.error_code()), d.address()};
    }
  }
  transport_ = destination.transport();
  capability_ = destination.capability();

  DecodeStream stream;
  if (options_.open_decode_before_prefill) open_decode(d, id, /*local=*/false, stream);

  PrefillResponse first;
  grpc::Status s;
  {
    auto context = calls_.context(options_.prefill_timeout);
    RequestControl::CallScope scope(calls_.control(), *context);
    PrefillRequest r;
    r.set_request_id(id);
    r.mutable_prompt()->Assign(prompt_.begin(), prompt_.end());
    *r.mutable_sampling() = request_.sampling();
    *r.mutable_destination() = destination;
    r.set_cache_salt(cache_salt_);
    // No progress limit (the prefill's own deadline bounds it), but a P that stops answering its
    // health checks ends the call, and the request is retried elsewhere.
    CallWatchdog::Watch watch(watchdog_, p, *context, std::chrono::milliseconds(0), std::chrono::milliseconds(0));
    s = p.prefill().Prefill(context.get(), r, &first);
    if (!s.ok() && watch.fired()) {
      count_watchdog(watch);
      s = grpc::Status(grpc::StatusCode::UNAVAILABLE, watch.why());
    }
  }
  chosen.prefill_claim.reset();
  if (!s.ok()) {
    stream.cancel();
    if (calls_.stopped()) return stop(&d, &p, id);
    calls_.release(d, id, capability_);
    const bool rejected = s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
    if (!rejected) calls_.abort(p, id, capability_);
    return {calls_.failed(p, s), !rejected, p.address()};
  }

  prefill_ms_ = first.prefill_ms();
  kv_transfer_ms_ = first.kv_transfer_ms();
  cached_prompt_tokens_ = first.num_cached_prompt_tokens();
  GenerateResponse out;
  out.add_token_ids(first.first_token());
  out.set_text(first.text());
  if (first.has_logprob()) *out.add_logprobs() = first.logprob();
  tokens_sent_ = 1;
  first_token_at_ = Clock::now();
  if (first.finished()) {
    // Nothing was committed: the reservation is the router's to free.
    stream.cancel();
    calls_.release(d, id, capability_);
    out.set_finish_reason(first.finish_reason());
    if (first.has_stop_token()) out.set_stop_token(first.stop_token());
    if (first.has_stop_string()) out.set_stop_string(first.stop_string());
    fill_usage(out.mutable_usage(), nullptr);
    if (!write(out)) return stop(nullptr, nullptr, id);
    return {grpc::Status::OK};
  }
  if (!write(out)) {
    stream.cancel();
    return stop(&d, nullptr, id);
  }
  if (!stream.reader) open_decode(d, id, /*local=*/false, stream);
  return forward(d, id, stream);
}

Outcome RequestRun::run_local(ChosenNodes& chosen, const std::string& id) {
  Node& d = *chosen.decode;
  mark_first_call();
  transport_.clear();
  capability_ = security::new_capability();  // later aborts of the request on D present it
  DecodeStream stream;
  open_decode(d, id, /*local=*/true, stream);
  return forward(d, id, stream);
}

Outcome RequestRun::forward(Node& d, const std::string& id, DecodeStream& stream) {
  // D must keep the stream moving: a message within the progress timeout (the first one, after a
  // local prefill, within the prefill timeout), and answer its health checks.
  CallWatchdog::Watch watch(watchdog_, d, *stream.context, local_ ? options_.prefill_timeout : options_.progress_timeout,
                            options_.progress_timeout);
  DecodeResponse m;
  while (stream.reader->Read(&m)) {
    watch.progress();
    GenerateResponse out;
    out.mutable_token_ids()->CopyFrom(m.token_ids());
    out.set_text(m.text());
    out.mutable_logprobs()->CopyFrom(m.logprobs());
    tokens_sent_ += m.token_ids_size();
    if (m.finish_reason() != baton::v1::FINISH_REASON_UNSPECIFIED) {
      if (local_) {
        prefill_ms_ = m.prefill_ms();
        cached_prompt_tokens_ = m.num_cached_prompt_tokens();
      }
      out.set_finish_reason(m.finish_reason());
      out.set_error(m.error());
      if (m.has_stop_token()) out.set_stop_token(m.stop_token());
      if (m.has_stop_string()) out.set_stop_string(m.stop_string());
      if (!first_token_at_ && m.token_ids_size() > 0) first_token_at_ = Clock::now();
      fill_usage(out.mutable_usage(), &m);
      const bool written = write(out);
      grpc::Status end = stream.reader->Finish();
      stream.reader.reset();
      if (!end.ok()) {
        spdlog::warn("router: {} sent the last message of {} and then ended with {}: {}", d.label(), id,
                     grpc_code_name(end.error_code()), end.error_message());
      }
      if (!written) return stop(nullptr, nullptr, id);
      return {grpc::Status::OK};
    }
    if (out.token_ids_size() == 0 && out.text().empty()) continue;
    if (!first_token_at_) first_token_at_ = Clock::now();
    if (!write(out)) {
      stream.cancel();
      return stop(&d, nullptr, id);
    }
  }
  grpc::Status s = stream.reader->Finish();
  stream.reader.reset();
  if (calls_.stopped()) return stop(&d, nullptr, id);
  if (watch.fired()) {
    count_watchdog(watch);
    // Stalled or frozen: the node's blocks are freed by the abort (or, for a frozen node, by the
    // cancelled stream once it runs again).
    s = grpc::Status(grpc::StatusCode::UNAVAILABLE, watch.why());
    calls_.abort(d, id, capability_);
  }
  if (s.ok()) s = grpc::Status(grpc::StatusCode::INTERNAL, "its Decode stream ended without a finish reason");
  // Before any token reached the client (local prefill), another decode node may still serve it.
  return {calls_.failed(d, s), !first_token_at_ && node_fault(s.error_code()), d.address()};
}

Outcome RequestRun::stop(Node* decode, Node* prefill, const std::string& id) {
  stats_.requests_aborted.fetch_add(1, std::memory_order_relaxed);
  if (decode != nullptr) calls_.abort(*decode, id, capability_);
  if (prefill != nullptr) calls_.abort(*prefill, id, capability_);
  if (calls_.client_gone()) return {grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request")};
  if (calls_.aborted_by_rpc()) {
    GenerateResponse out;
    out.set_finish_reason(baton::v1::FINISH_REASON_ABORT);
    out.set_error(calls_.control().reason());
    fill_usage(out.mutable_usage(), nullptr);
    (void)write(out);
    return {grpc::Status::OK};
  }
  if (calls_.request_deadline_passed()) {
    return {grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                         str_cat("request ", client_id_, " did not finish within --request-timeout-ms (",
                                 options_.request_timeout.count(), " ms)"))};
  }
  // The client's stream failed without its call being cancelled (yet).
  return {grpc::Status(grpc::StatusCode::CANCELLED, "the client's stream closed")};
}

bool RequestRun::write(GenerateResponse& response) {
  response.set_request_id(client_id_);
  return sink_.write(response);
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

grpc::Status RequestFlow::run(const baton::v1::GenerateRequest& request, const std::string& client_id,
                              const std::string& node_id, std::uint64_t cache_salt,
                              const std::vector<std::int32_t>& prompt, RequestControl& control,
                              const grpc::ServerContextBase* server, ResponseSink& sink,
                              Clock::time_point received) const {
  RequestRun run(pool_, stats_, watchdog_, options_, request, client_id, node_id, cache_salt, prompt, control, server,
                 sink, received);
  return run.run();
}

}  // namespace baton::router
