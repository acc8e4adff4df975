// The NCCL link (kv_link.h) for the link transport: a 2-rank NCCL communicator per (prefill node,
// decode node) pair, made from an ncclUniqueId that the sender creates and the KvLink stream
// carries; pieces are grouped ncclSend/ncclRecv on a stream of the link's own, so KV moves from
// GPU memory to GPU memory (NVLink, or the network through NCCL's plugins) without the host.
//
// libnccl.so.2 is loaded with dlopen when the first factory is made (it is large, and most
// processes never use it): a machine without it gets an error naming the library, at start-up.
// The communicator is non-blocking (ncclConfig_t.blocking = 0), so that a join or a post whose
// peer does not answer can give up at its deadline and ncclCommAbort it; posting polls NCCL's
// state until the group is enqueued (NCCL's non-blocking contract), never waits for the transfer.
// when_done rides the stream (cudaLaunchHostFunc) and reports on the link's own thread.
//
// Must not: call NCCL on one communicator from two threads at once; touch memory that is not on
// the factory's device; block in post_*() beyond NCCL's enqueue.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kv_transfer/kv_link.h"

namespace baton::kv {

struct NcclLinkOptions {
  int device = 0;  // CUDA device ordinal the pools live on
  // Copies travel in pieces of at most this many bytes; a receiver's discard buffer (device
  // memory, one per link, made when the link is) is this large.
  std::uint64_t max_piece_bytes = std::uint64_t{64} << 20;
};

// FAILED_PRECONDITION naming the library when libnccl.so.2 cannot be loaded or lacks a symbol.
absl::StatusOr<std::shared_ptr<KvLinkFactory>> make_nccl_link_factory(NcclLinkOptions options = {});

}  // namespace baton::kv
