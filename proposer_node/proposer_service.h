// ProposerService: the ProposerNode gRPC service of baton-proposer. Each decode node holds one
// bidirectional Propose stream; a reactor per stream reads one message, lets its ProposerSession
// apply it and, when drafts were asked for, writes the reply before reading the next message
// (the node waits for each step's reply, so there is never more than one in flight).
//
// Must not: block in a reaction on anything but a shared proposer's mutex (proposing is CPU work
// of microseconds per request).
#pragma once

#include <atomic>
#include <cstdint>

#include "baton/v1/proposer.grpc.pb.h"
#include "proposer_node/proposer_pool.h"

namespace baton {

struct ProposerServiceOptions {
  ProposerPoolOptions pool;
  std::int64_t max_context_tokens_per_node = 64LL << 20;
};

class ProposerService final : public node::v1::ProposerNode::CallbackService {
 public:
  explicit ProposerService(ProposerServiceOptions options) : options_(options), pool_(options.pool) {}

  grpc::ServerBidiReactor<node::v1::ProposerRequest, node::v1::ProposerReply>* Propose(
      grpc::CallbackServerContext* ctx) override;

  std::int64_t open_streams() const { return open_streams_.load(); }

 private:
  friend class ProposeReactor;
  ProposerServiceOptions options_;
  ProposerPool pool_;
  std::atomic<std::int64_t> open_streams_{0};
};

}  // namespace baton
