#include "prefill_node/prefill_service.h"

#include <algorithm>

#include "common/draining.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "node_common/convert.h"
#include "proto/status_convert.h"
#include "spdlog/spdlog.h"
#include "security/capability.h"
#include "security/grpc_credentials.h"

namespace baton {

namespace {

double ms_between(EngineClock::time_point a, EngineClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

const char* prefill_state_name(PrefillState s) {
  switch (s) {
    case PrefillState::kChecking: return "checking";
    case PrefillState::kPrefilling: return "prefilling";
    case PrefillState::kFlushing: return "flushing";
    case PrefillState::kCommitting: return "committing";
    case PrefillState::kAnswered: return "answered";
  }
  return "?";
}

struct PrefillService::Job {
  std::string id;
  grpc::ServerUnaryReactor* reactor = nullptr;
  node::v1::PrefillResponse* response = nullptr;
  node::v1::KvDestination destination;
  std::vector<PeerPool> peer_pools;  // by pool index
  std::unique_ptr<kv::KvTransfer> transfer;
  std::int32_t prompt_len = 0;
  std::uint64_t cache_salt = 0;
  bool wants_logprobs = false;
  EngineClock::time_point received{};
  EngineClock::time_point handed_off_at{};
  std::atomic<PrefillState> state{PrefillState::kChecking};  // prefill_service.h has the transitions
  std::atomic<bool> aborted{false};
  std::atomic<bool> parked{false};   // the engine holds its KV for us (release when done)
  std::atomic<bool> finishing{false};  // transfer->finish() was called (exactly once)
  bool counted_queued = true;        // loop thread: still in queued_prefill_tokens_
  std::optional<HandoffRecord> record;
  // The asynchronous CheckReservation call to D, before anything else.
  grpc::ClientContext check_context;
  node::v1::CheckReservationRequest check_request;
  node::v1::CheckReservationResponse check_response;
  // The asynchronous Commit call to D.
  grpc::ClientContext commit_context;
  node::v1::CommitRequest commit_request;
  node::v1::CommitResponse commit_response;
};

namespace {

// Answers one Prefill call; a cancelled call (client gone, deadline) aborts the request.
class PrefillReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit PrefillReactor(std::function<void()> on_cancel) : on_cancel_(std::move(on_cancel)) {}
  void OnCancel() override { on_cancel_(); }
  void OnDone() override { delete this; }

 private:
  std::function<void()> on_cancel_;
};

}  // namespace

PrefillService::PrefillService(std::unique_ptr<Engine> engine, const Tokenizer* tokenizer,
                               std::map<std::string, std::unique_ptr<kv::KvSender>> senders, NodeIdentity identity,
                               PrefillNodeOptions options)
    : identity_(std::move(identity)), options_(options), tokenizer_(tokenizer), senders_(std::move(senders)) {
  fingerprint_ = engine->layout_fingerprint();
  for (const KvPoolInfo& p : engine->kv_pools()) {
    const auto index = static_cast<std::int32_t>(pools_.size());
    if (p.name == "draft") draft_pool_ = index;
    if (p.state != nullptr) {
      state_pool_ = index;
      state_ = p.state;
    }
    pools_.push_back(p.cache);
  }
  block_size_ = pools_.front()->layout().block_size;
  engine->set_kv_layer_callback([this](std::int32_t layer, std::span<const KvLayerWrite> writes) { on_layer(layer, writes); });
  loop_ = std::make_unique<EngineLoop>(
      std::move(engine), [this](std::vector<RequestOutput>&& outs) { on_outputs(std::move(outs)); },
      [](const absl::Status& s) { spdlog::error("prefill engine step failed: {}", s.ToString()); });
}

PrefillService::~PrefillService() { stop(); }

void PrefillService::set_address(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  identity_.address = address;
}

void PrefillService::stop() {
  if (loop_) loop_->stop();
}

std::size_t PrefillService::running_requests() {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void PrefillService::cancel_running(const std::string& reason) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const std::shared_ptr<Job>& job : jobs) {
    job->aborted = true;  // no more KV is sent; a transfer that completes does not commit
    if (!job->parked) loop_->post([id = job->id](Engine& e) { e.abort(id); });
    respond(job, grpc::Status(grpc::StatusCode::UNAVAILABLE, reason));
  }
}

std::shared_ptr<PrefillService::Job> PrefillService::find(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

grpc::ServerUnaryReactor* PrefillService::Prefill(grpc::CallbackServerContext* ctx, const node::v1::PrefillRequest* request,
                                                  node::v1::PrefillResponse* response) {
  const std::string id = request->request_id();
  auto* reactor = new PrefillReactor([this, id] { abort_job(id); });
  const auto reject = [&](grpc::StatusCode code, const std::string& message) {
    spdlog::warn("prefill '{}' refused: {}", id, message);
    reactor->Finish(grpc::Status(code, message));
    return reactor;
  };
  if (draining_) {
    return reject(grpc::StatusCode::UNAVAILABLE,
                  str_cat("this prefill ", kNodeDrainingPhrase, " (shutting down): place the request on another node"));
  }
  if (id.empty()) return reject(grpc::StatusCode::INVALID_ARGUMENT, "request_id is empty");
  const node::v1::KvDestination& dest = request->destination();
  // The fingerprint first: no byte may move into a decode node whose layout differs.
  auto peer_fp = KvLayoutFingerprint::parse(dest.layout_fingerprint());
  if (!peer_fp.ok()) {
    return reject(grpc::StatusCode::INVALID_ARGUMENT,
                  str_cat("destination.layout_fingerprint of decode node ", dest.decode_address(), ": ",
                          peer_fp.status().message()));
  }
  if (absl::Status s = fingerprint_.check_compatible(*peer_fp); !s.ok()) {
    return reject(grpc::StatusCode::FAILED_PRECONDITION,
                  str_cat("decode node ", dest.decode_address(), " has a different KV layout; nothing was sent: ", s.message()));
  }
  const auto prompt_len = static_cast<std::int32_t>(request->prompt_size());
  const auto blocks_needed = static_cast<std::size_t>((prompt_len + block_size_ - 1) / block_size_);
  if (static_cast<std::size_t>(dest.kv_blocks_size()) != blocks_needed) {
    return reject(grpc::StatusCode::INVALID_ARGUMENT,
                  str_cat("destination.kv_blocks names ", dest.kv_blocks_size(), " blocks; a prompt of ", prompt_len,
                          " tokens needs ", blocks_needed));
  }
  if (static_cast<std::size_t>(dest.pool_num_blocks_size()) != pools_.size()) {
    return reject(grpc::StatusCode::INVALID_ARGUMENT, str_cat("destination.pool_num_blocks has ", dest.pool_num_blocks_size(),
                                                              " pools; this node has ", pools_.size()));
  }
  auto job = std::make_shared<Job>();
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    // The state pool's "blocks" are D's state groups (its layout is the local one's).
    job->peer_pools.push_back(
        PeerPool{pools_[i] != nullptr ? pools_[i]->layout() : KvCacheLayout{}, dest.pool_num_blocks(static_cast<int>(i))});
  }
  const auto check_blocks = [&](const google::protobuf::RepeatedField<std::int32_t>& blocks, std::int32_t pool) {
    return std::all_of(blocks.begin(), blocks.end(), [&](std::int32_t b) {
      return pool >= 0 && b >= 0 && b < job->peer_pools[static_cast<std::size_t>(pool)].num_blocks;
    });
  };
  if (!check_blocks(dest.kv_blocks(), 0) || !check_blocks(dest.proposer_blocks(), draft_pool_)) {
    return reject(grpc::StatusCode::INVALID_ARGUMENT, "destination names a block outside the decode node's pools");
  }
  if (state_pool_ >= 0 && (dest.state_group() < 0 || dest.state_group() >= dest.pool_num_blocks(state_pool_))) {
    return reject(grpc::StatusCode::INVALID_ARGUMENT,
                  str_cat("destination.state_group is ", dest.state_group(), "; the decode node has ",
                          dest.pool_num_blocks(state_pool_), " recurrent state groups"));
  }
  if (senders_.find(dest.transport()) == senders_.end()) {
    return reject(grpc::StatusCode::FAILED_PRECONDITION,
                  str_cat("this prefill node cannot send KV over '", dest.transport(), "'"));
  }
  if (dest.capability().empty()) {
    return reject(grpc::StatusCode::INVALID_ARGUMENT, "destination.capability is empty (the decode node's Reserve gives it)");
  }
  job->id = id;
  job->reactor = reactor;
  job->response = response;
  job->destination = dest;
  job->prompt_len = prompt_len;
  job->cache_salt = request->cache_salt();
  job->received = EngineClock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!jobs_.emplace(id, job).second) {
      job->state = PrefillState::kAnswered;  // never answered through respond(): this call is refused here
      return reject(grpc::StatusCode::ALREADY_EXISTS, str_cat("request '", id, "' is already being prefilled here"));
    }
  }
  count(PrefillState::kChecking);
  queued_prefill_tokens_ += prompt_len;
  std::vector<std::int32_t> prompt(request->prompt().begin(), request->prompt().end());
  SamplingParams params = sampling_from_proto(request->sampling());
  job->wants_logprobs = params.logprobs >= 0;
  check_destination(job, std::move(prompt), std::move(params));
  (void)ctx;
  return reactor;
}

