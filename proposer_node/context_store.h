// ContextStore: the request contexts one decode node streams to the proposer sidecar (prompt +
// accepted tokens per node-local request id), grown by deltas so a sequence crosses the network
// once. Bounded: at most max_tokens tokens over all its contexts; an ADD or APPEND that would
// exceed it is refused (that request gets no drafts; the node drafts locally).
//
// Must not: know about gRPC or proposers. Not thread-safe: one stream's reactor owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace baton {

struct SidecarContext {
  std::vector<std::int32_t> tokens;  // prompt + accepted output, as the node sent them
  std::int32_t prompt_len = 0;
  std::uint64_t key = 0;             // the request's key in the shared proposer
  std::size_t proposed_len = 0;      // tokens the proposer has seen (at its last propose)
};

class ContextStore {
 public:
  explicit ContextStore(std::int64_t max_tokens) : max_tokens_(max_tokens) {}

  // A new context, or a resync replacing one with the same id (the old one is returned through
  // `replaced` so its proposer state can go). InvalidArgument when prompt_len is not in
  // [0, tokens.size()]; ResourceExhausted over the token budget.
  absl::Status add(std::uint64_t id, std::span<const std::int32_t> tokens, std::int32_t prompt_len, std::uint64_t key,
                   std::optional<SidecarContext>* replaced);
  // NotFound for an unknown id (the node resyncs it), ResourceExhausted over the budget.
  absl::Status append(std::uint64_t id, std::span<const std::int32_t> tokens);
  // Takes a context out; nullopt for an unknown id.
  std::optional<SidecarContext> remove(std::uint64_t id);
  SidecarContext* find(std::uint64_t id);

  std::size_t size() const { return contexts_.size(); }
  std::int64_t num_tokens() const { return num_tokens_; }
  // Every context, for the end of a stream (the caller drops their proposer state).
  std::vector<SidecarContext> take_all();

 private:
  std::int64_t max_tokens_;
  std::int64_t num_tokens_ = 0;
  absl::flat_hash_map<std::uint64_t, SidecarContext> contexts_;
};

}  // namespace baton
