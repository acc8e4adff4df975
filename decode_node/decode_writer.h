// DecodeWriter: the server side of one DecodeNode.Decode call — a queue of messages written to
// the client one at a time (gRPC's callback API allows one write in flight), finished after the
// last one, or early with an error. push() and fail() may be called from any thread.
//
// Lifetime: gRPC owns it; it deletes itself in OnDone, after telling its owner (on_done), which
// must stop calling it from then on. OnCancel (client gone, deadline) tells the owner (on_cancel)
// and finishes the call.
//
// Must not: block, or call push()/fail() reactions inline while holding its own lock.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "baton/v1/node.grpc.pb.h"

namespace baton {

class DecodeWriter final : public grpc::ServerWriteReactor<node::v1::DecodeResponse> {
 public:
  // Set both before the handler returns the stream to gRPC.
  void set_handlers(std::function<void()> on_cancel, std::function<void()> on_done) {
    on_cancel_ = std::move(on_cancel);
    on_done_ = std::move(on_done);
  }

  // Queues a message; `last` finishes the call (OK) once it is written. Ignored after the last
  // message or a failure.
  void push(node::v1::DecodeResponse message, bool last);
  // Finishes the call with `status` (after a write in flight completes). Ignored once finishing.
  void fail(const grpc::Status& status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  // Whether it still accepts messages (false after the last one or a failure).
  bool open();

 private:
  std::function<void()> on_cancel_;
  std::function<void()> on_done_;
  std::mutex mu_;
  std::deque<node::v1::DecodeResponse> queue_;  // front: the message being written
  bool writing_ = false;
  bool last_queued_ = false;
  bool finishing_ = false;
  std::optional<grpc::Status> deferred_failure_;
};

}  // namespace baton