void PrefillService::check_destination(const std::shared_ptr<Job>& job, std::vector<std::int32_t> prompt,
                                       SamplingParams params) {
  const node::v1::KvDestination& dest = job->destination;
  node::v1::CheckReservationRequest& r = job->check_request;
  r.set_request_id(job->id);
  r.set_capability(dest.capability());
  r.set_transport(dest.transport());
  r.set_transport_descriptor(dest.transport_descriptor());
  *r.mutable_kv_blocks() = dest.kv_blocks();
  *r.mutable_proposer_blocks() = dest.proposer_blocks();
  r.set_state_group(dest.state_group());
  {
    std::lock_guard<std::mutex> lock(mu_);
    r.set_sender_address(identity_.address);  // where D asks whether we still write, if it must
  }
  job->check_context.set_deadline(std::chrono::system_clock::now() + options_.commit_timeout);
  const std::string address = dest.decode_address();
  auto on_checked = [this, job, address, prompt = std::move(prompt), params = std::move(params)](grpc::Status s) mutable {
    if (s.ok()) s = begin_transfer(job);
    if (s.ok() && !advance(*job, PrefillState::kChecking, PrefillState::kPrefilling)) {
      s = grpc::Status(grpc::StatusCode::CANCELLED, "answered while the destination was checked");
    }
    if (!s.ok()) {
      queued_prefill_tokens_ -= job->prompt_len;
      job->counted_queued = false;
      respond(job, s);
      return;
    }
    start_prefill(job, std::move(prompt), std::move(params));
  };
  decode_stub(address).async()->CheckReservation(
      &job->check_context, &job->check_request, &job->check_response,
      [address, on_checked = std::move(on_checked)](grpc::Status s) mutable {
        if (!s.ok()) {
          // Nothing was sent: the decode node did not confirm this destination as one the router
          // introduced (or cannot be reached).
          s = grpc::Status(s.error_code(), str_cat("decode node ", address, " did not confirm the destination; nothing "
                                                   "was sent: ", s.error_message()));
        }
        on_checked(s);
      });
}

