// The link transport: KV bytes over a two-sided, ordered link (kv_link.h; NCCL in production,
// GPU memory to GPU memory), steered by one gRPC stream per (prefill node, decode node) pair,
// DecodeNode.KvLink:
//
//   P -> D  hello   the link's rendezvous id and P's pool names; D joins the link (rank 1) while P
//                   joins it (rank 0), and answers once joined. One link per stream, kept open.
//           put     a transfer's copies (request id, pool, destination offsets, sizes), written
//                   before P posts their sends, so D posts the matching receives in the same order.
//           finish  the transfer has no more puts.
//   D -> P  reply   per finished transfer, once its receives have completed: OK and its bytes, or
//                   the first error (a copy D rejected: bad pool or bounds, or the WriteCheck, e.g.
//                   not the request's reserved blocks). A rejected copy is still taken off the
//                   link (into a discard buffer), so both orders stay equal and the link serves on.
//
//   LinkKvReceiver  decode side: handle_link() is what the node's DecodeNode service calls from its
//                   KvLink override; it serves one stream until the sender goes away.
//   LinkKvSender    prefill side: a link and stream per peer address (replaced when the instance id
//                   changes or the link broke), a writer thread per peer (put() only queues: it
//                   never waits on the network) and a reader thread for D's replies.
//
// A transfer that misses its deadline may have left pieces on the link that will never match, so
// the sender aborts that link (every transfer on it fails: UNAVAILABLE) and the next begin() makes
// a new one; the receiver, seeing its stream end, aborts its side too.
//
// Thread-safety: begin()/invalidate() from any thread; begin() waits for a new link's rendezvous,
// by begin_timeout (once per peer; NCCL's takes up to seconds). One KvTransfer per thread at a
// time. Done callbacks run on a peer's thread: they must not block (they may call put(), finish()
// and begin() for a peer already connected). Must not: block put(); wait without a deadline; write
// outside a pool on the receiver; know what the bytes are.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/v1/node.grpc.pb.h"
#include "kv_transfer/kv_link.h"
#include "kv_transfer/transport.h"

namespace baton::kv {

// "<kind>/1", e.g. "nccl/1": the descriptor of a link receiver of that kind (the address is in
// TransferTarget).
std::string link_descriptor(std::string_view kind);

struct LinkReceiverOptions {
  // How long a hello waits for the link's rendezvous.
  std::chrono::milliseconds join_timeout{60000};
};

class LinkKvReceiver final : public KvReceiver {
 public:
  // Pools in index order; the memory must stay valid while handle_link may run, and be memory the
  // factory's links can write (NCCL: device memory of the factory's device). `check` may be empty
  // (bounds are still checked).
  LinkKvReceiver(std::vector<MemoryRegion> pools, std::shared_ptr<KvLinkFactory> factory, WriteCheck check,
                 LinkReceiverOptions options = {});

  std::string_view kind() const override { return factory_->kind(); }
  const std::string& descriptor() const override { return descriptor_; }

  // Serves one sender's stream until it ends (the sender closed it or went away), then aborts the
  // link. INVALID_ARGUMENT for a stream that does not start with a usable hello (other link kind,
  // other pool names, other piece size) or breaks the protocol; the join's error when the link
  // cannot be joined. Thread-safe: streams of different senders run concurrently.
  grpc::Status handle_link(grpc::ServerContext* context,
                           grpc::ServerReaderWriter<baton::node::v1::KvLinkReply, baton::node::v1::KvLinkMessage>* stream);

  // Streams served so far, for tests and metrics.
  std::int64_t links_joined() const;

 private:
  std::vector<MemoryRegion> pools_;
  std::shared_ptr<KvLinkFactory> factory_;
  WriteCheck check_;
  LinkReceiverOptions options_;
  std::string descriptor_;
  std::atomic<std::int64_t> links_joined_{0};
};

struct LinkSenderOptions {
  // How long begin() waits for a new link: the stream's hello, both joins and D's answer.
  std::chrono::milliseconds begin_timeout{60000};
};

class LinkKvSender final : public KvSender {
 public:
  // Local (source) pools in index order; the memory must stay valid until the sender is destroyed
  // and be memory the factory's links can read.
  LinkKvSender(std::vector<MemoryRegion> local_pools, std::shared_ptr<KvLinkFactory> factory,
               LinkSenderOptions options = {});
  ~LinkKvSender() override;

  std::string_view kind() const override { return factory_->kind(); }
  // Reuses the peer's link, or makes one (waiting, by begin_timeout). INVALID_ARGUMENT: the
  // descriptor is not this kind's, or the address is empty, or D's pools differ from P's.
  // UNAVAILABLE: the peer cannot be reached. DEADLINE_EXCEEDED: no link by begin_timeout.
  absl::StatusOr<std::unique_ptr<KvTransfer>> begin(const TransferTarget& target) override;
  void invalidate(const std::string& peer_address) override;

  // Links made so far (cache misses), for tests and metrics.
  std::int64_t links_made() const;

  class Peer;

 private:
  struct PeerThreads;
  struct FailLater;
  using PeerMap = std::map<std::string, std::unique_ptr<PeerThreads>>;
  // Moves the peer to retired_, whose threads reap() joins; fail_later fails it once the lock is
  // released.
  void retire_locked(PeerMap::iterator it, FailLater& fail_later);
  void reap(std::unique_lock<std::mutex>& lock);

  std::vector<MemoryRegion> pools_;
  std::shared_ptr<KvLinkFactory> factory_;
  LinkSenderOptions options_;
  std::string descriptor_;
  mutable std::mutex mu_;
  std::condition_variable connected_;             // a link set-up ended
  PeerMap peers_;                                 // by address
  std::vector<std::unique_ptr<PeerThreads>> retired_;
  std::set<std::string> connecting_;              // addresses whose link is being made
  std::int64_t links_made_ = 0;
};

}  // namespace baton::kv
