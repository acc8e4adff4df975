#include "decode_node/decode_service.h"

#include "common/draining.h"
#include "common/status.h"
#include "node_common/convert.h"
#include "proto/status_convert.h"
#include "security/capability.h"
#include "spdlog/spdlog.h"

namespace baton {

namespace {

node::v1::DecodeResponse to_message(const RequestOutput& o, bool logprobs, bool local) {
  node::v1::DecodeResponse m;
  for (const TokenOutput& t : o.new_tokens) {
    m.add_token_ids(t.token);
    if (logprobs) *m.add_logprobs() = token_logprob_to_proto(t);
  }
  m.set_text(o.new_text);
  if (!o.finished) return m;
  m.set_finish_reason(finish_reason_to_proto(o.finish_reason));
  m.set_error(o.error);
  if (o.stop_token) m.set_stop_token(*o.stop_token);
  if (o.stop_string) m.set_stop_string(*o.stop_string);
  m.set_num_prompt_tokens(o.num_prompt_tokens);
  m.set_hidden_states_path(o.hidden_states_path);
  m.set_num_cached_prompt_tokens(o.num_cached_prompt_tokens);
  m.set_num_output_tokens(o.num_output_tokens);
  m.mutable_speculation()->set_num_drafts(o.spec.num_drafts);
  m.mutable_speculation()->set_num_draft_tokens(o.spec.num_draft_tokens);
  m.mutable_speculation()->set_num_accepted_tokens(o.spec.num_accepted_tokens);
  m.mutable_speculation()->mutable_accepted_per_position()->Add(o.spec.accepted_per_position.begin(),
                                                                o.spec.accepted_per_position.end());
  m.mutable_speculation()->mutable_proposals_by_length()->Add(o.spec.proposals_by_length.begin(),
                                                              o.spec.proposals_by_length.end());
  m.mutable_speculation()->set_lossy(o.spec.lossy);
  if (local && o.first_token_time != EngineClock::time_point{}) {
    m.set_prefill_ms(std::chrono::duration<double, std::milli>(o.first_token_time - o.arrival_time).count());
  }
  return m;
}

grpc::Status draining_refusal() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      str_cat("this decode ", kNodeDrainingPhrase, " (shutting down): place the request on another node"));
}

node::v1::DecodeResponse error_message(const std::string& error) {
  node::v1::DecodeResponse m;
  m.set_finish_reason(v1::FINISH_REASON_ERROR);
  m.set_error(error);
  return m;
}

}  // namespace

DecodeService::DecodeService(std::unique_ptr<Engine> engine, NodeIdentity identity, DecodeNodeOptions options)
    : identity_(std::move(identity)), options_(options) {
  for (const KvPoolInfo& p : engine->kv_pools()) {
    const auto index = static_cast<std::int32_t>(regions_.size());
    if (p.name == "draft") draft_pool_ = index;
    if (p.state != nullptr) {
      state_pool_ = index;
      state_slots_ = p.state->layout().slots;
    }
    regions_.push_back(kv::MemoryRegion{p.name, p.transfer.base, p.transfer.bytes});
    geometries_.push_back(p.geometry);
    pool_blocks_.push_back(p.num_blocks);
  }
  loop_ = std::make_unique<EngineLoop>(
      std::move(engine), [this](std::vector<RequestOutput>&& outs) { on_outputs(std::move(outs)); },
      [](const absl::Status& s) { spdlog::error("decode engine step failed: {}", s.ToString()); });
  write_grants_ = make_write_grants();
}

DecodeService::~DecodeService() { stop(); }

void DecodeService::set_address(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  identity_.address = address;
}

void DecodeService::stop() {
  if (loop_) loop_->stop();
}

void DecodeService::start_draining() { draining_ = true; }

std::size_t DecodeService::running_requests() {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void DecodeService::cancel_running(const std::string& reason) {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, entry] : entries_) {
      if (entry.stream != nullptr) entry.stream->fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, reason));
      ids.push_back(id);
    }
    entries_.clear();
  }
  // An abort frees a reservation too; the final outputs find no entry and are dropped.
  for (const std::string& id : ids) {
    spdlog::warn("request '{}': cancelled: {}", id, reason);
    loop_->post([id](Engine& e) { e.abort(id); });
  }
}