grpc::Status PrefillService::begin_transfer(const std::shared_ptr<Job>& job) {
  const node::v1::KvDestination& dest = job->destination;
  auto transfer = senders_.at(dest.transport())
                      ->begin(kv::TransferTarget{job->id, dest.decode_address(), dest.decode_instance_id(),
                                                 dest.transport_descriptor(), dest.capability()});
  if (!transfer.ok()) {
    if (observer_.failed) observer_.failed("begin");
    return grpc::Status(to_grpc_status(transfer.status()).error_code(),
                        str_cat("KV transfer to decode node ", dest.decode_address(), ": ", transfer.status().message()));
  }
  job->transfer = std::move(*transfer);
  return grpc::Status::OK;
}

void PrefillService::start_prefill(const std::shared_ptr<Job>& job, std::vector<std::int32_t> prompt,
                                   SamplingParams params) {
  loop_->post([this, job, prompt = std::move(prompt), params = std::move(params)](Engine& e) mutable {
    if (job->aborted) {
      queued_prefill_tokens_ -= job->prompt_len;
      job->counted_queued = false;
      respond(job, grpc::Status(grpc::StatusCode::CANCELLED, "aborted before the prefill began"));
      return;
    }
    AddRequestOptions o;
    o.prefill_only = true;
    o.cache_salt = job->cache_salt;
    if (absl::Status s = e.add_request(job->id, std::move(prompt), params, o); !s.ok()) {
      queued_prefill_tokens_ -= job->prompt_len;
      job->counted_queued = false;
      respond(job, to_grpc_status(s));
    }
  });
}

