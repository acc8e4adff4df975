// Scripted prefill and decode nodes for the router's tests: real gRPC servers on 127.0.0.1:0 in
// this process (with grpc.health.v1), answering baton.node.v1 as each test scripts and recording
// what the router asked. They follow node.proto's contract where the router depends on it: D's
// Decode waits for P's commit (which the fake P makes directly on the fake D it was pointed at),
// a cancelled Decode ends, the last Decode message carries the usage.
//
// Not a model: tokens are the scripted ids, text is "<id>" per token.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "baton/v1/node.grpc.pb.h"
#include "grpcpp/server.h"

namespace baton::router::testing {

// What a fake node was asked, in order.
// What a fake node was called with. Node-call ids appear without the suffix the router adds to a
// client's own request id ("client-7~<16 hex>.1" is logged as "client-7.1"), so that tests name
// requests by their client ids; raw_calls() keeps them as sent.
class CallLog {
 public:
  void add(const std::string& what);
  std::vector<std::string> calls() const;
  std::vector<std::string> raw_calls() const;
  int count(const std::string& what) const;
  // Waits up to `ms` for `what` to be logged.
  bool wait_for(const std::string& what, int ms = 5000) const;
  // Waits up to `ms` until `n` calls starting with `prefix` were logged.
  bool wait_for_count(const std::string& prefix, int n, int ms = 5000) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<std::string> calls_, raw_calls_;
};

class FakeDecodeNode final : public baton::node::v1::DecodeNode::Service {
 public:
  explicit FakeDecodeNode(baton::node::v1::NodeInfo info);
  ~FakeDecodeNode() override;
  const std::string& address() const { return address_; }

  // Script (set before the router sends the request).
  std::vector<std::vector<std::int32_t>> messages = {{11}, {12, 13}, {14}};  // after the first token
  baton::v1::FinishReason finish = baton::v1::FINISH_REASON_STOP;
  grpc::Status reserve_status = grpc::Status::OK;
  int fail_after_messages = -1;  // >= 0: after that many messages the stream fails UNAVAILABLE
  bool hold_after_messages = false;  // keep the stream open (no last message) until cancelled

  // Called by the fake prefill node: the hand-off of request `id` with its first token.
  void commit(const std::string& id, std::int32_t first_token);
  CallLog log;  // "Reserve <id>", "Decode <id>", "Decode local <id>", "Release <id>", "Abort <id>", "Cancelled <id>"

  grpc::Status Reserve(grpc::ServerContext*, const baton::node::v1::ReserveRequest*,
                       baton::node::v1::KvDestination*) override;
  grpc::Status Decode(grpc::ServerContext*, const baton::node::v1::DecodeRequest*,
                      grpc::ServerWriter<baton::node::v1::DecodeResponse>*) override;
  grpc::Status Release(grpc::ServerContext*, const baton::node::v1::ReleaseRequest*,
                       baton::node::v1::ReleaseResponse*) override;
  grpc::Status Abort(grpc::ServerContext*, const baton::node::v1::NodeAbortRequest*,
                     baton::node::v1::NodeAbortResponse*) override;
  grpc::Status Info(grpc::ServerContext*, const baton::node::v1::InfoRequest*, baton::node::v1::NodeInfo*) override;

 private:
  baton::node::v1::NodeInfo info_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::int32_t> committed_;  // id -> first token
};

class FakePrefillNode final : public baton::node::v1::PrefillNode::Service {
 public:
  // decodes: the fake decode nodes by address, to commit to.
  FakePrefillNode(baton::node::v1::NodeInfo info, std::map<std::string, FakeDecodeNode*> decodes);
  ~FakePrefillNode() override;
  const std::string& address() const { return address_; }

  // Script.
  grpc::Status status = grpc::Status::OK;  // non-OK: Prefill fails with it (before committing)
  bool finish_at_first_token = false;
  bool hold = false;  // Prefill waits until cancelled (logging "Cancelled <id>")
  std::int32_t first_token = 10;
  CallLog log;  // "Prefill <id> <prompt_len>", "Abort <id>"

  grpc::Status Prefill(grpc::ServerContext*, const baton::node::v1::PrefillRequest*,
                       baton::node::v1::PrefillResponse*) override;
  grpc::Status Abort(grpc::ServerContext*, const baton::node::v1::NodeAbortRequest*,
                     baton::node::v1::NodeAbortResponse*) override;
  grpc::Status Info(grpc::ServerContext*, const baton::node::v1::InfoRequest*, baton::node::v1::NodeInfo*) override;

 private:
  baton::node::v1::NodeInfo info_;
  std::map<std::string, FakeDecodeNode*> decodes_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace baton::router::testing
