#include "decode_node/write_grants.h"

#include "grpcpp/grpcpp.h"
#include "security/capability.h"
#include "security/grpc_credentials.h"
#include "spdlog/spdlog.h"

namespace baton {

WriteGrants::WriteGrants(StateQuery states, EndWrites end_writes, WriteGrantsOptions options)
    : states_(std::move(states)), end_writes_(std::move(end_writes)), options_(options), thread_([this] { run(); }) {}

WriteGrants::~WriteGrants() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::uint64_t WriteGrants::add(Grant grant) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = next_ticket_++;
    grants_.emplace(ticket, Entry{std::move(grant), 0});
  }
  wake_.notify_all();
  return ticket;
}

std::optional<std::uint64_t> WriteGrants::take(const std::string& capability) {
  if (capability.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = grants_.begin(); it != grants_.end(); ++it) {
    if (security::capability_matches(it->second.grant.capability, capability)) {
      const std::uint64_t ticket = it->first;
      grants_.erase(it);
      return ticket;
    }
  }
  return std::nullopt;
}

std::size_t WriteGrants::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return grants_.size();
}

void WriteGrants::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (grants_.empty()) {
      wake_.wait(lock, [&] { return stopping_ || !grants_.empty(); });
      continue;
    }
    wake_.wait_for(lock, options_.probe_interval, [&] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    probe_round();
    lock.lock();
  }
}

void WriteGrants::probe_round() {
  std::vector<std::uint64_t> tickets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [ticket, entry] : grants_) tickets.push_back(ticket);
  }
  const std::optional<std::vector<WriteGrantState>> states = states_(tickets);
  if (!states || states->size() != tickets.size()) return;
  for (std::size_t i = 0; i < tickets.size(); ++i) {
    Entry entry;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = grants_.find(tickets[i]);
      if (it == grants_.end()) continue;  // taken meanwhile
      if ((*states)[i] == WriteGrantState::kNone) {
        grants_.erase(it);  // committed, or reclaimed at the quarantine's limit
        continue;
      }
      if ((*states)[i] == WriteGrantState::kReserved) continue;  // live: its commit ends it
      entry = it->second;
    }
    const bool done = writer_done(entry);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = grants_.find(tickets[i]);
      if (it == grants_.end()) continue;
      if (!done) {
        it->second.unavailable = entry.unavailable;
        continue;
      }
      grants_.erase(it);
    }
    spdlog::info("request '{}': its sender {} is done with it; its quarantined KV blocks are free again",
                 entry.grant.request_id, entry.grant.sender_address);
    end_writes_(tickets[i]);
  }
}

bool WriteGrants::writer_done(Entry& entry) {
  if (entry.grant.sender_address.empty()) return false;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.probe_timeout);
  node::v1::NodeAbortRequest request;
  request.set_request_id(entry.grant.request_id);
  request.set_capability(entry.grant.capability);
  node::v1::NodeAbortResponse response;
  const grpc::Status s = stub(entry.grant.sender_address).Abort(&ctx, request, &response);
  if (s.ok()) {
    entry.unavailable = 0;
    return !response.found();  // found: it was aborted now; the next probe sees it gone
  }
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) return ++entry.unavailable >= options_.dead_after;
  entry.unavailable = 0;  // no answer (a stopped process) or a refusal: still a writer
  return false;
}

node::v1::PrefillNode::Stub& WriteGrants::stub(const std::string& address) {
  constexpr std::size_t kMaxCachedStubs = 256;  // addresses come from senders: bounded
  if (stubs_.size() >= kMaxCachedStubs && !stubs_.contains(address)) stubs_.clear();
  auto& s = stubs_[address];
  if (!s) s = node::v1::PrefillNode::NewStub(grpc::CreateChannel(address, security::cluster_channel_credentials()));
  return *s;
}

}  // namespace baton