void PrefillService::on_layer(std::int32_t layer, std::span<const KvLayerWrite> writes) {
  std::vector<kv::Copy> copies;
  for (const KvLayerWrite& w : writes) {
    std::shared_ptr<Job> job = find(*w.request_id);
    if (!job || job->aborted) continue;
    copies.clear();
    std::span<const std::int32_t> peer_blocks(job->destination.kv_blocks().data(),
                                              static_cast<std::size_t>(job->destination.kv_blocks_size()));
    plan_positions(*pools_[0], job->peer_pools[0], layer, w.start, w.num_tokens, w.blocks, peer_blocks, copies);
    job->transfer->put(0, copies);
  }
}

void PrefillService::on_outputs(std::vector<RequestOutput>&& outputs) {
  for (RequestOutput& o : outputs) {
    std::shared_ptr<Job> job = find(o.request_id);
    if (!job) continue;
    if (job->counted_queued && (o.handoff || o.finished)) {
      queued_prefill_tokens_ -= job->prompt_len;
      job->counted_queued = false;
    }
    node::v1::PrefillResponse& r = *job->response;
    if (!o.new_tokens.empty()) {
      r.set_first_token(o.new_tokens.front().token);
      if (job->wants_logprobs) *r.mutable_logprob() = token_logprob_to_proto(o.new_tokens.front());
      r.set_text(o.new_text);
      r.set_num_cached_prompt_tokens(o.num_cached_prompt_tokens);
      r.set_prefill_ms(ms_between(job->received, EngineClock::now()));
    }
    if (!o.hidden_states_path.empty()) r.set_hidden_states_path(o.hidden_states_path);
    if (o.handoff) {
      hand_off(job, o);
    } else if (o.finished) {
      if (o.new_tokens.empty() || o.finish_reason == FinishReason::kError || o.finish_reason == FinishReason::kAbort) {
        const bool aborted = o.finish_reason == FinishReason::kAbort;
        respond(job, grpc::Status(aborted ? grpc::StatusCode::CANCELLED : grpc::StatusCode::INTERNAL,
                                  aborted ? std::string("aborted") : str_cat("prefill failed: ", o.error)));
      } else {
        // The first token finished the request (EOS, a stop, max_tokens 1): nothing to hand off.
        r.set_finished(true);
        r.set_finish_reason(finish_reason_to_proto(o.finish_reason));
        if (o.stop_token) r.set_stop_token(*o.stop_token);
        if (o.stop_string) r.set_stop_string(*o.stop_string);
        respond(job, grpc::Status::OK);
      }
    }
  }
}

bool PrefillService::advance(Job& job, PrefillState from, PrefillState to) {
  PrefillState expected = from;
  if (!job.state.compare_exchange_strong(expected, to)) {
    spdlog::debug("prefill '{}': not {} -> {}: it is {}", job.id, prefill_state_name(from), prefill_state_name(to),
                  prefill_state_name(expected));
    return false;
  }
  spdlog::debug("prefill '{}': {} -> {}", job.id, prefill_state_name(from), prefill_state_name(to));
  count(to);
  return true;
}

