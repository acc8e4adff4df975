// PrefillService: the PrefillNode gRPC service (baton-prefill). For each Prefill call it checks
// the decode node's layout fingerprint and has the decode node confirm the destination with the
// request's capability (CheckReservation; both before any byte moves), starts a KV transfer to the
// destination, queues the prompt on its prefill-role engine and, while the engine computes layer
// by layer, posts each finished layer's KV to the decode node (the engine's per-layer callback).
// After the first token: the prefix-cache blocks and the proposer's KV go too, the transfer is
// flushed, the hand-off record is committed on the decode node, and the call returns the first
// token. Then the engine frees the request's KV.
//
// One Prefill call is one Job, in one of these states (PrefillState; every change goes through
// PrefillService::advance() or respond(), is logged at debug level and counted in
// baton_prefill_state_entered_total{state}):
//
//   kChecking    D confirms the destination (CheckReservation, async)
//                  -> kPrefilling (confirmed, transfer begun) | kAnswered (refused, unreachable)
//   kPrefilling  the prompt waits for and runs through the engine; each computed layer's KV is
//                posted to D as it is written (on_layer)
//                  -> kFlushing (the first token; handed off) | kAnswered (the first token
//                     finished the request, an engine error, an abort)
//   kFlushing    the prefix-cache blocks and the proposer's KV posted; the transfer flushes
//                  -> kCommitting (every byte on D) | kAnswered (the transfer failed, an abort)
//   kCommitting  Commit on D in flight
//                  -> kAnswered (D's answer, or the commit deadline)
//   kAnswered    the call was answered (respond(), exactly once, from any state); the engine
//                frees its KV if it held it for us, and posted writes still flush (below)
//
// An abort (the router's Abort, a cancelled call, a drain) only sets the job's `aborted` flag and
// asks the engine to drop the request; whichever step runs next answers the call with CANCELLED.
//
// Threads: the engine runs on its EngineLoop thread; gRPC callbacks only post to it or answer;
// transports report on their own threads; the commit is an asynchronous call. Nothing blocks the
// loop, and every wait has a deadline (the transfer's, the commit's, the engine's lease).
//
// Draining (SIGTERM, node_main.h): new Prefill calls are refused with UNAVAILABLE; the calls in
// flight go on to their commit. cancel_running() answers them with an error and aborts them.
//
// Writes in flight: a call answered before its transfer was flushed (the first token finished the
// request, an abort, a failure) flushes it still, and until the flush reports, Abort of the request
// (with its token) answers found: the decode node keeps the blocks quarantined while posted
// writes may still land in them (decode_node/write_grants.h).
//
// Must not: decode past the first token, accept a destination whose fingerprint differs, or let a
// decode node believe a request's writes are over while puts for it are still in flight.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "baton/v1/node.grpc.pb.h"
#include "engine/engine_loop.h"
#include "kv_transfer/transport.h"
#include "node_common/node_info.h"
#include "node_common/node_main.h"
#include "prefill_node/kv_push_plan.h"
#include "tokenizer/tokenizer.h"

