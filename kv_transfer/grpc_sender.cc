// GrpcKvSender (grpc_transport.h): one thread drives every PushKv stream of the sender through a
// completion queue. Callers hand it work through a queue whose wake-up is a grpc::Alarm on that
// completion queue; each stream has at most one operation (start, write, writes-done) pending.
// Must not: make a blocking gRPC call on the sender thread (everything here is asynchronous).
#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/status.h"
#include "kv_transfer/grpc_sender_state.h"
#include "kv_transfer/grpc_transport.h"
#include "security/grpc_credentials.h"

namespace baton::kv {
namespace {

using baton::node::v1::DecodeNode;

constexpr auto kAbandonedTimeout = std::chrono::seconds(30);

class GrpcKvTransfer final : public KvTransfer {
 public:
  GrpcKvTransfer(std::shared_ptr<GrpcCommandQueue> queue, std::shared_ptr<GrpcTransferState> state)
      : queue_(std::move(queue)), state_(std::move(state)) {}

  ~GrpcKvTransfer() override {
    if (finished_) return;
    GrpcCommand cmd = GrpcFinishCmd{state_, std::chrono::steady_clock::now() + kAbandonedTimeout, nullptr};
    queue_->push(cmd);
  }

  void put(std::int32_t pool, std::span<const Copy> copies) override {
    BATON_CHECK(!finished_, "put() after finish() on ", state_->where());
    std::int64_t bytes = 0;
    for (const Copy& c : copies) bytes += static_cast<std::int64_t>(c.bytes);
    bytes_posted_.fetch_add(bytes, std::memory_order_relaxed);
    GrpcCommand cmd = GrpcPutCmd{state_, pool, std::vector<Copy>(copies.begin(), copies.end())};
    queue_->push(cmd);
  }

  void finish(Deadline deadline, DoneCallback done) override {
    BATON_CHECK(!finished_, "finish() called twice on ", state_->where());
    finished_ = true;
    GrpcCommand cmd = GrpcFinishCmd{state_, deadline, std::move(done)};
    if (!queue_->push(cmd)) {
      auto& f = std::get<GrpcFinishCmd>(cmd);
      if (f.done) f.done(absl::CancelledError(str_cat(state_->where(), ": the sender was destroyed")));
    }
  }

  std::int64_t bytes_posted() const override { return bytes_posted_.load(std::memory_order_relaxed); }
  std::string_view path() const override { return "grpc"; }

 private:
  std::shared_ptr<GrpcCommandQueue> queue_;
  std::shared_ptr<GrpcTransferState> state_;
  std::atomic<std::int64_t> bytes_posted_{0};
  bool finished_ = false;
};

absl::Status from_grpc(const grpc::Status& s, std::string_view where) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), str_cat(where, ": ", s.error_message()));
}

}  // namespace

class GrpcKvSender::Loop {
 public:
  Loop(std::vector<MemoryRegion> local, GrpcSenderOptions options)
      : local_(std::move(local)), options_(options), queue_(std::make_shared<GrpcCommandQueue>(&cq_, &wake_tag_)) {
    thread_ = std::thread([this] { run(); });
  }

  ~Loop() {
    queue_->close_and_wake();
    thread_.join();
  }

  absl::StatusOr<std::unique_ptr<KvTransfer>> begin(const TransferTarget& target) {
    const std::string where = str_cat("grpc begin(request ", target.request_id, ", peer ", target.peer_address, ")");
    if (target.descriptor != kGrpcKvDescriptor) {
      return absl::InvalidArgumentError(str_cat(where, ": descriptor \"", target.descriptor.substr(0, 32),
                                                "\" is not \"", kGrpcKvDescriptor, "\""));
    }
    if (target.peer_address.empty()) return absl::InvalidArgumentError(str_cat(where, ": empty peer address"));
    auto state = std::make_shared<GrpcTransferState>(&local_, target, options_.chunk_bytes,
                                                     channel_for(target.peer_address, target.peer_instance));
    GrpcCommand cmd = GrpcStartCmd{state};
    if (!queue_->push(cmd)) return absl::CancelledError(str_cat(where, ": the sender is shutting down"));
    return std::make_unique<GrpcKvTransfer>(queue_, state);
  }

  void invalidate(const std::string& address) {
    std::lock_guard lock(mu_);
    channels_.erase(address);
  }

  std::int64_t channels_made() const { return channels_made_.load(); }

