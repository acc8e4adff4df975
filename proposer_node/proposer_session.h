// ProposerSession: one decode node's stream on the proposer sidecar, without the gRPC around it.
// It checks the hello, applies the node's context deltas (ADD / APPEND / FINISH / ABORT) to its
// ContextStore and the shared proposer, and answers proposal requests with drafts from the
// shared proposer. A request that fails (unknown, out of sync, over budget) gets an error in its
// own RequestDrafts and no drafts; the node then resyncs it and drafts locally meanwhile.
// Closing the session (destructor) drops every context it holds, as aborts.
//
// Must not: block on anything but the shared proposer's mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "baton/v1/proposer.pb.h"
#include "proposer_node/context_store.h"
#include "proposer_node/proposer_pool.h"

namespace baton {

inline constexpr std::uint32_t kProposerProtocolVersion = 1;

class ProposerSession {
 public:
  // From the stream's first message; InvalidArgument / FailedPrecondition naming what is wrong
  // with the hello (version, config, method).
  static absl::StatusOr<std::unique_ptr<ProposerSession>> open(ProposerPool& pool, const node::v1::ProposerHello& hello,
                                                               std::int64_t max_context_tokens);
  ~ProposerSession();

  node::v1::ProposerHelloAck ack() const;
  // Applies the deltas, then proposes if asked: the reply (nullopt when nothing was asked).
  std::optional<node::v1::ProposerReply> handle(const node::v1::ProposerRequest& request);

  const std::string& node_id() const { return node_id_; }
  const ContextStore& contexts() const { return store_; }

 private:
  ProposerSession() : store_(0) {}
  // mu held on shared_:
  absl::Status apply(const node::v1::ContextDelta& delta);
  void drop(const SidecarContext& c, bool finished);

  std::string node_id_;
  CacheScope scope_ = CacheScope::kGlobal;
  std::int32_t k_ = 0;
  std::shared_ptr<SharedProposer> shared_;
  ContextStore store_;
};

}  // namespace baton
