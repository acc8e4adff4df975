// KV transport interface: moves bytes of KV-cache pools from a prefill node's memory into a decode
// node's memory. The caller (a node) maps (layer, block, positions) to byte ranges with the engine's
// KvCache layout, identical on both sides once the layout fingerprints match — checked by the
// caller before any transfer begins. A transport only moves bytes; it knows nothing of layers,
// models or requests beyond an id for logs and checks.
//
//   decode node  KvReceiver  exposes its pools once (UCX: registered memory, remote keys) and
//                            hands out a descriptor that goes into every KvDestination.
//   prefill node KvSender    connects to a receiver by (address, instance id, descriptor), with a
//                            per-peer connection cache; a new instance id (the peer restarted,
//                            its memory keys changed) replaces the cached connection.
//                KvTransfer  one request's writes: put() posts copies while the prefill computes
//                            (layer i travels while layer i+1 computes), finish() reports when
//                            every byte is in the peer's memory, or an error, by a deadline.
//
// Must not: block the caller in put() (the engine's loop thread calls it from the per-layer
// callback); wait without a deadline; touch engine objects (only raw memory regions).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton::kv {

// One pool's memory on this node (the engine's KvPoolInfo::transfer). Pools are addressed by
// index, in the engine's order: "target", then "draft" (when the engine has one), then "state" (a
// hybrid model's recurrent state); both sides list them alike.
struct MemoryRegion {
  std::string name;
  void* base = nullptr;
  std::size_t bytes = 0;
};

// Bytes [src_offset, src_offset + bytes) of a local pool go to [dst_offset, dst_offset + bytes) of
// the peer's pool with the same index.
struct Copy {
  std::uint64_t src_offset = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t bytes = 0;
};

using Deadline = std::chrono::steady_clock::time_point;
using DoneCallback = std::function<void(absl::Status)>;

// The decode node's check that a write targets blocks reserved for that request and comes with the
// reservation's capability (node.proto), for the transports whose receiver sees each write (gRPC,
// link): a non-OK status rejects the write, and its code and message go back to the sender.
using WriteCheck = std::function<absl::Status(const std::string& request_id, const std::string& capability,
                                              std::int32_t pool, std::uint64_t dst_offset, std::uint64_t bytes)>;

// Decode side: keeps the pools writable by peers for its lifetime.
class KvReceiver {
 public:
  virtual ~KvReceiver() = default;
  virtual std::string_view kind() const = 0;  // "ucx", "grpc"
  // Opaque bytes a sender needs (goes into KvDestination.transport_descriptor); fixed for the
  // receiver's lifetime.
  virtual const std::string& descriptor() const = 0;
};

// One request's writes to one peer.
class KvTransfer {
 public:
  virtual ~KvTransfer() = default;
  // Posts copies from local pool `pool` into the peer's pool `pool`; returns without waiting for
  // the network. The source bytes must stay unchanged until finish() has reported. An error here
  // (or from the peer) is reported by finish().
  virtual void put(std::int32_t pool, std::span<const Copy> copies) = 0;
  // Call once, after the last put(). `done` runs exactly once, on a transport thread: OK when
  // every posted byte is in the peer's memory (a following message to the peer sees them), else
  // the error (DEADLINE_EXCEEDED at the deadline, UNAVAILABLE when the peer went away, ...).
  virtual void finish(Deadline deadline, DoneCallback done) = 0;
  // Bytes posted so far.
  virtual std::int64_t bytes_posted() const = 0;
  // Which way the bytes go, for stats and logs: "shm" (UCX through shared memory), "network"
  // (UCX through the network stack), "grpc".
  virtual std::string_view path() const = 0;
};

// Where one transfer goes.
struct TransferTarget {
  std::string request_id;     // for logs and the receiver's checks
  std::string peer_address;   // host:port of the decode node's service
  std::uint64_t peer_instance = 0;  // a new value invalidates a cached connection to the address
  std::string descriptor;     // the peer receiver's descriptor()
  std::string capability;     // the reservation's token: sent with the writes where the receiver sees them
};

// Prefill side.
class KvSender {
 public:
  virtual ~KvSender() = default;
  virtual std::string_view kind() const = 0;
  // Starts a transfer (connecting or reusing the cached connection to the peer). Errors: the
  // descriptor is malformed or of another transport (INVALID_ARGUMENT), the peer cannot be
  // reached (UNAVAILABLE).
  virtual absl::StatusOr<std::unique_ptr<KvTransfer>> begin(const TransferTarget& target) = 0;
  // Drops the cached connection to a peer (it failed or restarted).
  virtual void invalidate(const std::string& peer_address) = 0;
};

}  // namespace baton::kv
