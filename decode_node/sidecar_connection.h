// SidecarConnection: a decode node's stream to its proposer sidecar (baton/v1/proposer.proto).
// A thread keeps it up: connect, hello, read replies; when the stream breaks it reconnects with
// exponential back-off (reconnects are counted) and bumps the connection epoch, which tells the
// proposer to resync its contexts. Sending never blocks the caller: messages go through a
// bounded queue to a writer; a full queue (the sidecar stopped reading) cancels the stream,
// which then reconnects.
//
// Thread-safety: send() / await() from one caller thread (the engine's); the rest is internal.
// Must not: wait past a caller's deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "baton/v1/proposer.grpc.pb.h"
#include "decode_node/sidecar_stats.h"
#include "grpcpp/grpcpp.h"

namespace baton {

struct SidecarConnectionOptions {
  std::string endpoint;            // host:port of baton-proposer
  std::string node_id;
  std::string speculative_config;  // JSON, sent in the hello
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{2000};
  std::size_t max_queued_messages = 256;
};

class SidecarConnection {
 public:
  SidecarConnection(SidecarConnectionOptions options, SidecarStats* stats);
  ~SidecarConnection();  // cancels the stream and joins the threads

  // The current connection's epoch (1, 2, ...), or nullopt while not connected.
  std::optional<std::uint64_t> epoch() const;
  // Queues a message for connection `epoch`; false if that connection is gone.
  bool send(std::uint64_t epoch, node::v1::ProposerRequest message);
  // The reply to `step`, if it arrives before `deadline` on the current connection.
  std::optional<node::v1::ProposerReply> await(std::uint64_t step, std::chrono::steady_clock::time_point deadline);

 private:
  void run();     // connection thread: connect, read until broken, back off, repeat
  void write_loop(std::uint64_t epoch, grpc::ClientReaderWriter<node::v1::ProposerRequest, node::v1::ProposerReply>* stream);
  bool connect_once(std::unique_ptr<grpc::ClientContext>& ctx,
                    std::unique_ptr<grpc::ClientReaderWriter<node::v1::ProposerRequest, node::v1::ProposerReply>>& stream);

  SidecarConnectionOptions options_;
  SidecarStats* stats_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<node::v1::ProposerNode::Stub> stub_;

  mutable std::mutex mu_;
  std::condition_variable cv_;          // replies, queue, connection changes, stop
  bool stopping_ = false;
  bool connected_ = false;
  std::uint64_t epoch_ = 0;
  bool ever_connected_ = false;
  grpc::ClientContext* live_ctx_ = nullptr;  // for cancelling
  std::deque<node::v1::ProposerRequest> queue_;
  std::optional<node::v1::ProposerReply> latest_reply_;
  std::thread thread_;
};

}  // namespace baton