namespace baton {

enum class PrefillState { kChecking, kPrefilling, kFlushing, kCommitting, kAnswered };
inline constexpr std::size_t kPrefillStates = 5;
const char* prefill_state_name(PrefillState s);

struct PrefillNodeOptions {
  std::chrono::milliseconds kv_transfer_timeout{30000};  // last layer computed -> every byte on D
  std::chrono::milliseconds commit_timeout{10000};       // Commit call to D
  // Fault injection for tests: transfers are posted but never finished (nor committed), and each
  // is logged ("holding the KV transfer of '<id>'"), so a test can kill the node mid-transfer or
  // let the decode node's lease run out.
  bool hold_transfers = false;
};

// Told how each KV transfer ended (for metrics): seconds from the prompt's last layer to the commit
// acknowledged, or the stage that failed ("begin", "transfer", "commit"). Called on gRPC or
// transport threads; must be thread-safe and quick.
struct TransferObserver {
  std::function<void(double seconds)> succeeded;
  std::function<void(const char* stage)> failed;
};

class PrefillService final : public node::v1::PrefillNode::CallbackService, public DrainableService {
 public:
  // `engine` has the prefill role; `senders` by kind ("ucx", "grpc") send from its pools;
  // `tokenizer` may be null (token-id mode) and must outlive the service.
  PrefillService(std::unique_ptr<Engine> engine, const Tokenizer* tokenizer,
                 std::map<std::string, std::unique_ptr<kv::KvSender>> senders, NodeIdentity identity,
                 PrefillNodeOptions options);
  ~PrefillService() override;

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* ctx, const node::v1::PrefillRequest* request,
                                    node::v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const node::v1::NodeAbortRequest* request,
                                  node::v1::NodeAbortResponse* response) override;
  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* ctx, const node::v1::InfoRequest* request,
                                 node::v1::NodeInfo* response) override;

  // Set before serving.
  void set_transfer_observer(TransferObserver observer) { observer_ = std::move(observer); }
  // The NodeInfo that Info returns, taken on the loop thread; nullopt when the loop does not answer
  // within `timeout` (for /metrics, which must not hang on a busy or stopped engine).
  std::optional<node::v1::NodeInfo> info_snapshot(std::chrono::milliseconds timeout);

  // Calls that entered `state` since start (baton_prefill_state_entered_total).
  std::int64_t entered(PrefillState state) const {
    return entered_[static_cast<std::size_t>(state)].load(std::memory_order_relaxed);
  }

  // Stops the engine loop (after the server stopped taking calls).
  void stop();
  void start_draining() override { draining_ = true; }
  std::size_t running_requests() override;
  void cancel_running(const std::string& reason) override;
  // The address this node serves on (known once the server has bound its port; set it before
  // reporting SERVING).
  void set_address(const std::string& address);

  struct Job;  // one Prefill call (prefill_service.cc)

 private:
  node::v1::NodeInfo current_info(Engine& e);  // loop thread
  void on_outputs(std::vector<RequestOutput>&& outputs);
  void on_layer(std::int32_t layer, std::span<const KvLayerWrite> writes);
  // Moves the job from `from` to `to`; false (and nothing changes) when it is no longer in `from`
  // (answered meanwhile, on another thread).
  bool advance(Job& job, PrefillState from, PrefillState to);
  void hand_off(const std::shared_ptr<Job>& job, RequestOutput& out);
  void on_transfer_done(const std::shared_ptr<Job>& job, const absl::Status& status);
  // Asks D to confirm the destination (its token, blocks and descriptor) before any byte moves;
  // then begins the transfer and queues the prompt, or answers the call with D's refusal.
  void check_destination(const std::shared_ptr<Job>& job, std::vector<std::int32_t> prompt, SamplingParams params);
  grpc::Status begin_transfer(const std::shared_ptr<Job>& job);
  void start_prefill(const std::shared_ptr<Job>& job, std::vector<std::int32_t> prompt, SamplingParams params);
  void commit(const std::shared_ptr<Job>& job);
  // Any state -> kAnswered: answers the call once (later calls do nothing), forgets the job,
  // releases its KV if parked, and flushes writes that were posted and not flushed.
  void respond(const std::shared_ptr<Job>& job, const grpc::Status& status);
  std::shared_ptr<Job> find(const std::string& id);
  void abort_job(const std::string& id);
  node::v1::DecodeNode::Stub& decode_stub(const std::string& address);

  NodeIdentity identity_;
  PrefillNodeOptions options_;
  const Tokenizer* tokenizer_;
  std::map<std::string, std::unique_ptr<kv::KvSender>> senders_;
  KvLayoutFingerprint fingerprint_;
  std::vector<const KvCache*> pools_;  // the engine's pools by index ("target", "draft"); null for "state"
  std::int32_t draft_pool_ = -1, state_pool_ = -1;  // their indexes, when the engine has them
  const StateCache* state_ = nullptr;               // a hybrid model's recurrent state
  std::int32_t block_size_ = 0;
  std::atomic<std::int64_t> queued_prefill_tokens_{0};
  std::atomic<std::int64_t> kv_bytes_sent_{0};
  std::array<std::atomic<std::int64_t>, kPrefillStates> entered_{};
  void count(PrefillState s) { entered_[static_cast<std::size_t>(s)].fetch_add(1, std::memory_order_relaxed); }
  std::atomic<bool> draining_{false};
  TransferObserver observer_;

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::map<std::string, std::string> flushing_;  // answered, transfer not yet flushed: id -> its token
  std::map<std::string, std::unique_ptr<node::v1::DecodeNode::Stub>> decode_stubs_;
  std::unique_ptr<EngineLoop> loop_;  // last: its thread stops before the members it uses go
};

}  // namespace baton
