// DecodeService: the DecodeNode gRPC service (baton-decode). It holds KV blocks for incoming
// requests under a lease (Reserve), admits a request once its prefill node committed the hand-off
// (Commit), streams its tokens (Decode), and can also prefill a request itself (Decode with
// `local`: short prompts, no healthy prefill node, single-node mode) — each one counted.
//
// Output routing: the engine's outputs (loop thread) go to the request's stream, or wait in a
// buffer until the stream opens (the commit usually comes before the router's Decode call).
// Finished outputs nobody collected are dropped after `unclaimed_output_ttl`.
//
// Threads: the engine runs on its EngineLoop thread; gRPC callbacks post to it and return; the
// gRPC KV transport (PushKv, synchronous) writes into reserved blocks only (check_write).
//
// Capabilities (node.proto): Reserve mints each reservation's token; Commit, KV writes, the
// router's Decode, Release and Abort, and P's CheckReservation must present the request's token
// (a local Decode brings the router's), or are PERMISSION_DENIED without touching the request.
//
// Draining (SIGTERM, node_main.h): Reserve and a local Decode (what starts a request) are refused
// with UNAVAILABLE; a Decode stream, Commit or KV push for a request reserved before goes on. A
// request runs while its entry exists; cancel_running() fails every stream and aborts its request.
//
// Write grants (decode_node/write_grants.h; the write side is decode_writes.cc): a sender whose destination check passed may write
// the reservation's blocks until its Commit; a reservation that ends before (release, abort,
// expiry, cancelled stream) keeps its blocks quarantined until the sender is done or gone.
//
// Must not: let a request decode before its commit, hand a block a sender may still write to
// another request, or leave blocks held on any path (finish, abort, release, failed commit,
// lease expiry, cancelled stream, a sender done or gone).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "baton/v1/node.grpc.pb.h"
#include "decode_node/decode_writer.h"
#include "decode_node/sidecar_stats.h"
#include "decode_node/write_grants.h"
#include "engine/engine_loop.h"
#include "kv_transfer/transport.h"
#include "node_common/node_info.h"
#include "node_common/node_main.h"

namespace baton {

struct DecodeNodeOptions {
  std::chrono::milliseconds unclaimed_output_ttl{60000};
  WriteGrantsOptions write_grants;
  std::shared_ptr<const SidecarStats> sidecar_stats;  // reported in Info's load when set
};

using DecodeServiceBase = node::v1::DecodeNode::WithCallbackMethod_Reserve<node::v1::DecodeNode::WithCallbackMethod_Commit<
    node::v1::DecodeNode::WithCallbackMethod_Decode<node::v1::DecodeNode::WithCallbackMethod_Release<
        node::v1::DecodeNode::WithCallbackMethod_CheckReservation<node::v1::DecodeNode::WithCallbackMethod_Abort<
            node::v1::DecodeNode::WithCallbackMethod_Info<node::v1::DecodeNode::Service>>>>>>>;

class DecodeService final : public DecodeServiceBase, public DrainableService {
 public:
  using PushHandler = std::function<grpc::Status(grpc::ServerContext*, grpc::ServerReader<node::v1::KvChunk>*,
                                                 node::v1::PushKvResponse*)>;

  // `engine` has the decode role; the tokenizer may be null and must outlive the service.
  DecodeService(std::unique_ptr<Engine> engine, NodeIdentity identity, DecodeNodeOptions options);
  ~DecodeService() override;

