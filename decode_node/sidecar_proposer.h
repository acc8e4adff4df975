// SidecarProposer: the Proposer a decode node gives its engine (through EngineHooks::
// wrap_proposer) when its speculative config names a proposer_endpoint. It asks the sidecar
// (baton-proposer) for each step's drafts and wraps the engine's own ngram/suffix proposer as the
// fallback, so the engine never sees gRPC.
//
// Per step: the contexts' new tokens (a request's whole sequence only on its first step on a
// connection: ADD, i.e. after a reconnect that is the resync) and the proposal request go out in
// one message; the step waits for the reply at most `budget`. A miss, a lost sidecar or a
// request the sidecar could not serve is drafted by the local proposer for that step (counted).
// Drafts only change speed: the engine verifies every one, and drafts outside the vocabulary or
// over max_drafts are cut here before the engine sees them.
//
// Not thread-safe: the engine thread owns it (the connection has its own threads).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "decode_node/sidecar_connection.h"
#include "decode_node/sidecar_stats.h"
#include "engine/spec/proposer.h"

namespace baton {

struct SidecarProposerOptions {
  SidecarConnectionOptions connection;
  std::chrono::microseconds budget{5000};
  std::int32_t vocab_size = 0;
};

class SidecarProposer final : public Proposer {
 public:
  SidecarProposer(SidecarProposerOptions options, std::unique_ptr<Proposer> local, std::shared_ptr<SidecarStats> stats);

  std::string_view name() const override { return local_->name(); }
  std::optional<std::int32_t> default_num_speculative_tokens() const override {
    return local_->default_num_speculative_tokens();
  }
  void add_request(RequestKey key, std::span<const std::int32_t> prompt) override;
  void remove_request(RequestKey key, bool finished) override;
  void reset_request(RequestKey key) override { local_->reset_request(key); }
  absl::Status propose(std::span<ProposalRequest> batch) override;

  // The connection's epoch, for tests that wait for a reconnect; nullopt while disconnected.
  std::optional<std::uint64_t> connection_epoch() const { return connection_.epoch(); }

 private:
  struct Context {
    std::int32_t prompt_len = 0;
    std::uint64_t epoch = 0;  // the connection its ADD went to (0: none yet)
    std::size_t sent = 0;     // tokens the sidecar holds on that connection
  };
  absl::Status fallback(std::span<ProposalRequest> batch);

  SidecarProposerOptions options_;
  std::unique_ptr<Proposer> local_;
  std::shared_ptr<SidecarStats> stats_;
  SidecarConnection connection_;
  absl::flat_hash_map<RequestKey, Context> contexts_;
  std::uint64_t step_ = 0;
};

}  // namespace baton
