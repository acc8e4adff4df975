// KvLinkService: a DecodeNode service that serves only KvLink, by handing each stream to a
// LinkKvReceiver — a bare KV sink for tests, benchmarks and tools. The decode node does not use
// it: its own DecodeNode service calls LinkKvReceiver::handle_link from its KvLink override.
//
// Must not: grow other methods (they answer UNIMPLEMENTED); own the receiver.
#pragma once

#include "kv_transfer/kv_link_transport.h"

namespace baton::kv {

class KvLinkService final : public baton::node::v1::DecodeNode::Service {
 public:
  explicit KvLinkService(LinkKvReceiver* receiver) : receiver_(receiver) {}

  grpc::Status KvLink(grpc::ServerContext* context,
                      grpc::ServerReaderWriter<baton::node::v1::KvLinkReply, baton::node::v1::KvLinkMessage>* stream) override {
    return receiver_->handle_link(context, stream);
  }

 private:
  LinkKvReceiver* receiver_;
};

}  // namespace baton::kv
