// The decode node's write side: who may write which reserved bytes (check_write, for the gRPC
// and NCCL transports), the destination check a prefill node makes before its first UCX put
// (CheckReservation, which grants it the reservation's blocks until its commit), the write grants'
// wiring to the engine, and the KV transports' own gRPC handlers (PushKv, KvLink). What the
// service as a whole must and must not do is in decode_service.h.
#include "decode_node/decode_service.h"

#include "common/status.h"
#include "proto/status_convert.h"
#include "spdlog/spdlog.h"

namespace baton {

namespace {

// A sender's address is dialled by the probe thread: at most this long, printable, no spaces.
constexpr std::size_t kMaxSenderAddressBytes = 256;

absl::Status check_sender_address(const std::string& id, const std::string& address) {
  if (address.size() > kMaxSenderAddressBytes) {
    return absl::InvalidArgumentError(str_cat("the destination check of request '", id, "': sender_address is ",
                                              address.size(), " bytes (at most ", kMaxSenderAddressBytes, ")"));
  }
  for (const char c : address) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(str_cat("the destination check of request '", id,
                                                "': sender_address holds a character that is not printable ASCII"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<WriteGrants> DecodeService::make_write_grants() {
  return std::make_unique<WriteGrants>(
      [this](const std::vector<std::uint64_t>& tickets) -> std::optional<std::vector<WriteGrantState>> {
        auto states = loop_->call([tickets](Engine& e) {
          std::vector<WriteGrantState> out;
          for (std::uint64_t t : tickets) out.push_back(e.write_grant_state(t));
          return out;
        });
        if (states.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return std::nullopt;
        try {
          return states.get();
        } catch (const std::future_error&) {  // the loop stopped without running it
          return std::nullopt;
        }
      },
      [this](std::uint64_t ticket) { loop_->post([ticket](Engine& e) { e.end_writes(ticket); }); },
      options_.write_grants);
}

absl::Status DecodeService::check_write(const std::string& id, const std::string& capability, std::int32_t pool,
                                        std::uint64_t offset, std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto owned = owned_entry(id, capability, "KV write");
  if (!owned.ok()) return owned.status();
  auto it = entries_.find(id);
  if (it->second.phase != Phase::kReserved || it->second.finished) {
    return absl::InvalidArgumentError(
        str_cat("KV write for request '", id, "': it holds no reservation here (committed, released or expired)"));
  }
  if (pool < 0 || static_cast<std::size_t>(pool) >= geometries_.size()) {
    return absl::InvalidArgumentError(str_cat("KV write for request '", id, "': no pool ", pool));
  }
  const auto p = static_cast<std::size_t>(pool);
  // A unit is a KV block, or one slot of a recurrent state group (PoolGeometry).
  const std::string_view unit_name = static_cast<std::int32_t>(pool) == state_pool_ ? "state slot" : "block";
  const std::optional<std::int32_t> unit = geometries_[p].unit_of(offset, bytes);
  if (!unit) {
    return absl::InvalidArgumentError(str_cat("KV write for request '", id, "': bytes [", offset, ", ", offset + bytes,
                                              ") of pool ", regions_[p].name, " do not lie inside one (layer, ",
                                              unit_name, ")"));
  }
  if (!it->second.writable[p].contains(*unit)) {
    return absl::InvalidArgumentError(str_cat("KV write for request '", id, "': ", unit_name, " ", *unit, " of pool ",
                                              regions_[p].name, " is not reserved for it"));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DecodeService::CheckReservation(grpc::CallbackServerContext* ctx,
                                                          const node::v1::CheckReservationRequest* request,
                                                          node::v1::CheckReservationResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (absl::Status bad = check_sender_address(request->request_id(), request->sender_address()); !bad.ok()) {
    spdlog::warn("destination check refused: {}", bad.ToString());
    reactor->Finish(to_grpc_status(bad));
    return reactor;
  }
  // On the loop thread, so that the grant reaches the engine before any release of the
  // reservation can (a release after it quarantines the blocks; one before it is a refusal here).
  loop_->post([this, reactor, request](Engine& e) {
    const std::string& id = request->request_id();
    const kv::KvReceiver* recv = receiver(request->transport());
    std::lock_guard<std::mutex> lock(mu_);
    auto owned = owned_entry(id, request->capability(), "the destination");
    absl::Status s = owned.status();
    if (s.ok() && ((*owned)->phase != Phase::kReserved || (*owned)->finished)) {
      s = absl::FailedPreconditionError(str_cat("request '", id, "' is not waiting for its KV here any more"));
    }
    const auto same = [](const std::vector<std::int32_t>& mine,
                         const google::protobuf::RepeatedField<std::int32_t>& given) {
      return std::equal(mine.begin(), mine.end(), given.begin(), given.end());
    };
    if (s.ok() && (!same((*owned)->kv_blocks, request->kv_blocks()) ||
                   !same((*owned)->proposer_blocks, request->proposer_blocks()) ||
                   ((*owned)->state_group >= 0 && (*owned)->state_group != request->state_group()))) {
      s = absl::PermissionDeniedError(str_cat("the destination of request '", id,
                                              "' names blocks or a state group this decode node did not reserve for it"));
    }
    if (s.ok() && (recv == nullptr || recv->descriptor() != request->transport_descriptor())) {
      s = absl::PermissionDeniedError(str_cat("the destination of request '", id, "' has a ", request->transport(),
                                              " descriptor this decode node did not give"));
    }
    if (s.ok() && (*owned)->write_ticket == 0) {
      const std::uint64_t ticket =
          write_grants_->add(WriteGrants::Grant{id, (*owned)->capability, request->sender_address()});
      s = e.grant_writes(id, ticket);
      if (s.ok()) {
        (*owned)->write_ticket = ticket;
      } else {
        (void)write_grants_->take((*owned)->capability);
      }
    }
    if (!s.ok()) spdlog::warn("destination check refused: {}", s.ToString());
    reactor->Finish(to_grpc_status(s));
  });
  return reactor;
}

grpc::Status DecodeService::KvLink(grpc::ServerContext* ctx,
                                   grpc::ServerReaderWriter<node::v1::KvLinkReply, node::v1::KvLinkMessage>* stream) {
  if (!link_handler_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this decode node does not receive KV over NCCL");
  return link_handler_(ctx, stream);
}

grpc::Status DecodeService::PushKv(grpc::ServerContext* ctx, grpc::ServerReader<node::v1::KvChunk>* reader,
                                   node::v1::PushKvResponse* response) {
  if (!push_handler_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this decode node does not receive KV over gRPC");
  return push_handler_(ctx, reader, response);
}

}  // namespace baton