  // The engine's pools (by index: "target", then "draft") for the KV receivers.
  const std::vector<kv::MemoryRegion>& regions() const { return regions_; }
  // Receivers by kind; the first added is the preferred one. Call before serving.
  void add_receiver(std::unique_ptr<kv::KvReceiver> receiver);
  using LinkHandler = std::function<grpc::Status(
      grpc::ServerContext*, grpc::ServerReaderWriter<node::v1::KvLinkReply, node::v1::KvLinkMessage>*)>;
  // The gRPC transport's PushKv handler. Call before serving.
  void set_push_handler(PushHandler handler) { push_handler_ = std::move(handler); }
  // The link transport's (NCCL's) KvLink handler. Call before serving.
  void set_link_handler(LinkHandler handler) { link_handler_ = std::move(handler); }
  // OK when `capability` is the reservation's and [offset, offset + bytes) of pool `pool` lies
  // inside one (layer, block) reserved for request `id`; otherwise PERMISSION_DENIED or
  // INVALID_ARGUMENT naming them (a peer may only write the reservation it was given).
  absl::Status check_write(const std::string& id, const std::string& capability, std::int32_t pool, std::uint64_t offset,
                           std::uint64_t bytes);

  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* ctx, const node::v1::ReserveRequest* request,
                                    node::v1::KvDestination* response) override;
  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* ctx, const node::v1::CommitRequest* request,
                                   node::v1::CommitResponse* response) override;
  grpc::ServerWriteReactor<node::v1::DecodeResponse>* Decode(grpc::CallbackServerContext* ctx,
                                                             const node::v1::DecodeRequest* request) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx, const node::v1::ReleaseRequest* request,
                                    node::v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* CheckReservation(grpc::CallbackServerContext* ctx,
                                             const node::v1::CheckReservationRequest* request,
                                             node::v1::CheckReservationResponse* response) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const node::v1::NodeAbortRequest* request,
                                  node::v1::NodeAbortResponse* response) override;
  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* ctx, const node::v1::InfoRequest* request,
                                 node::v1::NodeInfo* response) override;
  grpc::Status PushKv(grpc::ServerContext* ctx, grpc::ServerReader<node::v1::KvChunk>* reader,
                      node::v1::PushKvResponse* response) override;
  grpc::Status KvLink(grpc::ServerContext* ctx,
                      grpc::ServerReaderWriter<node::v1::KvLinkReply, node::v1::KvLinkMessage>* stream) override;

  // The NodeInfo that Info returns, taken on the loop thread; nullopt when the loop does not answer
  // within `timeout` (for /metrics, which must not hang on a busy or stopped engine).
  std::optional<node::v1::NodeInfo> info_snapshot(std::chrono::milliseconds timeout);

  void stop();
  void start_draining() override;
  std::size_t running_requests() override;
  void cancel_running(const std::string& reason) override;
  // The address this node serves on (known once the server has bound its port; set it before
  // reporting SERVING).
  void set_address(const std::string& address);

 private:
  enum class Phase { kReserved, kCommitted, kLocal };
  struct Entry {
    Phase phase = Phase::kReserved;
    DecodeWriter* stream = nullptr;
    std::deque<node::v1::DecodeResponse> buffered;
    bool finished = false;  // the final output is in `buffered`
    bool logprobs = false;  // the request asked for logprobs
    EngineClock::time_point finished_at{};
    std::vector<std::set<std::int32_t>> writable;  // reserved units (PoolGeometry) by pool, until the commit
    std::string capability;                        // the request's token (node.proto)
    std::vector<std::int32_t> kv_blocks, proposer_blocks;  // reserved, in position order
    std::int32_t state_group = -1;                 // reserved recurrent state group (hybrid models)
    std::uint64_t write_ticket = 0;  // its sender's write grant, once the destination was confirmed
  };
  // The request's entry when `capability` is its token; else the refusal (mu_ held).
  absl::StatusOr<Entry*> owned_entry(const std::string& id, const std::string& capability, std::string_view what);

  // The write grants' view of the engine: grant states and ends go through the loop thread.
  std::unique_ptr<WriteGrants> make_write_grants();
  node::v1::NodeInfo current_info(Engine& e);  // loop thread
  void on_outputs(std::vector<RequestOutput>&& outputs);
  // Routes one message to the request's stream or buffer (mu_ held).
  void route(const std::string& id, node::v1::DecodeResponse message, bool last);
  void drop_unclaimed(EngineClock::time_point now);  // mu_ held
  const kv::KvReceiver* receiver(const std::string& kind) const;

  NodeIdentity identity_;
  DecodeNodeOptions options_;
  std::vector<kv::MemoryRegion> regions_;
  std::vector<PoolGeometry> geometries_;  // by pool index, as regions_
  std::vector<std::int32_t> pool_blocks_;  // KV pools: blocks; the state pool: groups
  std::int32_t draft_pool_ = -1, state_pool_ = -1;  // their indexes, when the engine has them
  std::int32_t state_slots_ = 0;                    // slots per state group
  std::vector<std::unique_ptr<kv::KvReceiver>> receivers_;
  PushHandler push_handler_;
  LinkHandler link_handler_;
  std::atomic<std::int64_t> local_prefills_{0};
  std::atomic<bool> draining_{false};

  std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<WriteGrants> write_grants_;  // last: its probe thread stops first
};

}  // namespace baton
