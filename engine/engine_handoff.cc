// The Engine's prefill/decode hand-off: parking prefilled requests under a lease (prefill role),
// reservations and commits (decode role), releases and lease expiry, write grants and the
// quarantine of blocks a remote writer may still write, and what transports need to see of the KV
// pools (regions, usage, the layout fingerprint).
#include "common/status.h"
#include "engine/engine.h"
#include "spdlog/spdlog.h"

namespace baton {

absl::StatusOr<HandoffRecord> Engine::make_handoff(Request* r) {
  HandoffRecord h;
  h.request_id = r->id;
  h.prompt.assign(r->prompt().begin(), r->prompt().end());
  h.params = r->params;
  h.seed = r->seed;
  h.cache_salt = r->blocks.salt();
  h.first_token = r->output().front();
  h.num_cached_prompt_tokens = r->num_cached_prompt;
  const auto prompt_blocks = static_cast<std::size_t>(BlockTable::blocks_for(r->prompt_len, config_.block_size));
  h.kv_blocks.assign(r->blocks.blocks().begin(), r->blocks.blocks().begin() + static_cast<std::ptrdiff_t>(prompt_blocks));
  h.state_group = r->state_group;
  h.state_slot = r->state_slot;
  if (speculator_) {
    BATON_ASSIGN_OR_RETURN(h.proposer, speculator_->proposer().export_state(r->key));
  }
  if (!mirrors_.empty()) download_whole_blocks(h);
  return h;
}

void Engine::download_whole_blocks(const HandoffRecord& h) {
  // The layer callback carried only what this request's forwards wrote: the blocks it took from
  // the prefix cache, and the proposer's KV, travel whole. (A prefix block another hand-off is
  // sending at the same time gets the same bytes again: its content does not change while cached.)
  const auto cached = static_cast<std::size_t>(h.num_cached_prompt_tokens / config_.block_size);
  mirror_spans_.clear();
  mirrors_[0].append_block_spans(std::span<const BlockId>(h.kv_blocks).first(std::min(cached, h.kv_blocks.size())),
                                 mirror_spans_);
  std::uint64_t fence = mirrors_[0].download(mirror_spans_);
  if (!h.proposer.kv_blocks.empty() && mirrors_.size() > 1) {
    mirror_spans_.clear();
    mirrors_[1].append_block_spans(h.proposer.kv_blocks, mirror_spans_);
    fence = mirrors_[1].download(mirror_spans_);
  }
  backend_->wait_for(fence);
}

void Engine::upload_reserved(const Request& r) {
  mirror_spans_.clear();
  mirrors_[0].append_block_spans(r.blocks.blocks(), mirror_spans_);
  mirrors_[0].upload(mirror_spans_);
  if (!r.proposer_blocks.empty() && mirrors_.size() > 1) {
    mirror_spans_.clear();
    mirrors_[1].append_block_spans(r.proposer_blocks, mirror_spans_);
    mirrors_[1].upload(mirror_spans_);
  }
}

void Engine::park_prefilled(std::vector<RequestOutput>& outs) {
  std::vector<Request*> done;
  for (Request* r : scheduler_->running()) {
    if (r->prefill_only && r->num_output() >= 1 && !r->finished()) done.push_back(r);
  }
  for (Request* r : done) {
    absl::StatusOr<HandoffRecord> h = make_handoff(r);
    if (!h.ok()) {
      fail(r, h.status(), outs);
      continue;
    }
    RequestOutput& o = output_for(r, outs);
    if (!o.new_tokens.empty()) {
      h->first_logprob = o.new_tokens.front().logprob;
      h->first_top_logprobs = o.new_tokens.front().top_logprobs;
    }
    // Its KV (and the proposer's) stay; the drafts the prefill-side proposer made do not travel:
    // the decode engine drafts the same ones itself.
    scheduler_->detach(r);
    r->drafts.clear();
    r->draft_probs.clear();
    r->needs_drafts = false;
    r->state = RequestState::kPrefilled;
    r->lease_deadline = now() + config_.handoff_lease;
    ++num_held_;
    o.handoff = std::move(*h);
    ++stats_.handoffs_exported;
  }
}

void Engine::release_held(Request* r) {
  --num_held_;
  if (r->state == RequestState::kReserved && r->write_grant != 0) {
    quarantine(r);
    return;
  }
  r->blocks.release_all(*pool_);
  free_state(*r);
  if (speculator_) speculator_->remove_request(*r, /*finished=*/false);
  r->state = RequestState::kFinished;
  drop(r);
}

void Engine::free_state(Request& r) {
  if (r.state_group >= 0) state_groups_->free(r.state_group);
  r.state_group = -1;
  r.state_slot = -1;
}

void Engine::quarantine(Request* r) {
  auto it = requests_.find(r->id);
  std::unique_ptr<Request> owned = std::move(it->second);
  requests_.erase(it);
  // Finished as a request (nothing can commit or abort it); its blocks stay where they are.
  r->state = RequestState::kFinished;
  r->lease_deadline = now() + config_.write_quarantine_limit;
  ++stats_.write_quarantines;
  spdlog::info("request '{}': reservation ended while its sender may still write it; its KV blocks ({} target, {} "
               "draft) are quarantined until the sender is done",
               r->id, r->blocks.num_blocks(), r->proposer_blocks.size());
  quarantined_.emplace(r->write_grant, std::move(owned));
}

void Engine::free_quarantined(Request& r) {
  r.blocks.release_all(*pool_);
  free_state(r);
  if (speculator_) speculator_->remove_request(r, /*finished=*/false);
}

absl::Status Engine::grant_writes(const std::string& id, std::uint64_t ticket) {
  Request* r = find(id);
  if (r == nullptr || r->state != RequestState::kReserved) {
    return absl::NotFoundError(str_cat("write grant: no reservation for request '", id, "'"));
  }
  if (ticket == 0) return absl::InvalidArgumentError("write grant: ticket 0 is not a ticket");
  if (r->write_grant != 0 && r->write_grant != ticket) {
    return absl::AlreadyExistsError(str_cat("write grant: request '", id, "' has a writer already"));
  }
  r->write_grant = ticket;
  return absl::OkStatus();
}

void Engine::end_writes(std::uint64_t ticket) {
  if (ticket == 0) return;
  if (auto q = quarantined_.find(ticket); q != quarantined_.end()) {
    free_quarantined(*q->second);
    quarantined_.erase(q);
    return;
  }
  for (auto& [id, r] : requests_) {
    if (r->write_grant == ticket) r->write_grant = 0;
  }
}

WriteGrantState Engine::write_grant_state(std::uint64_t ticket) const {
  if (ticket == 0) return WriteGrantState::kNone;
  if (quarantined_.contains(ticket)) return WriteGrantState::kQuarantined;
  for (const auto& [id, r] : requests_) {
    if (r->write_grant == ticket) return WriteGrantState::kReserved;
  }
  return WriteGrantState::kNone;
}

absl::Status Engine::release(const std::string& id) {
  Request* r = find(id);
  if (r == nullptr) return absl::NotFoundError(str_cat("release: no request '", id, "' (finished, or its lease expired)"));
  if (r->state != RequestState::kPrefilled && r->state != RequestState::kReserved) {
    return absl::FailedPreconditionError(str_cat("release: request '", id, "' is neither prefilled for a hand-off nor "
                                                 "reserved; abort() it instead"));
  }
  release_held(r);
  return absl::OkStatus();
}

void Engine::expire_leases(std::vector<RequestOutput>& outs) {
  if (num_held_ == 0 && quarantined_.empty()) return;
  const EngineClock::time_point t = now();
  for (auto q = quarantined_.begin(); q != quarantined_.end();) {
    if (q->second->lease_deadline > t) {
      ++q;
      continue;
    }
    spdlog::error("request '{}': its KV blocks were quarantined for {} ms and its sender never said it was done nor "
                  "was found gone; reclaiming them (a sender that still writes would corrupt their next user)",
                  q->second->id, config_.write_quarantine_limit.count());
    free_quarantined(*q->second);
    ++stats_.write_quarantines_expired;
    q = quarantined_.erase(q);
  }
  std::vector<Request*> expired;
  for (const auto& [id, r] : requests_) {
    if ((r->state == RequestState::kPrefilled || r->state == RequestState::kReserved) && r->lease_deadline <= t) {
      expired.push_back(r.get());
    }
  }
  for (Request* r : expired) {
    const bool reserved = r->state == RequestState::kReserved;
    RequestOutput o;
    o.request_id = r->id;
    o.finished = true;
    o.finish_reason = FinishReason::kError;
    o.error = str_cat(reserved ? "KV reservation" : "prefilled KV", " lease of ", config_.handoff_lease.count(),
                      " ms expired without ", reserved ? "a commit" : "a release",
                      reserved && r->write_grant != 0 ? "; its blocks are held until its sender is done with them"
                                                      : "; its blocks were reclaimed");
    spdlog::warn("request '{}': {}", r->id, o.error);
    r->finish_time = t;
    fill_counts(r, o);
    release_held(r);
    ++stats_.lease_expiries;
    outs.push_back(std::move(o));
  }
}

std::optional<EngineClock::time_point> Engine::next_deadline() const {
  std::optional<EngineClock::time_point> next;
  for (const auto& [ticket, r] : quarantined_) {
    if (!next || r->lease_deadline < *next) next = r->lease_deadline;
  }
  if (num_held_ == 0) return next;
  for (const auto& [id, r] : requests_) {
    if (r->state != RequestState::kPrefilled && r->state != RequestState::kReserved) continue;
    if (!next || r->lease_deadline < *next) next = r->lease_deadline;
  }
  return next;
}

absl::StatusOr<KvReservation> Engine::reserve(const std::string& id, std::int32_t prompt_len) {
  if (config_.role != NodeRole::kDecode) {
    return absl::FailedPreconditionError(str_cat("reserve: this engine runs in the ", node_role_name(config_.role),
                                                 " role; reservations are for decode engines"));
  }
  if (requests_.contains(id)) return absl::AlreadyExistsError(str_cat("reserve: request id '", id, "' is already in use"));
  if (prompt_len < 1 || prompt_len >= max_model_len_) {
    return absl::InvalidArgumentError(str_cat("reserve: prompt_len ", prompt_len, " outside [1, max_model_len ",
                                              max_model_len_, ")"));
  }
  auto r = std::make_unique<Request>(next_key_++, id, std::vector<std::int32_t>(static_cast<std::size_t>(prompt_len), 0),
                                     SamplingParams{}, 0, config_.block_size, now());
  if (!r->blocks.grow_to(*pool_, prompt_len)) {
    return absl::ResourceExhaustedError(str_cat("reserve: request '", id, "' needs ",
                                                BlockTable::blocks_for(prompt_len, config_.block_size),
                                                " KV blocks and ", pool_->num_available(), " are free"));
  }
  if (state_groups_) {
    r->state_group = state_groups_->allocate();
    if (r->state_group < 0) {
      r->blocks.release_all(*pool_);
      return absl::ResourceExhaustedError(str_cat("reserve: request '", id, "' needs a recurrent state group and all ",
                                                  state_groups_->num_groups(), " are held"));
    }
  }
  KvReservation res;
  res.request_id = id;
  res.prompt_len = prompt_len;
  res.kv_blocks.assign(r->blocks.blocks().begin(), r->blocks.blocks().end());
  res.state_group = r->state_group;
  if (speculator_) {
    absl::StatusOr<std::vector<BlockId>> blocks = speculator_->proposer().reserve_state(r->key, prompt_len);
    if (!blocks.ok()) {
      r->blocks.release_all(*pool_);
      free_state(*r);
      return absl::Status(blocks.status().code(), str_cat("reserve: request '", id, "': ", blocks.status().message()));
    }
    r->proposer_blocks = *blocks;
    res.proposer_blocks = std::move(*blocks);
    res.proposer_kv_positions = speculator_->proposer().handoff_kv_positions(prompt_len);
  }
  r->state = RequestState::kReserved;
  r->lease_deadline = now() + config_.handoff_lease;
  ++num_held_;
  res.deadline = r->lease_deadline;
  requests_.emplace(id, std::move(r));
  return res;
}

absl::Status Engine::commit(const std::string& id, const HandoffRecord& h) {
  Request* r = find(id);
  if (r == nullptr || r->state != RequestState::kReserved) {
    return absl::NotFoundError(str_cat("commit: no reservation for request '", id, "' (never reserved, released, or its "
                                       "lease expired)"));
  }
  // The sender commits once its writes are complete: they no longer hold the blocks.
  r->write_grant = 0;
  // Whatever is wrong with the record, the reservation does not outlive this call.
  const auto reject = [&](const std::string& what) {
    release_held(r);
    return absl::InvalidArgumentError(str_cat("commit of request '", id, "': ", what, "; its reservation was released"));
  };
  const ModelConfig& c = model_->config();
  if (h.request_id != id) return reject(str_cat("the record is for request '", h.request_id, "'"));
  if (static_cast<std::int32_t>(h.prompt.size()) != r->prompt_len) {
    return reject(str_cat("the record has a prompt of ", h.prompt.size(), " tokens, ", r->prompt_len, " were reserved"));
  }
  if (h.kv_blocks.size() != static_cast<std::size_t>(r->blocks.num_blocks())) {
    return reject(str_cat("the record names ", h.kv_blocks.size(), " KV blocks, ", r->blocks.num_blocks(), " were reserved"));
  }
  if (absl::Status s = h.params.validate(c.vocab_size); !s.ok()) return reject(std::string(s.message()));
  for (std::size_t i = 0; i < h.prompt.size(); ++i) {
    if (h.prompt[i] < 0 || h.prompt[i] >= c.vocab_size) {
      return reject(str_cat("prompt token ", i, " is ", h.prompt[i], ", outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  if (h.first_token < 0 || h.first_token >= c.vocab_size) {
    return reject(str_cat("first token ", h.first_token, " is outside the vocabulary [0, ", c.vocab_size, ")"));
  }
  if (static_cast<std::int64_t>(h.prompt.size()) + h.params.max_tokens > max_model_len_) {
    return reject(str_cat("prompt (", h.prompt.size(), " tokens) + max_tokens (", h.params.max_tokens,
                          ") exceeds max_model_len ", max_model_len_));
  }
  if (!h.params.stop.empty() && !decoder_factory_) return reject("stop strings need a tokenizer, and this model has none");
  if (state_cache_ && (h.state_slot < 0 || h.state_slot >= state_cache_->layout().slots)) {
    return reject(str_cat("the record's recurrent state slot is ", h.state_slot, "; this engine's groups have ",
                          state_cache_->layout().slots, " slots"));
  }

  // Every byte the prefill node sent is in the transfer regions now: move it into the pools.
  if (!mirrors_.empty()) upload_reserved(*r);
  r->params = h.params;
  r->seed = h.seed;
  r->blocks.set_salt(h.cache_salt);
  r->tokens = h.prompt;
  r->tokens.push_back(h.first_token);
  r->num_computed = r->prompt_len;
  if (state_cache_) r->state_slot = h.state_slot;  // the transport put the state there
  r->num_cached_prompt = h.num_cached_prompt_tokens;
  r->arrival = now();
  r->first_token_time = r->arrival;
  if (decoder_factory_) r->decoder = decoder_factory_();
  r->stop_checker = std::make_unique<StopChecker>(r->params, c.eos_token_ids, r->decoder.get());
  if (absl::Status s = constrain(*r); !s.ok()) return reject(std::string(s.message()));
  if (speculator_) {
    speculator_->add_request(*r);
    if (absl::Status s = speculator_->proposer().import_state(r->key, h.proposer, r->tokens); !s.ok()) {
      return reject(std::string(s.message()));
    }
  }
  // Committed: no longer held under a lease.
  --num_held_;
  r->state = RequestState::kRunning;
  ++stats_.handoffs_committed;
  // The first token was reported by the prefill engine: check it here only to bring the stop
  // checker (and the text already shown) up to date.
  const StopDecision d = r->stop_checker->check(r->output());
  r->text_sent = d.visible_len;
  if (d.reason != FinishReason::kNone) {
    finish(r, d.reason);
    RequestOutput o;
    o.request_id = id;
    o.finished = true;
    o.finish_reason = d.reason;
    o.stop_token = d.stop_token;
    o.stop_string = d.stop_string;
    fill_counts(r, o);
    drop(r);
    pending_outputs_.push_back(std::move(o));
    return absl::OkStatus();
  }
  r->needs_drafts = speculator_ != nullptr;
  scheduler_->add_ready(r);
  return absl::OkStatus();
}

std::vector<KvPoolInfo> Engine::kv_pools() const {
  std::vector<KvPoolInfo> pools;
  KvPoolInfo target;
  target.name = "target";
  target.cache = cache_.get();
  target.num_blocks = pool_->num_blocks();
  target.free = pool_->num_available();
  target.cached = pool_->num_cached();
  target.used = pool_->num_in_use();
  for (const auto& [id, r] : requests_) {
    if (r->state == RequestState::kPrefilled || r->state == RequestState::kReserved) target.reserved += r->blocks.num_blocks();
  }
  for (const auto& [ticket, r] : quarantined_) target.quarantined += r->blocks.num_blocks();
  target.transfer = mirrors_.empty() ? cache_->region() : mirrors_[0].region();
  target.geometry = cache_->geometry();
  pools.push_back(target);
  if (speculator_) {
    Proposer& p = speculator_->proposer();
    if (KvCache* cache = p.kv_cache(); cache != nullptr && p.kv_pool() != nullptr) {
      const KvBlockPool& pool = *p.kv_pool();
      KvPoolInfo draft;
      draft.name = "draft";
      draft.cache = cache;
      draft.num_blocks = pool.num_blocks();
      draft.free = pool.num_available();
      draft.cached = pool.num_cached();
      draft.used = pool.num_in_use();
      draft.transfer = mirrors_.size() < 2 ? cache->region() : mirrors_[1].region();
      draft.geometry = cache->geometry();
      pools.push_back(draft);
    }
  }
  if (state_cache_) {
    // No host mirror: a hybrid's engine refuses mirrored hand-offs (engine.cc).
    KvPoolInfo state;
    state.name = "state";
    state.state = state_cache_.get();
    state.num_blocks = state_groups_->num_groups();
    state.free = state_groups_->num_free();
    state.used = state.num_blocks - state.free;
    for (const auto& [id, r] : requests_) {
      if ((r->state == RequestState::kPrefilled || r->state == RequestState::kReserved) && r->state_group >= 0) {
        ++state.reserved;
      }
    }
    for (const auto& [ticket, r] : quarantined_) state.quarantined += r->state_group >= 0 ? 1 : 0;
    state.transfer = state_cache_->region();
    state.geometry = state_cache_->geometry();
    pools.push_back(state);
  }
  return pools;
}

KvLayoutFingerprint Engine::layout_fingerprint() const {
  KvLayoutFingerprint f;
  const ModelConfig& c = model_->config();
  f.pools.push_back(KvPoolFingerprint{"target", c.architecture_name, c.identity, model_->weights().matrix_dtype(),
                                      cache_->layout()});
  if (speculator_) {
    if (std::optional<KvPoolFingerprint> draft = speculator_->proposer().kv_fingerprint()) f.pools.push_back(*draft);
  }
  if (state_cache_) f.recurrent_state_slots = state_cache_->layout().slots;
  return f;
}

}  // namespace baton