void DecodeService::add_receiver(std::unique_ptr<kv::KvReceiver> receiver) {
  identity_.transports.emplace_back(receiver->kind());
  receivers_.push_back(std::move(receiver));
}

const kv::KvReceiver* DecodeService::receiver(const std::string& kind) const {
  if (kind.empty()) return receivers_.empty() ? nullptr : receivers_.front().get();
  for (const auto& r : receivers_) {
    if (r->kind() == kind) return r.get();
  }
  return nullptr;
}

absl::StatusOr<DecodeService::Entry*> DecodeService::owned_entry(const std::string& id, const std::string& capability,
                                                                  std::string_view what) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(str_cat(what, ": no request '", id, "' on this decode node (never reserved, released, "
                                       "finished or expired)"));
  }
  BATON_RETURN_IF_ERROR(security::check_capability(it->second.capability, capability, what, id));
  return &it->second;
}

grpc::ServerUnaryReactor* DecodeService::Reserve(grpc::CallbackServerContext* ctx, const node::v1::ReserveRequest* request,
                                                 node::v1::KvDestination* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (draining_) {
    reactor->Finish(draining_refusal());
    return reactor;
  }
  const kv::KvReceiver* recv = receiver(request->transport());
  if (recv == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 str_cat("this decode node does not receive KV over '", request->transport(), "'")));
    return reactor;
  }
  loop_->post([this, reactor, request, response, recv](Engine& e) {
    const std::string& id = request->request_id();
    if (id.empty()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request_id is empty"));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (entries_.contains(id)) {
        reactor->Finish(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, str_cat("request '", id, "' is already here")));
        return;
      }
    }
    auto r = e.reserve(id, request->prompt_len());
    if (!r.ok()) {
      reactor->Finish(to_grpc_status(r.status()));
      return;
    }
    response->set_request_id(id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      response->set_decode_address(identity_.address);
    }
    response->set_decode_instance_id(identity_.instance_id);
    response->set_transport(std::string(recv->kind()));
    response->set_transport_descriptor(recv->descriptor());
    response->set_layout_fingerprint(e.layout_fingerprint().serialize());
    response->mutable_kv_blocks()->Add(r->kv_blocks.begin(), r->kv_blocks.end());
    response->mutable_proposer_blocks()->Add(r->proposer_blocks.begin(), r->proposer_blocks.end());
    response->set_proposer_kv_positions(r->proposer_kv_positions);
    response->set_lease_ms(std::chrono::duration_cast<std::chrono::milliseconds>(r->deadline - EngineClock::now()).count());
    for (std::int32_t n : pool_blocks_) response->add_pool_num_blocks(n);
    if (r->state_group >= 0) response->set_state_group(r->state_group);
    Entry entry;
    entry.capability = security::new_capability();
    entry.kv_blocks.assign(r->kv_blocks.begin(), r->kv_blocks.end());
    entry.proposer_blocks.assign(r->proposer_blocks.begin(), r->proposer_blocks.end());
    entry.state_group = r->state_group;
    response->set_capability(entry.capability);
    entry.writable.resize(regions_.size());
    entry.writable[0].insert(r->kv_blocks.begin(), r->kv_blocks.end());
    if (draft_pool_ >= 0) entry.writable[draft_pool_].insert(r->proposer_blocks.begin(), r->proposer_blocks.end());
    if (state_pool_ >= 0 && r->state_group >= 0) {
      // Every slot of the group: the record names the one the state after the prompt is in.
      for (std::int32_t s = 0; s < state_slots_; ++s) entry.writable[state_pool_].insert(r->state_group * state_slots_ + s);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      entries_.emplace(id, std::move(entry));
    }
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* DecodeService::Commit(grpc::CallbackServerContext* ctx, const node::v1::CommitRequest* request,
                                                node::v1::CommitResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The sender commits once its writes are complete, whatever becomes of the commit: blocks it
  // was allowed to write are not quarantined for it any more (only its token finds the grant).
  if (std::optional<std::uint64_t> ticket = write_grants_->take(request->capability())) {
    loop_->post([t = *ticket](Engine& e) { e.end_writes(t); });
  }
  {
    // A commit without the reservation's token changes nothing (the reservation stays).
    std::lock_guard<std::mutex> lock(mu_);
    auto owned = owned_entry(request->record().request_id(), request->capability(), "commit");
    if (owned.ok() && (*owned)->phase != Phase::kReserved) {
      owned = absl::FailedPreconditionError(
          str_cat("commit of request '", request->record().request_id(), "': it is committed already"));
    }
    if (!owned.ok()) {
      spdlog::warn("commit refused: {}", owned.status().ToString());
      reactor->Finish(to_grpc_status(owned.status()));
      return reactor;
    }
  }
  auto record = handoff_from_proto(request->record());
  if (!record.ok()) {
    reactor->Finish(to_grpc_status(record.status()));
    return reactor;
  }
  loop_->post([this, reactor, record = std::move(*record)](Engine& e) {
    const std::string id = record.request_id;
    const absl::Status s = e.commit(id, record);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = entries_.find(id);
      if (it != entries_.end()) {
        if (s.ok()) {
          it->second.phase = Phase::kCommitted;
          it->second.writable.clear();
          it->second.logprobs = record.params.logprobs >= 0;
        } else {
          // The engine gave the reservation back; a waiting Decode stream ends with the reason.
          route(id, error_message(str_cat("the hand-off commit failed: ", s.message())), true);
        }
      }
    }
    if (!s.ok()) spdlog::warn("commit of '{}' refused: {}", id, s.ToString());
    reactor->Finish(to_grpc_status(s));
  });
  return reactor;
}

