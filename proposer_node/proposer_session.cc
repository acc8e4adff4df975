#include "proposer_node/proposer_session.h"

#include <algorithm>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton {

absl::StatusOr<std::unique_ptr<ProposerSession>> ProposerSession::open(ProposerPool& pool,
                                                                       const node::v1::ProposerHello& hello,
                                                                       std::int64_t max_context_tokens) {
  if (hello.protocol_version() != kProposerProtocolVersion) {
    return absl::FailedPreconditionError(str_cat("proposer protocol version ", hello.protocol_version(),
                                                 " from node '", hello.node_id(), "' is not supported (this sidecar "
                                                 "speaks ", kProposerProtocolVersion, ")"));
  }
  auto config = SpeculativeConfig::parse(hello.speculative_config(), NodeRole::kColocated);
  if (!config.ok()) {
    return absl::InvalidArgumentError(str_cat("hello from node '", hello.node_id(), "': ", config.status().message()));
  }
  std::unique_ptr<ProposerSession> s(new ProposerSession());
  BATON_ASSIGN_OR_RETURN(s->shared_, pool.acquire(*config));
  s->node_id_ = hello.node_id();
  s->scope_ = pool.options().scope;
  s->k_ = config->num_speculative_tokens;
  s->store_ = ContextStore(max_context_tokens);
  spdlog::info("node '{}' connected ({}; {} cache)", s->node_id_, s->shared_->description,
               s->scope_ == CacheScope::kGlobal ? "global" : "per-node");
  return s;
}

ProposerSession::~ProposerSession() {
  if (!shared_) return;
  std::lock_guard lock(shared_->mu);
  for (const SidecarContext& c : store_.take_all()) shared_->proposer->remove_request(c.key, /*finished=*/false);
  spdlog::info("node '{}' disconnected", node_id_);
}

node::v1::ProposerHelloAck ProposerSession::ack() const {
  node::v1::ProposerHelloAck a;
  a.set_protocol_version(kProposerProtocolVersion);
  a.set_cache_scope(scope_ == CacheScope::kGlobal ? "global" : "node");
  return a;
}

void ProposerSession::drop(const SidecarContext& c, bool finished) {
  if (finished && c.proposed_len < c.tokens.size()) {
    // Tokens accepted since the last proposal: let the proposer see them (no drafts) so a finished
    // response enters the global cache whole.
    std::vector<std::int32_t> none;
    ProposalRequest p;
    p.key = c.key;
    p.tokens = c.tokens;
    p.prompt_len = c.prompt_len;
    p.max_drafts = 0;
    p.drafts = &none;
    (void)shared_->proposer->propose(std::span<ProposalRequest>(&p, 1));
  }
  shared_->proposer->remove_request(c.key, finished);
}

absl::Status ProposerSession::apply(const node::v1::ContextDelta& d) {
  const std::span<const std::int32_t> tokens(d.tokens().data(), static_cast<std::size_t>(d.tokens_size()));
  switch (d.kind()) {
    case node::v1::ContextDelta::ADD: {
      std::optional<SidecarContext> replaced;
      const std::uint64_t key = shared_->next_key++;
      BATON_RETURN_IF_ERROR(store_.add(d.request(), tokens, d.prompt_len(), key, &replaced));
      if (replaced) drop(*replaced, /*finished=*/false);
      shared_->proposer->add_request(key, tokens.first(static_cast<std::size_t>(d.prompt_len())));
      return absl::OkStatus();
    }
    case node::v1::ContextDelta::APPEND:
      return store_.append(d.request(), tokens);
    case node::v1::ContextDelta::FINISH:
    case node::v1::ContextDelta::ABORT:
      if (std::optional<SidecarContext> c = store_.remove(d.request())) {
        drop(*c, d.kind() == node::v1::ContextDelta::FINISH);
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(str_cat("request ", d.request(), ": context delta kind ",
                                                static_cast<int>(d.kind()), " is not one of ADD, APPEND, FINISH, ABORT"));
  }
}

std::optional<node::v1::ProposerReply> ProposerSession::handle(const node::v1::ProposerRequest& request) {
  std::lock_guard lock(shared_->mu);
  // A delta that fails leaves its request unknown here; its proposal then says so and the node
  // resyncs it with an ADD.
  for (const node::v1::ContextDelta& d : request.deltas()) {
    if (absl::Status s = apply(d); !s.ok()) {
      spdlog::debug("node '{}': {}", node_id_, std::string(s.message()));
      if (d.kind() == node::v1::ContextDelta::APPEND) {
        if (std::optional<SidecarContext> c = store_.remove(d.request())) drop(*c, /*finished=*/false);
      }
    }
  }
  if (request.propose().empty()) return std::nullopt;

  node::v1::ProposerReply reply;
  reply.set_step(request.step());
  std::vector<ProposalRequest> batch;
  std::vector<std::vector<std::int32_t>> drafts(static_cast<std::size_t>(request.propose_size()));
  std::vector<node::v1::RequestDrafts*> out;
  for (int i = 0; i < request.propose_size(); ++i) {
    const node::v1::ProposeItem& item = request.propose(i);
    node::v1::RequestDrafts* r = reply.add_drafts();
    r->set_request(item.request());
    SidecarContext* c = store_.find(item.request());
    if (c == nullptr) {
      r->set_error(str_cat("request ", item.request(), " is not known here (resync it with an ADD)"));
      continue;
    }
    if (static_cast<std::int64_t>(c->tokens.size()) != item.num_tokens()) {
      r->set_error(str_cat("request ", item.request(), " has ", c->tokens.size(), " tokens here, the node has ",
                           item.num_tokens(), " (out of sync: resync it with an ADD)"));
      if (std::optional<SidecarContext> gone = store_.remove(item.request())) drop(*gone, /*finished=*/false);
      continue;
    }
    ProposalRequest p;
    p.key = c->key;
    p.tokens = c->tokens;
    p.prompt_len = c->prompt_len;
    p.max_drafts = std::clamp(item.max_drafts(), 0, k_);
    p.drafts = &drafts[static_cast<std::size_t>(i)];
    c->proposed_len = c->tokens.size();
    batch.push_back(p);
    out.push_back(r);
  }
  if (!batch.empty()) {
    (void)shared_->proposer->propose(batch);  // per-request errors are in each status
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].status.ok()) {
        out[i]->set_error(std::string(batch[i].status.message()));
        continue;
      }
      out[i]->mutable_tokens()->Add(batch[i].drafts->begin(), batch[i].drafts->end());
    }
  }
  return reply;
}

}  // namespace baton
