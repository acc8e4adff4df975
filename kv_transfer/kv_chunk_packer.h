// KvChunkPacker: turns a gRPC transfer's queued copies into KvChunk messages of about
// `max_chunk_bytes` each — data plus a fixed charge per segment, so that many tiny segments stay
// under the limit too (one pool per chunk; a large copy is split across chunks), read from the
// local pools. The request id rides on the first chunk only.
//
// Not thread-safe (one transfer, one thread). Must not: read outside a local pool (each copy's
// source range is checked when packed); hold more than one chunk's worth of copied bytes.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "baton/v1/node.pb.h"
#include "kv_transfer/transport.h"

namespace baton::kv {

class KvChunkPacker {
 public:
  // The first chunk carries `request_id` and `capability` (the reservation's token).
  KvChunkPacker(const std::vector<MemoryRegion>* local_pools, std::string request_id, std::string capability,
                std::size_t max_chunk_bytes);

  void add(std::int32_t pool, std::vector<Copy> copies);
  bool empty() const { return batches_.empty(); }
  // Data bytes packed so far (what the receiver should report as written).
  std::int64_t bytes_packed() const { return bytes_packed_; }

  // Replaces `chunk` with the next one. INVALID_ARGUMENT naming the request, pool and copy when a
  // pool index or source range is out of bounds. Requires !empty().
  absl::Status next(baton::node::v1::KvChunk& chunk);

 private:
  struct Batch {
    std::int32_t pool;
    std::vector<Copy> copies;
    std::size_t index = 0;         // current copy
    std::uint64_t done_bytes = 0;  // of the current copy, already packed
    std::int64_t first_copy_number = 0;  // for messages: copies put before this batch
  };

  const std::vector<MemoryRegion>* local_;
  std::string request_id_;
  std::string capability_;
  std::size_t max_chunk_bytes_;
  std::deque<Batch> batches_;
  std::int64_t copies_added_ = 0;
  std::int64_t bytes_packed_ = 0;
  bool sent_first_ = false;
};

}  // namespace baton::kv