 private:
  std::shared_ptr<GrpcPeerChannel> channel_for(const std::string& address, std::uint64_t instance) {
    std::lock_guard lock(mu_);
    auto& entry = channels_[address];
    if (entry && entry->instance == instance) return entry;
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(kGrpcKvMaxMessageBytes);
    args.SetMaxReceiveMessageSize(kGrpcKvMaxMessageBytes);
    // Its own connections: a replaced channel (the peer restarted) must not inherit the old one's.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto peer = std::make_shared<GrpcPeerChannel>();
    peer->instance = instance;
    peer->channel = grpc::CreateCustomChannel(address, security::cluster_channel_credentials(), args);
    peer->stub = DecodeNode::NewStub(peer->channel);
    entry = peer;  // transfers on the replaced channel keep it alive until they end
    channels_made_.fetch_add(1);
    return peer;
  }

  // ---- sender thread -------------------------------------------------------------------------

  void run() {
    bool cq_shut = false;
    for (;;) {
      void* tag = nullptr;
      bool ok = false;
      auto got = cq_.AsyncNext(&tag, &ok, next_deadline());
      if (got == grpc::CompletionQueue::SHUTDOWN) break;
      if (got == grpc::CompletionQueue::GOT_EVENT) {
        auto* t = static_cast<GrpcTag*>(tag);
        if (t->transfer == nullptr) {
          bool closed = false;
          for (GrpcCommand& cmd : queue_->take_after_wake(&closed)) handle(cmd);
          if (closed && !stopping_) start_shutdown();
        } else {
          on_event(*t->transfer, t->finish, ok);
        }
      }
      expire_deadlines();
      run_dones();
      if (stopping_ && active_.empty() && !cq_shut) {
        cq_.Shutdown();  // the alarm is idle: the queue is closed and its last wake-up was taken
        cq_shut = true;
      }
    }
  }

