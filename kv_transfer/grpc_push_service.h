// PushKvService: a DecodeNode service that serves only PushKv, by handing each stream to a
// GrpcKvReceiver — a bare KV sink for tests, benchmarks and tools. The decode node does not use
// it: its own DecodeNode service calls GrpcKvReceiver::handle_push from its PushKv override.
//
// Must not: grow other methods (they answer UNIMPLEMENTED); own the receiver.
#pragma once

#include "kv_transfer/grpc_transport.h"

namespace baton::kv {

class PushKvService final : public baton::node::v1::DecodeNode::Service {
 public:
  explicit PushKvService(GrpcKvReceiver* receiver) : receiver_(receiver) {}

  grpc::Status PushKv(grpc::ServerContext* context, grpc::ServerReader<baton::node::v1::KvChunk>* reader,
                      baton::node::v1::PushKvResponse* response) override {
    return receiver_->handle_push(context, reader, response);
  }

 private:
  GrpcKvReceiver* receiver_;
};

}  // namespace baton::kv