void PrefillService::hand_off(const std::shared_ptr<Job>& job, RequestOutput& out) {
  job->parked = true;
  if (!advance(*job, PrefillState::kPrefilling, PrefillState::kFlushing)) {
    // Answered meanwhile (a drain, a cancelled call): the engine parked the KV for nobody.
    loop_->post([id = job->id](Engine& e) { (void)e.release(id); });
    return;
  }
  job->handed_off_at = EngineClock::now();
  HandoffRecord& h = *out.handoff;
  // Blocks served by the prefix cache were not written by this forward, so the layer callback
  // did not send them; the proposer's KV goes whole.
  std::vector<kv::Copy> copies;
  std::span<const std::int32_t> peer_blocks(job->destination.kv_blocks().data(),
                                            static_cast<std::size_t>(job->destination.kv_blocks_size()));
  const auto cached = static_cast<std::size_t>(h.num_cached_prompt_tokens / block_size_);
  if (cached > 0) {
    plan_blocks(*pools_[0], job->peer_pools[0], std::span<const BlockId>(h.kv_blocks).first(cached), peer_blocks, copies);
    job->transfer->put(0, copies);
  }
  if (!h.proposer.kv_blocks.empty()) {
    if (draft_pool_ < 0 || static_cast<std::size_t>(job->destination.proposer_blocks_size()) < h.proposer.kv_blocks.size()) {
      respond(job, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                str_cat("decode node reserved ", job->destination.proposer_blocks_size(),
                                        " draft blocks; the proposer's KV needs ", h.proposer.kv_blocks.size())));
      return;
    }
    copies.clear();
    std::span<const std::int32_t> peer_draft(job->destination.proposer_blocks().data(),
                                             static_cast<std::size_t>(job->destination.proposer_blocks_size()));
    const auto draft = static_cast<std::size_t>(draft_pool_);
    plan_blocks(*pools_[draft], job->peer_pools[draft], h.proposer.kv_blocks, peer_draft, copies);
    job->transfer->put(draft_pool_, copies);
  }
  if (state_ != nullptr) {
    // The recurrent state after the prompt, in the slot the record names (P and D have the same
    // slots: the fingerprints matched).
    if (h.state_group < 0 || h.state_slot < 0 || h.state_slot >= state_->layout().slots) {
      respond(job, grpc::Status(grpc::StatusCode::INTERNAL,
                                str_cat("the hand-off of '", job->id, "' names recurrent state group ", h.state_group,
                                        " slot ", h.state_slot)));
      return;
    }
    copies.clear();
    plan_state(*state_, job->peer_pools[static_cast<std::size_t>(state_pool_)].num_blocks, h.state_group,
               job->destination.state_group(), h.state_slot, copies);
    job->transfer->put(state_pool_, copies);
  }
  job->record = std::move(h);
  if (options_.hold_transfers) {
    spdlog::warn("holding the KV transfer of '{}' (the fault-injection hook of baton-prefill-testing)", job->id);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.kv_transfer_timeout;
  job->finishing = true;
  job->transfer->finish(deadline, [this, job](absl::Status s) { on_transfer_done(job, s); });
}

void PrefillService::on_transfer_done(const std::shared_ptr<Job>& job, const absl::Status& status) {
  if (job->aborted) {
    respond(job, grpc::Status(grpc::StatusCode::CANCELLED, "aborted during the KV transfer"));
    return;
  }
  if (!status.ok()) {
    if (observer_.failed) observer_.failed("transfer");
    respond(job, grpc::Status(to_grpc_status(status).error_code(),
                              str_cat("KV transfer to decode node ", job->destination.decode_address(), " failed: ",
                                      status.message())));
    return;
  }
  job->response->set_kv_bytes(job->transfer->bytes_posted());
  spdlog::debug("prefill '{}': {} KV bytes to {} over the {} path", job->id, job->transfer->bytes_posted(),
                job->destination.decode_address(), job->transfer->path());
  if (!advance(*job, PrefillState::kFlushing, PrefillState::kCommitting)) return;  // answered meanwhile
  commit(job);
}

node::v1::DecodeNode::Stub& PrefillService::decode_stub(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  // Addresses come from callers: a bounded cache (the calls in flight hold their channels).
  constexpr std::size_t kMaxCachedStubs = 256;
  if (decode_stubs_.size() >= kMaxCachedStubs && !decode_stubs_.contains(address)) decode_stubs_.clear();
  auto& stub = decode_stubs_[address];
  if (!stub) {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(256 << 20);
    stub = node::v1::DecodeNode::NewStub(grpc::CreateCustomChannel(address, security::cluster_channel_credentials(), args));
  }
  return *stub;
}