grpc::ServerWriteReactor<node::v1::DecodeResponse>* DecodeService::Decode(grpc::CallbackServerContext*,
                                                                          const node::v1::DecodeRequest* request) {
  const std::string id = request->request_id();
  auto* stream = new DecodeWriter();
  stream->set_handlers(
      [this, id, stream] {
        // The client went away: stop the request (an abort frees a reservation too).
        bool ours = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = entries_.find(id);
          if (it != entries_.end() && it->second.stream == stream) {
            entries_.erase(it);
            ours = true;
          }
        }
        if (ours) loop_->post([id](Engine& e) { e.abort(id); });
      },
      [this, id, stream] {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = entries_.find(id);
        if (it != entries_.end() && it->second.stream == stream) it->second.stream = nullptr;
      });
  std::lock_guard<std::mutex> lock(mu_);
  if (request->has_local()) {
    if (draining_) {
      stream->fail(draining_refusal());
      return stream;
    }
    if (id.empty() || entries_.contains(id)) {
      stream->fail(grpc::Status(id.empty() ? grpc::StatusCode::INVALID_ARGUMENT : grpc::StatusCode::ALREADY_EXISTS,
                                id.empty() ? std::string("request_id is empty") : str_cat("request '", id, "' is already here")));
      return stream;
    }
    SamplingParams params = sampling_from_proto(request->local().sampling());
    if (request->capability().empty()) {
      stream->fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                str_cat("local Decode of request '", id, "': no capability (later aborts need one)")));
      return stream;
    }
    Entry& entry = entries_[id];
    entry.phase = Phase::kLocal;
    entry.capability = request->capability();
    entry.stream = stream;
    entry.logprobs = params.logprobs >= 0;
    const std::int64_t n = ++local_prefills_;
    spdlog::info("request '{}': prefilling locally ({} prompt tokens; {} local prefills so far)", id,
                 request->local().prompt_size(), n);
    std::vector<std::int32_t> prompt(request->local().prompt().begin(), request->local().prompt().end());
    AddRequestOptions options;
    options.cache_salt = request->local().cache_salt();
    loop_->post([this, id, prompt = std::move(prompt), params = std::move(params), options](Engine& e) mutable {
      const absl::Status s = e.add_request(id, std::move(prompt), params, options);
      if (s.ok()) return;
      std::lock_guard<std::mutex> relock(mu_);
      auto it = entries_.find(id);
      if (it == entries_.end()) return;
      if (it->second.stream) it->second.stream->fail(to_grpc_status(s));
      entries_.erase(it);
    });
    return stream;
  }
  auto owned = owned_entry(id, request->capability(), "Decode stream");
  if (!owned.ok()) {
    stream->fail(to_grpc_status(owned.status()));
    return stream;
  }
  auto it = entries_.find(id);
  Entry& entry = it->second;
  if (entry.stream != nullptr) {
    stream->fail(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, str_cat("request '", id, "' already has a Decode stream")));
    return stream;
  }
  entry.stream = stream;
  while (!entry.buffered.empty()) {
    const bool last = entry.finished && entry.buffered.size() == 1;
    stream->push(std::move(entry.buffered.front()), last);
    entry.buffered.pop_front();
  }
  if (entry.finished) entries_.erase(it);
  return stream;
}

