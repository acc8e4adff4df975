// ProposerPool: the sidecar's n-gram and suffix proposers (engine/spec), one per distinct
// proposer configuration, shared by every decode node stream that asks with that configuration.
// Sharing is what makes the suffix proposer's global tree global here: it holds the responses of
// the last max_cached_requests requests of ALL those nodes (FIFO by request, engine/spec/
// suffix_proposer.h), so one node's finished work drafts another node's similar requests.
// With CacheScope::kNode every stream gets its own proposer (per-node caches, for comparison).
//
// Thread-safety: a SharedProposer is used under its mutex; the pool itself is thread-safe.
// Must not: know about gRPC.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "engine/spec/config.h"
#include "engine/spec/proposer.h"

namespace baton {

enum class CacheScope { kGlobal, kNode };

struct ProposerPoolOptions {
  CacheScope scope = CacheScope::kGlobal;
  // Replaces the nodes' suffix_decoding_max_cached_requests: the sidecar owns the cache's memory.
  std::int32_t max_cached_requests = 10000;
};

struct SharedProposer {
  std::mutex mu;
  std::unique_ptr<Proposer> proposer;  // guarded by mu
  std::uint64_t next_key = 1;          // guarded by mu: keys of the contexts it holds
  std::string description;
};

class ProposerPool {
 public:
  explicit ProposerPool(ProposerPoolOptions options) : options_(options) {}

  // The proposer for a node's speculative config (method ngram or suffix; anything else is
  // InvalidArgument naming the method).
  absl::StatusOr<std::shared_ptr<SharedProposer>> acquire(const SpeculativeConfig& config);
  const ProposerPoolOptions& options() const { return options_; }

 private:
  ProposerPoolOptions options_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<SharedProposer>> shared_;  // by configuration; kept while no node is connected
};

}  // namespace baton