  gpr_timespec next_deadline() const {
    std::optional<Deadline> next;
    for (const auto& [key, t] : active_) {
      if (t->finishing && !t->reported && (!next || t->deadline < *next)) next = t->deadline;
    }
    if (!next) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - std::chrono::steady_clock::now());
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(std::max<std::int64_t>(0, left.count()), GPR_TIMESPAN));
  }

  void handle(GrpcCommand& cmd) {
    if (auto* s = std::get_if<GrpcStartCmd>(&cmd)) {
      GrpcTransferState& t = *s->transfer;
      active_.emplace(&t, s->transfer);
      t.context.set_deadline(std::chrono::system_clock::now() + options_.stream_deadline);
      t.writer = t.peer->stub->PrepareAsyncPushKv(&t.context, &t.response, &cq_);
      t.writer->StartCall(&t.op_tag);
      t.op_pending = true;
    } else if (auto* p = std::get_if<GrpcPutCmd>(&cmd)) {
      GrpcTransferState& t = *p->transfer;
      if (t.phase != GrpcTransferState::Phase::kStreaming && t.phase != GrpcTransferState::Phase::kStarting) return;
      if (!t.error.ok() || t.cancelled) return;
      t.packer.add(p->pool, std::move(p->copies));
      pump(t);
    } else if (auto* f = std::get_if<GrpcFinishCmd>(&cmd)) {
      GrpcTransferState& t = *f->transfer;
      if (!active_.contains(&t)) {  // its start was never handled (shutdown raced it)
        if (f->done) dones_.emplace_back(std::move(f->done), absl::CancelledError(str_cat(t.where(), ": not started")));
        return;
      }
      t.finishing = true;
      t.deadline = f->deadline;
      t.done = std::move(f->done);
      pump(t);
      settle(t);
    }
  }

  // Issues the next operation of a stream when none is pending.
  void pump(GrpcTransferState& t) {
    using Phase = GrpcTransferState::Phase;
    if (t.op_pending || t.phase == Phase::kFinishing || t.phase == Phase::kClosed || t.phase == Phase::kStarting) return;
    if (t.cancelled || !t.error.ok()) return call_finish(t);
    if (t.phase == Phase::kStreaming) {
      if (!t.packer.empty()) {
        absl::Status packed = t.packer.next(t.chunk);
        if (!packed.ok()) {
          t.error = std::move(packed);
          cancel(t);
          return call_finish(t);
        }
        t.writer->Write(t.chunk, &t.op_tag);
        t.op_pending = true;
      } else if (t.finishing) {
        t.writer->WritesDone(&t.op_tag);
        t.op_pending = true;
        t.phase = Phase::kWritesDone;
      }
      return;
    }
    if (t.phase == Phase::kWritesDone) call_finish(t);
  }

  void call_finish(GrpcTransferState& t) {
    t.phase = GrpcTransferState::Phase::kFinishing;
    t.writer->Finish(&t.rpc_status, &t.finish_tag);
  }

  void cancel(GrpcTransferState& t) {
    if (t.cancelled) return;
    t.cancelled = true;
    t.context.TryCancel();
  }

  void on_event(GrpcTransferState& t, bool finish, bool ok) {
    using Phase = GrpcTransferState::Phase;
    if (finish) {
      t.phase = Phase::kClosed;
      if (!t.error.ok()) {
        t.final_status = t.error;
      } else if (!t.rpc_status.ok()) {
        t.final_status = from_grpc(t.rpc_status, t.where());
      } else if (t.response.bytes_written() != t.packer.bytes_packed()) {
        t.final_status = absl::DataLossError(str_cat(t.where(), ": the peer wrote ", t.response.bytes_written(),
                                                     " bytes of ", t.packer.bytes_packed(), " sent"));
      }
      settle(t);
      return;
    }
    t.op_pending = false;
    if (!ok) return call_finish(t);  // the stream is broken: Finish() says why
    if (t.phase == Phase::kStarting) t.phase = Phase::kStreaming;
    pump(t);
  }

  // Reports a finishing transfer once its stream has closed; forgets it once reported.
  void settle(GrpcTransferState& t) {
    if (t.phase != GrpcTransferState::Phase::kClosed) return;
    if (t.finishing && !t.reported) report(t, t.final_status);
    if (t.reported || stopping_) active_.erase(&t);  // may destroy t
  }

  void report(GrpcTransferState& t, absl::Status status) {
    t.reported = true;
    if (t.done) dones_.emplace_back(std::move(t.done), std::move(status));
    t.done = nullptr;
  }

  void expire_deadlines() {
    const Deadline now = std::chrono::steady_clock::now();
    std::vector<GrpcTransferState*> expired;
    for (auto& [key, t] : active_) {
      if (t->finishing && !t->reported && now >= t->deadline) expired.push_back(key);
    }
    for (GrpcTransferState* t : expired) {
      report(*t, absl::DeadlineExceededError(str_cat(t->where(), ": not complete at the deadline (",
                                                     t->packer.bytes_packed(), " bytes sent); the stream is cancelled")));
      cancel(*t);
      pump(*t);
      settle(*t);
    }
  }

  void start_shutdown() {
    stopping_ = true;
    std::vector<GrpcTransferState*> all;
    for (auto& [key, t] : active_) all.push_back(key);
    for (GrpcTransferState* t : all) {
      if (!t->reported && t->finishing) report(*t, absl::CancelledError(str_cat(t->where(), ": the sender was destroyed")));
      cancel(*t);
      pump(*t);
      settle(*t);
    }
  }

  void run_dones() {
    std::vector<std::pair<DoneCallback, absl::Status>> dones;
    dones.swap(dones_);
    for (auto& [done, status] : dones) done(std::move(status));
  }

  const std::vector<MemoryRegion> local_;
  const GrpcSenderOptions options_;
  grpc::CompletionQueue cq_;
  GrpcTag wake_tag_{nullptr, false};
  std::shared_ptr<GrpcCommandQueue> queue_;
  std::thread thread_;

  std::mutex mu_;  // guards channels_
  std::unordered_map<std::string, std::shared_ptr<GrpcPeerChannel>> channels_;
  std::atomic<std::int64_t> channels_made_{0};

  // Sender thread only.
  bool stopping_ = false;
  std::unordered_map<GrpcTransferState*, std::shared_ptr<GrpcTransferState>> active_;
  std::vector<std::pair<DoneCallback, absl::Status>> dones_;
};

GrpcKvSender::GrpcKvSender(std::vector<MemoryRegion> local_pools, GrpcSenderOptions options)
    : loop_(std::make_unique<Loop>(std::move(local_pools), options)) {}

GrpcKvSender::~GrpcKvSender() = default;

absl::StatusOr<std::unique_ptr<KvTransfer>> GrpcKvSender::begin(const TransferTarget& target) {
  return loop_->begin(target);
}

void GrpcKvSender::invalidate(const std::string& peer_address) { loop_->invalidate(peer_address); }

std::int64_t GrpcKvSender::channels_made() const { return loop_->channels_made(); }

}  // namespace baton::kv