void DecodeService::route(const std::string& id, node::v1::DecodeResponse message, bool last) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;  // nobody wants it any more (cancelled, released)
  Entry& entry = it->second;
  if (entry.stream != nullptr) {
    entry.stream->push(std::move(message), last);
    if (last) entries_.erase(it);
    return;
  }
  entry.buffered.push_back(std::move(message));
  if (last) {
    entry.finished = true;
    entry.finished_at = EngineClock::now();
    entry.writable.clear();
  }
}

void DecodeService::drop_unclaimed(EngineClock::time_point now) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.finished && it->second.stream == nullptr && now - it->second.finished_at > options_.unclaimed_output_ttl) {
      spdlog::warn("request '{}': dropping its output, no Decode stream came for it", it->first);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

void DecodeService::on_outputs(std::vector<RequestOutput>&& outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const RequestOutput& o : outputs) {
    auto it = entries_.find(o.request_id);
    if (it == entries_.end()) continue;
    route(o.request_id, to_message(o, it->second.logprobs, it->second.phase == Phase::kLocal), o.finished);
  }
  drop_unclaimed(EngineClock::now());
}

grpc::ServerUnaryReactor* DecodeService::Release(grpc::CallbackServerContext* ctx, const node::v1::ReleaseRequest* request,
                                                 node::v1::ReleaseResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  loop_->post([this, reactor, request, response](Engine& e) {
    const std::string& id = request->request_id();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto owned = owned_entry(id, request->capability(), "Release");
      if (!owned.ok()) {
        // Nothing of it here is "not found"; someone else's reservation is not to be touched.
        if (owned.status().code() == absl::StatusCode::kNotFound) {
          response->set_found(false);
          reactor->Finish(grpc::Status::OK);
        } else {
          reactor->Finish(to_grpc_status(owned.status()));
        }
        return;
      }
    }
    response->set_found(e.release(id).ok());
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = entries_.find(id);
      if (it != entries_.end() && it->second.phase == Phase::kReserved) {
        if (it->second.stream) it->second.stream->fail(grpc::Status(grpc::StatusCode::CANCELLED, "the reservation was released"));
        entries_.erase(it);
      }
    }
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* DecodeService::Abort(grpc::CallbackServerContext* ctx, const node::v1::NodeAbortRequest* request,
                                               node::v1::NodeAbortResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  loop_->post([this, reactor, request, response](Engine& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto owned = owned_entry(request->request_id(), request->capability(), "Abort");
      if (!owned.ok()) {
        response->set_found(false);
        // Not here (finished already): nothing to do. Someone else's: refused.
        reactor->Finish(owned.status().code() == absl::StatusCode::kNotFound ? grpc::Status::OK
                                                                                : to_grpc_status(owned.status()));
        return;
      }
      response->set_found(true);
    }
    e.abort(request->request_id());  // its final output (reason abort) ends the stream
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* DecodeService::Info(grpc::CallbackServerContext* ctx, const node::v1::InfoRequest*,
                                              node::v1::NodeInfo* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  loop_->post([this, reactor, response](Engine& e) {
    *response = current_info(e);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

node::v1::NodeInfo DecodeService::current_info(Engine& e) {
  NodeIdentity identity;
  {
    std::lock_guard<std::mutex> lock(mu_);
    identity = identity_;
  }
  node::v1::NodeInfo info = make_node_info(e, identity, 0);
  info.mutable_load()->set_local_prefills(local_prefills_.load());
  if (options_.sidecar_stats) options_.sidecar_stats->fill(info.mutable_load()->mutable_proposer_sidecar());
  return info;
}

std::optional<node::v1::NodeInfo> DecodeService::info_snapshot(std::chrono::milliseconds timeout) {
  auto info = loop_->call([this](Engine& e) { return current_info(e); });
  if (info.wait_for(timeout) != std::future_status::ready) return std::nullopt;
  return info.get();
}

}  // namespace baton
