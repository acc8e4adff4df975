// The gRPC transport: the slow, dependable fallback. A transfer is one client stream
// DecodeNode.PushKv of KvChunk messages (blocks as bytes); the decode node's PushKv handler
// memcpy's each segment into its pool after checking it.
//
//   GrpcKvReceiver  decode side: handle_push() is what the node's (sync) DecodeNode service calls
//                   from its PushKv override. Its descriptor is a version tag: the address is in
//                   TransferTarget. The server must call configure_kv_server() on its builder
//                   (chunks are up to kGrpcKvChunkBytes, above gRPC's 4 MiB default limit).
//   GrpcKvSender    prefill side: a channel per peer address (replaced when the instance id
//                   changes), one sender thread driving every stream through a completion queue:
//                   put() only queues copies; the thread packs them into chunks, writes them one at
//                   a time, and at finish() sends WritesDone and waits for the status.
//
// Thread-safety: begin()/invalidate() from any thread; one KvTransfer per thread at a time; done
// callbacks run on the sender thread and must not block (put/finish/begin are fine). Must not:
// block put(); wait without a deadline; write outside a pool on the receiver.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "baton/v1/node.grpc.pb.h"
#include "kv_transfer/transport.h"

namespace baton::kv {

inline constexpr std::string_view kGrpcKvDescriptor = "grpc/1";
// Data bytes per KvChunk, and the largest message either side accepts (chunk plus framing).
inline constexpr std::size_t kGrpcKvChunkBytes = std::size_t{4} << 20;
inline constexpr int kGrpcKvMaxMessageBytes = 8 << 20;

// Sets what a server hosting GrpcKvReceiver::handle_push needs: the max receive message size.
void configure_kv_server(grpc::ServerBuilder& builder);

class GrpcKvReceiver final : public KvReceiver {
 public:
  // Pools in index order; the memory must stay valid while handle_push may run. `check` may be
  // empty (no per-request check; bounds are still checked).
  GrpcKvReceiver(std::vector<MemoryRegion> pools, WriteCheck check);

  std::string_view kind() const override { return "grpc"; }
  const std::string& descriptor() const override { return descriptor_; }

  // Reads the stream to its end, writing each segment into its pool. INVALID_ARGUMENT naming the
  // request, pool and offset for a missing or changing request id, a bad pool index or an
  // out-of-bounds segment; the check's own code when it rejects a write. Thread-safe (pushes of
  // different requests run concurrently on the server's threads).
  grpc::Status handle_push(grpc::ServerContext* context,
                           grpc::ServerReader<baton::node::v1::KvChunk>* reader,
                           baton::node::v1::PushKvResponse* response);

 private:
  std::vector<MemoryRegion> pools_;
  WriteCheck check_;
  std::string descriptor_{kGrpcKvDescriptor};
};

struct GrpcSenderOptions {
  std::size_t chunk_bytes = kGrpcKvChunkBytes;
  // The stream's own gRPC deadline, a backstop behind finish()'s deadline (which cancels it).
  std::chrono::seconds stream_deadline{600};
};

class GrpcKvSender final : public KvSender {
 public:
  // Local (source) pools in index order; the memory must stay valid until the sender is destroyed.
  explicit GrpcKvSender(std::vector<MemoryRegion> local_pools, GrpcSenderOptions options = {});
  ~GrpcKvSender() override;

  std::string_view kind() const override { return "grpc"; }
  // INVALID_ARGUMENT when the descriptor is not "grpc/1" or the address is empty. Never waits:
  // an unreachable peer is reported by finish() (UNAVAILABLE).
  absl::StatusOr<std::unique_ptr<KvTransfer>> begin(const TransferTarget& target) override;
  void invalidate(const std::string& peer_address) override;

  // Channels created so far (cache misses), for tests and metrics.
  std::int64_t channels_made() const;

  class Loop;

 private:
  std::unique_ptr<Loop> loop_;
};

}  // namespace baton::kv