void PrefillService::commit(const std::shared_ptr<Job>& job) {
  // The record names D's reservation by its request id; its block ids are ours (only their number
  // must match D's).
  job->commit_request.set_prefill_instance_id(identity_.instance_id);
  job->commit_request.set_capability(job->destination.capability());
  *job->commit_request.mutable_record() = handoff_to_proto(*job->record);
  job->commit_context.set_deadline(std::chrono::system_clock::now() + options_.commit_timeout);
  const std::string address = job->destination.decode_address();
  decode_stub(address).async()->Commit(&job->commit_context, &job->commit_request, &job->commit_response,
                                       [this, job, address](grpc::Status s) {
                                         if (!s.ok()) {
                                           if (observer_.failed) observer_.failed("commit");
                                           // D is gone: drop its cached KV connection now (on the UCX
                                           // shared-memory path that also unmaps its pools here).
                                           if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
                                             for (auto& [kind, sender] : senders_) sender->invalidate(address);
                                           }
                                           respond(job, grpc::Status(s.error_code(), str_cat("commit on decode node ", address,
                                                                                             ": ", s.error_message())));
                                           return;
                                         }
                                         const double ms = ms_between(job->handed_off_at, EngineClock::now());
                                         job->response->set_kv_transfer_ms(ms);
                                         if (observer_.succeeded) observer_.succeeded(ms / 1000.0);
                                         respond(job, grpc::Status::OK);
                                       });
}

void PrefillService::respond(const std::shared_ptr<Job>& job, const grpc::Status& status) {
  const PrefillState was = job->state.exchange(PrefillState::kAnswered);
  if (was == PrefillState::kAnswered) return;
  spdlog::debug("prefill '{}': {} -> answered", job->id, prefill_state_name(was));
  count(PrefillState::kAnswered);
  if (job->transfer) kv_bytes_sent_ += job->transfer->bytes_posted();
  // Puts posted and never flushed (answered before the hand-off's flush) may still be landing in
  // the decode node's memory: flush them, and answer D's Abort probe "found" until they have.
  const bool flush = job->transfer && !job->finishing.exchange(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.erase(job->id);
    if (flush) flushing_.emplace(job->id, job->destination.capability());
  }
  if (flush) {
    job->transfer->finish(std::chrono::steady_clock::now() + options_.kv_transfer_timeout, [this, job](const absl::Status&) {
      std::lock_guard<std::mutex> lock(mu_);
      flushing_.erase(job->id);
    });
  }
  if (job->parked) {
    loop_->post([id = job->id](Engine& e) { (void)e.release(id); });
  }
  if (!status.ok()) spdlog::info("prefill '{}': {}", job->id, status.error_message());
  job->reactor->Finish(status);
}

void PrefillService::abort_job(const std::string& id) {
  std::shared_ptr<Job> job = find(id);
  if (!job) return;
  job->aborted = true;
  // Not handed off yet: the engine drops it (its final output answers the call). Handed off: the
  // transfer's completion sees the flag, skips the commit and releases the KV.
  if (!job->parked) loop_->post([id](Engine& e) { e.abort(id); });
}

grpc::ServerUnaryReactor* PrefillService::Abort(grpc::CallbackServerContext* ctx, const node::v1::NodeAbortRequest* request,
                                                node::v1::NodeAbortResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::shared_ptr<Job> job = find(request->request_id());
  response->set_found(job != nullptr);
  if (!job) {
    // Answered already, its writes still flushing: nothing to abort, but not over either.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = flushing_.find(request->request_id());
    response->set_found(it != flushing_.end() && security::capability_matches(it->second, request->capability()));
  }
  if (job) {
    // Only the router that placed the request holds its token.
    absl::Status s = security::check_capability(job->destination.capability(), request->capability(), "Abort",
                                                request->request_id());
    if (!s.ok()) {
      response->set_found(false);
      reactor->Finish(to_grpc_status(s));
      return reactor;
    }
    abort_job(request->request_id());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PrefillService::Info(grpc::CallbackServerContext* ctx, const node::v1::InfoRequest*,
                                               node::v1::NodeInfo* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  loop_->post([this, reactor, response](Engine& e) {
    *response = current_info(e);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

node::v1::NodeInfo PrefillService::current_info(Engine& e) {
  NodeIdentity identity;
  {
    std::lock_guard<std::mutex> lock(mu_);
    identity = identity_;
  }
  node::v1::NodeInfo info = make_node_info(e, identity, queued_prefill_tokens_.load());
  info.mutable_load()->set_kv_bytes_sent(kv_bytes_sent_.load());
  return info;
}

std::optional<node::v1::NodeInfo> PrefillService::info_snapshot(std::chrono::milliseconds timeout) {
  auto info = loop_->call([this](Engine& e) { return current_info(e); });
  if (info.wait_for(timeout) != std::future_status::ready) return std::nullopt;
  return info.get();
}

}  // namespace baton
