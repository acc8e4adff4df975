// GrpcKvReceiver (grpc_transport.h): the decode side of PushKv, one chunk in memory at a time.
// Must not: copy a segment before its request id, pool, bounds and WriteCheck have all passed.
#include <cstring>

#include "common/status.h"
#include "kv_transfer/copy_range.h"
#include "kv_transfer/grpc_transport.h"

namespace baton::kv {
namespace {

grpc::Status invalid(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

}  // namespace

void configure_kv_server(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(kGrpcKvMaxMessageBytes);
}

GrpcKvReceiver::GrpcKvReceiver(std::vector<MemoryRegion> pools, WriteCheck check)
    : pools_(std::move(pools)), check_(std::move(check)) {}

grpc::Status GrpcKvReceiver::handle_push(grpc::ServerContext* context,
                                         grpc::ServerReader<baton::node::v1::KvChunk>* reader,
                                         baton::node::v1::PushKvResponse* response) {
  baton::node::v1::KvChunk chunk;
  std::string request_id, capability;
  std::int64_t written = 0;
  while (reader->Read(&chunk)) {
    if (request_id.empty()) {
      if (chunk.request_id().empty()) return invalid("PushKv: the first chunk has no request_id");
      request_id = chunk.request_id();
      capability = chunk.capability();
    } else if (!chunk.request_id().empty() && chunk.request_id() != request_id) {
      return invalid(str_cat("PushKv request ", request_id, ": a later chunk names request ", chunk.request_id()));
    }
    const std::int32_t pool = chunk.pool();
    if (pool < 0 || static_cast<std::size_t>(pool) >= pools_.size()) {
      return invalid(str_cat("PushKv request ", request_id, ": pool ", pool, " is out of range (", pools_.size(),
                             " pools)"));
    }
    const MemoryRegion& region = pools_[pool];
    for (const baton::node::v1::KvSegment& seg : chunk.segments()) {
      const std::uint64_t bytes = seg.data().size();
      absl::Status ok = check_pool_range("destination", str_cat("PushKv request ", request_id), pool,
                                         seg.dst_offset(), bytes, region.bytes);
      if (!ok.ok()) return invalid(std::string(ok.message()));
      if (check_) {
        absl::Status allowed = check_(request_id, capability, pool, seg.dst_offset(), bytes);
        if (!allowed.ok()) {
          return grpc::Status(static_cast<grpc::StatusCode>(allowed.code()),
                              str_cat("PushKv request ", request_id, ": write to pool ", pool, " offset ",
                                      seg.dst_offset(), " (", bytes, " bytes) rejected: ", allowed.message()));
        }
      }
      std::memcpy(static_cast<char*>(region.base) + seg.dst_offset(), seg.data().data(), bytes);
      written += static_cast<std::int64_t>(bytes);
    }
  }
  if (context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, str_cat("PushKv request ", request_id, ": cancelled by the sender"));
  }
  response->set_bytes_written(written);
  return grpc::Status::OK;
}

}  // namespace baton::kv
