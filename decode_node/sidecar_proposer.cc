#include "decode_node/sidecar_proposer.h"

#include "common/status.h"

namespace baton {

SidecarProposer::SidecarProposer(SidecarProposerOptions options, std::unique_ptr<Proposer> local,
                                 std::shared_ptr<SidecarStats> stats)
    : options_(std::move(options)),
      local_(std::move(local)),
      stats_(std::move(stats)),
      connection_(options_.connection, stats_.get()) {}

void SidecarProposer::add_request(RequestKey key, std::span<const std::int32_t> prompt) {
  local_->add_request(key, prompt);
  Context& c = contexts_[key];
  if (c.epoch != 0) {  // a reset of a request the sidecar holds: its ADD will replace it there
    c = Context{};
  }
  c.prompt_len = static_cast<std::int32_t>(prompt.size());
}

void SidecarProposer::remove_request(RequestKey key, bool finished) {
  local_->remove_request(key, finished);
  auto it = contexts_.find(key);
  if (it == contexts_.end()) return;
  const Context c = it->second;
  contexts_.erase(it);
  if (c.epoch == 0) return;
  // Sent at once: the global cache learns a finished response before this node's next step,
  // which may be a long way off on an idle node.
  node::v1::ProposerRequest m;
  node::v1::ContextDelta* d = m.add_deltas();
  d->set_request(key);
  d->set_kind(finished ? node::v1::ContextDelta::FINISH : node::v1::ContextDelta::ABORT);
  (void)connection_.send(c.epoch, std::move(m));
}

absl::Status SidecarProposer::fallback(std::span<ProposalRequest> batch) {
  ++stats_->fallback_steps;
  return local_->propose(batch);
}

absl::Status SidecarProposer::propose(std::span<ProposalRequest> batch) {
  const std::optional<std::uint64_t> epoch = connection_.epoch();
  if (!epoch) return fallback(batch);

  node::v1::ProposerRequest m;
  m.set_step(++step_);
  bool wants_drafts = false;
  for (const ProposalRequest& req : batch) {
    Context& c = contexts_[req.key];
    if (req.prompt_len >= 0) c.prompt_len = std::min<std::int32_t>(req.prompt_len, static_cast<std::int32_t>(req.tokens.size()));
    if (c.epoch != *epoch || req.tokens.size() < c.sent) {
      node::v1::ContextDelta* d = m.add_deltas();
      d->set_request(req.key);
      d->set_kind(node::v1::ContextDelta::ADD);
      d->mutable_tokens()->Add(req.tokens.begin(), req.tokens.end());
      d->set_prompt_len(c.prompt_len);
    } else if (req.tokens.size() > c.sent) {
      node::v1::ContextDelta* d = m.add_deltas();
      d->set_request(req.key);
      d->set_kind(node::v1::ContextDelta::APPEND);
      d->mutable_tokens()->Add(req.tokens.begin() + static_cast<std::ptrdiff_t>(c.sent), req.tokens.end());
    }
    c.epoch = *epoch;
    c.sent = req.tokens.size();
    if (req.max_drafts > 0) {
      node::v1::ProposeItem* item = m.add_propose();
      item->set_request(req.key);
      item->set_max_drafts(req.max_drafts);
      item->set_num_tokens(static_cast<std::int64_t>(req.tokens.size()));
      wants_drafts = true;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  if (!connection_.send(*epoch, std::move(m))) return fallback(batch);
  if (!wants_drafts) {
    for (ProposalRequest& req : batch) {
      req.drafts->clear();
      if (req.draft_probs != nullptr) req.draft_probs->clear();
    }
    return absl::OkStatus();
  }
  std::optional<node::v1::ProposerReply> reply = connection_.await(step_, start + options_.budget);
  if (!reply) {
    ++stats_->budget_misses;
    return fallback(batch);
  }
  stats_->record_rtt(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  ++stats_->remote_steps;

  absl::flat_hash_map<RequestKey, const node::v1::RequestDrafts*> by_key;
  for (const node::v1::RequestDrafts& d : reply->drafts()) by_key[d.request()] = &d;
  std::vector<ProposalRequest> missing;
  std::vector<std::size_t> missing_at;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    ProposalRequest& req = batch[i];
    req.drafts->clear();
    if (req.draft_probs != nullptr) req.draft_probs->clear();
    if (req.max_drafts <= 0) continue;
    auto it = by_key.find(req.key);
    if (it == by_key.end() || !it->second->error().empty()) {
      // Out of sync or refused there: resync it next step, draft it here now.
      contexts_[req.key].epoch = 0;
      missing.push_back(req);
      missing_at.push_back(i);
      continue;
    }
    for (std::int32_t t : it->second->tokens()) {
      if (static_cast<std::int32_t>(req.drafts->size()) >= req.max_drafts || t < 0 || t >= options_.vocab_size) break;
      req.drafts->push_back(t);
    }
    ++stats_->remote_proposals;
  }
  if (missing.empty()) return absl::OkStatus();
  absl::Status s = local_->propose(missing);
  for (std::size_t j = 0; j < missing.size(); ++j) batch[missing_at[j]].status = missing[j].status;
  return s;
}

}  // namespace baton
