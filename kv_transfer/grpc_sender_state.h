// What the gRPC sender's thread keeps per peer channel and per transfer (stream), and the queue
// through which callers hand it work (grpc_sender.cc). Internal to kv_transfer.
//
// Ownership: GrpcTransferState fields after "sender thread only" are touched only by the sender
// thread; callers create the state and hand it over through the CommandQueue. Must not: block in
// CommandQueue::push (one short mutex hold).
#pragma once

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "baton/v1/node.grpc.pb.h"
#include "common/status.h"
#include "kv_transfer/kv_chunk_packer.h"
#include "kv_transfer/transport.h"

namespace baton::kv {

struct GrpcPeerChannel {
  std::uint64_t instance = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<baton::node::v1::DecodeNode::Stub> stub;
};

struct GrpcTransferState;
struct GrpcTag {
  GrpcTransferState* transfer;  // nullptr: the queue's wake-up alarm
  bool finish;                  // the Finish() completion (else: start, write or writes-done)
};

struct GrpcTransferState {
  enum class Phase { kStarting, kStreaming, kWritesDone, kFinishing, kClosed };

  GrpcTransferState(const std::vector<MemoryRegion>* local, const TransferTarget& target, std::size_t chunk_bytes,
                    std::shared_ptr<GrpcPeerChannel> channel)
      : request_id(target.request_id), address(target.peer_address), peer(std::move(channel)),
        packer(local, target.request_id, target.capability, chunk_bytes) {}

  std::string where() const { return str_cat("grpc transfer of request ", request_id, " to ", address); }

  const std::string request_id;
  const std::string address;
  const std::shared_ptr<GrpcPeerChannel> peer;
  // Sender thread only:
  grpc::ClientContext context;
  baton::node::v1::PushKvResponse response;
  grpc::Status rpc_status;
  std::unique_ptr<grpc::ClientAsyncWriter<baton::node::v1::KvChunk>> writer;
  KvChunkPacker packer;
  baton::node::v1::KvChunk chunk;
  Phase phase = Phase::kStarting;
  bool op_pending = false;
  bool cancelled = false;   // TryCancel() was called
  absl::Status error;       // a local failure (bad copy); the stream is cancelled
  absl::Status final_status;  // once closed
  bool finishing = false;
  bool reported = false;
  Deadline deadline{};
  DoneCallback done;
  GrpcTag op_tag{this, false};
  GrpcTag finish_tag{this, true};
};

struct GrpcStartCmd {
  std::shared_ptr<GrpcTransferState> transfer;
};
struct GrpcPutCmd {
  std::shared_ptr<GrpcTransferState> transfer;
  std::int32_t pool = 0;
  std::vector<Copy> copies;
};
struct GrpcFinishCmd {
  std::shared_ptr<GrpcTransferState> transfer;
  Deadline deadline{};
  DoneCallback done;
};
using GrpcCommand = std::variant<GrpcStartCmd, GrpcPutCmd, GrpcFinishCmd>;

// Callers -> sender thread. The alarm is set only while not pending (an alarm is re-set only after
// it fired), so one wake-up covers any number of pushes.
class GrpcCommandQueue {
 public:
  GrpcCommandQueue(grpc::CompletionQueue* cq, GrpcTag* wake_tag) : cq_(cq), wake_tag_(wake_tag) {}

  bool push(GrpcCommand& cmd) {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    pending_.push_back(std::move(cmd));
    arm_locked();
    return true;
  }
  // The sender thread, on the wake-up tag: the alarm may be set again.
  std::vector<GrpcCommand> take_after_wake(bool* closed) {
    std::vector<GrpcCommand> out;
    std::lock_guard lock(mu_);
    armed_ = false;
    out.swap(pending_);
    *closed = closed_;
    return out;
  }
  void close_and_wake() {
    std::lock_guard lock(mu_);
    closed_ = true;
    arm_locked();
  }

 private:
  void arm_locked() {
    if (armed_) return;
    armed_ = true;
    alarm_.Set(cq_, gpr_time_0(GPR_CLOCK_MONOTONIC), wake_tag_);
  }

  grpc::CompletionQueue* cq_;
  GrpcTag* wake_tag_;
  std::mutex mu_;
  grpc::Alarm alarm_;
  std::vector<GrpcCommand> pending_;
  bool armed_ = false;
  bool closed_ = false;
};

}  // namespace baton::kv
