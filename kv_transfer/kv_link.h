// A two-sided, ordered point-to-point byte link between one KV sender and one KV receiver: NCCL's
// model of send/recv. The i-th piece the sender posts fills the i-th piece the receiver posts,
// and the two must have the same size; nothing says where bytes go but that order. The link
// transport (kv_link_transport.h) keeps both sides' orders equal by announcing every piece over
// its gRPC stream before the sender posts it.
//
//   KvLinkFactory  makes links: the sender (rank 0) creates a rendezvous id, sends it to the
//                  receiver, and both join with it (each blocks, by a deadline, until the other
//                  has joined). NCCL: ncclGetUniqueId and ncclCommInitRank on a 2-rank communicator.
//   KvLink         posts sends or receives of byte pieces in order and reports when everything
//                  posted so far has completed.
//
// Must not: block in post_*() (they enqueue work; NCCL: on a CUDA stream); wait without a
// deadline (join takes one; a stuck link is abort()ed by its owner at the owner's deadline).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv_transfer/transport.h"

namespace baton::kv {

// A piece of local memory. On the receiving side, a null address discards `bytes` bytes (a piece
// the receiver rejected still has to be taken off the link to keep both orders equal).
struct LinkPiece {
  void* address = nullptr;
  std::uint64_t bytes = 0;
};

// Calls emit(offset, bytes) for the pieces of a copy of `bytes` bytes, in order, each at most
// `max_piece` bytes: both sides cut every copy this way, so that their pieces pair up.
template <class Emit>
void for_each_piece(std::uint64_t bytes, std::uint64_t max_piece, Emit&& emit) {
  for (std::uint64_t offset = 0; offset < bytes; offset += max_piece) emit(offset, std::min(max_piece, bytes - offset));
}

class KvLink {
 public:
  virtual ~KvLink() = default;
  // Enqueues sends (sender) or receives (receiver) of `pieces`, in order, each at most the
  // factory's max_piece_bytes(). An error means the link is broken (abort() it).
  virtual absl::Status post_sends(std::span<const LinkPiece> pieces) = 0;
  virtual absl::Status post_receives(std::span<const LinkPiece> pieces) = 0;
  // `done` runs once, on a link thread, when every piece posted so far has completed (OK) or the
  // link failed or was aborted (the error). It must not block.
  virtual void when_done(DoneCallback done) = 0;
  // Fails everything posted and every later call, and lets pending when_done callbacks report.
  // Thread-safe; idempotent.
  virtual void abort() = 0;
};

class KvLinkFactory {
 public:
  virtual ~KvLinkFactory() = default;
  virtual std::string_view kind() const = 0;  // "nccl"
  // The largest piece a link takes, > 0 (NCCL: its receiver's discard buffer sizes it).
  virtual std::uint64_t max_piece_bytes() const = 0;
  // Rank 0: a new rendezvous id (opaque bytes) for one link.
  virtual absl::StatusOr<std::string> new_link_id() = 0;
  // Joins the link `link_id` as rank 0 (sender) or 1 (receiver); returns once both have joined.
  // DEADLINE_EXCEEDED when the other side has not joined by `deadline`, CANCELLED soon after
  // give_up() returns true (polled while waiting: the other side said it will not join, or went
  // away); INVALID_ARGUMENT for an id this factory cannot use.
  virtual absl::StatusOr<std::unique_ptr<KvLink>> join(const std::string& link_id, int rank, Deadline deadline,
                                                       const std::function<bool()>& give_up) = 0;
};

}  // namespace baton::kv
