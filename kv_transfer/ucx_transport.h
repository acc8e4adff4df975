// The UCX transport: one-sided puts (RMA) from a prefill node's registered pools into a decode
// node's registered pools, over one of two paths (ucx_peer_cache.h):
//   shm      same host, the receiver's pools allocated by UcxShmMemory: the sender maps them and
//            its puts are memory copies. Endpoints without error handling (UCX 1.13 gives
//            shared-memory transports none); safe since they have only shared-memory lanes.
//   network  otherwise: UCX picks the wire (RDMA between hosts; tcp on loopback, where it emulates
//            RMA in software and the receiver's thread must progress). Endpoints use
//            UCP_ERR_HANDLING_MODE_PEER so that a dead peer fails its transfers instead of hanging.
// Either way every transfer ends by its deadline.
//
//   UcxKvReceiver  registers each pool once, packs its remote keys into descriptor(), and runs one
//                  progress thread that sleeps on the worker's event fd while idle.
//   UcxKvSender    registers the local (source) pools once; one transport thread owns the worker:
//                  put() hands copies to it through a queue (never waits on the network), it posts
//                  ucp_put_nbx, and finish() flushes the endpoint (remote completion) by a deadline.
//                  Connections are cached per peer address; a new instance id replaces the entry.
//
// Thread-safety: begin()/invalidate() from any thread (begin() may wait for a new connection's
// wire-up, by a deadline); one KvTransfer is used by one thread at a time. Done callbacks run on the transport thread: they must not block (they may call put(),
// finish() and begin()). A KvTransfer must not outlive its sender (finish() then reports
// CANCELLED at once). Must not: block put(); busy-poll or sleep-poll while idle; touch engine
// objects (only raw memory regions).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kv_transfer/transport.h"
#include "kv_transfer/ucx_shm_memory.h"

namespace baton::kv {

class UcxKvReceiver final : public KvReceiver {
 public:
  // Pools in index order (0 "target", 1 "draft"); each must be non-empty. The memory must stay
  // valid until the receiver is destroyed. When every pool was allocated by `shm`, the descriptor
  // also offers the shared-memory path (and the receiver keeps `shm` alive).
  static absl::StatusOr<std::unique_ptr<UcxKvReceiver>> create(std::vector<MemoryRegion> pools,
                                                               std::shared_ptr<UcxShmMemory> shm = nullptr);
  ~UcxKvReceiver() override;

  std::string_view kind() const override { return "ucx"; }
  const std::string& descriptor() const override;

  struct Impl;

 private:
  explicit UcxKvReceiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct UcxSenderOptions {
  // How long begin() waits for a new endpoint's wire-up (a round trip to a live peer; a cached
  // endpoint answers at once).
  std::chrono::milliseconds begin_timeout{5000};
};

class UcxKvSender final : public KvSender {
 public:
  // Local (source) pools in index order; the memory must stay valid until the sender is destroyed.
  static absl::StatusOr<std::unique_ptr<UcxKvSender>> create(std::vector<MemoryRegion> local_pools,
                                                             UcxSenderOptions options = {});
  ~UcxKvSender() override;

  std::string_view kind() const override { return "ucx"; }
  // Reuses the cached endpoint for (peer_address, peer_instance), else creates one and waits for
  // its wire-up (not when called from a done callback: the transfer then queues behind it).
  // INVALID_ARGUMENT: the descriptor is malformed or not a UCX one, or a pool's name differs
  // between the sides. UNAVAILABLE: the peer cannot be reached. DEADLINE_EXCEEDED: no wire-up
  // within begin_timeout. Later failures (the peer died, the deadline passed) come from finish().
  absl::StatusOr<std::unique_ptr<KvTransfer>> begin(const TransferTarget& target) override;
  void invalidate(const std::string& peer_address) override;

  // Endpoints created so far (cache misses), for tests and metrics.
  std::int64_t connections_made() const;

  class Loop;

 private:
  explicit UcxKvSender(std::unique_ptr<Loop> loop);
  std::unique_ptr<Loop> loop_;
};

}  // namespace baton::kv
