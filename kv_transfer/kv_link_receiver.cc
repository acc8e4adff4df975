// LinkKvReceiver (kv_link_transport.h): the decode side of DecodeNode.KvLink. The stream's thread
// reads P's messages in order and posts the matching receives; the link's thread answers each
// finished transfer once its receives have completed.
// Must not: post a receive into a pool before its pool, bounds and WriteCheck have passed (a
// rejected copy is received into the discard buffer instead); write the stream after
// handle_link() has returned.
#include <algorithm>
#include <map>
#include <mutex>

#include "common/status.h"
#include "kv_transfer/copy_range.h"
#include "kv_transfer/kv_link_transport.h"

namespace baton::kv {
namespace {

using baton::node::v1::KvLinkMessage;
using baton::node::v1::KvLinkReply;
using Stream = grpc::ServerReaderWriter<KvLinkReply, KvLinkMessage>;

grpc::Status grpc_error(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

KvLinkReply reply_for(std::uint64_t transfer, const absl::Status& status, std::int64_t bytes) {
  KvLinkReply r;
  r.set_transfer(transfer);
  r.set_code(static_cast<int>(status.code()));
  r.set_error(std::string(status.message()));
  r.set_bytes(status.ok() ? bytes : 0);
  return r;
}

// Replies from the link's thread and the stream's thread, never after handle_link has returned.
class ReplyWriter {
 public:
  explicit ReplyWriter(Stream* stream) : stream_(stream) {}
  void write(const KvLinkReply& reply) {
    std::lock_guard lock(mu_);
    if (stream_ != nullptr) stream_->Write(reply);
  }
  void close() {
    std::lock_guard lock(mu_);
    stream_ = nullptr;
  }

 private:
  std::mutex mu_;
  Stream* stream_;
};

// What the stream knows of one transfer until its finish.
struct TransferRecord {
  std::string request_id;
  std::string capability;  // from its first put
  absl::Status error;  // the first copy rejected
  std::int64_t bytes = 0;
};

}  // namespace

std::string link_descriptor(std::string_view kind) { return str_cat(kind, "/1"); }

LinkKvReceiver::LinkKvReceiver(std::vector<MemoryRegion> pools, std::shared_ptr<KvLinkFactory> factory,
                               WriteCheck check, LinkReceiverOptions options)
    : pools_(std::move(pools)),
      factory_(std::move(factory)),
      check_(std::move(check)),
      options_(options),
      descriptor_(link_descriptor(factory_->kind())) {}

std::int64_t LinkKvReceiver::links_joined() const { return links_joined_.load(); }

grpc::Status LinkKvReceiver::handle_link(grpc::ServerContext* context, Stream* stream) {
  const std::string peer = context->peer();
  KvLinkMessage message;
  if (!stream->Read(&message)) return grpc::Status(grpc::StatusCode::CANCELLED, "KvLink: the stream ended before its hello");
  if (!message.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, str_cat("KvLink from ", peer, ": the first message is not a hello"));
  }
  const baton::node::v1::KvLinkHello& hello = message.hello();
  auto refuse = [&](const std::string& why) {
    const absl::Status s = absl::InvalidArgumentError(str_cat("KvLink from ", peer, ": ", why));
    stream->Write(reply_for(0, s, 0));
    return grpc_error(s);
  };
  if (hello.link_kind() != factory_->kind()) {
    return refuse(str_cat("the sender's link is '", hello.link_kind(), "', this node receives over '", factory_->kind(), "'"));
  }
  if (hello.max_segment_bytes() != factory_->max_piece_bytes()) {
    return refuse(str_cat("the sender cuts copies into pieces of ", hello.max_segment_bytes(), " bytes, this node into ",
                          factory_->max_piece_bytes()));
  }
  if (static_cast<std::size_t>(hello.pool_names_size()) != pools_.size()) {
    return refuse(str_cat("the sender has ", hello.pool_names_size(), " KV pools, this node ", pools_.size()));
  }
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    if (hello.pool_names(static_cast<int>(i)) != pools_[i].name) {
      return refuse(str_cat("pool ", i, " is '", hello.pool_names(static_cast<int>(i)), "' on the sender, '", pools_[i].name,
                            "' here"));
    }
  }
  stream->Write(reply_for(0, absl::OkStatus(), 0));  // accepted: P joins now, and so do we
  // The sender giving up (its join failed or timed out) cancels the stream: stop waiting then.
  auto joined = factory_->join(hello.link_id(), 1, std::chrono::steady_clock::now() + options_.join_timeout,
                               [context] { return context->IsCancelled(); });
  if (!joined.ok()) {
    const absl::Status s(joined.status().code(), str_cat("KvLink from ", peer, ": cannot join the ", factory_->kind(),
                                                         " link: ", joined.status().message()));
    stream->Write(reply_for(0, s, 0));
    return grpc_error(s);
  }
  std::unique_ptr<KvLink> link = std::move(*joined);
  links_joined_.fetch_add(1);
  auto writer = std::make_shared<ReplyWriter>(stream);
  writer->write(reply_for(0, absl::OkStatus(), 0));

  const std::uint64_t max_piece = factory_->max_piece_bytes();
  std::uint64_t largest_pool = 0;
  for (const MemoryRegion& p : pools_) largest_pool = std::max<std::uint64_t>(largest_pool, p.bytes);
  // Started and not finished. Transfers interleave (P's threads share the stream) and finish in
  // any order; a finish answers once everything posted before it has completed.
  std::map<std::uint64_t, TransferRecord> transfers;
  std::vector<LinkPiece> pieces;
  grpc::Status result = grpc::Status::OK;
  auto protocol_error = [&](const std::string& why) {
    result = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, str_cat("KvLink from ", peer, ": ", why));
  };
  while (result.ok() && stream->Read(&message)) {
    if (message.has_put()) {
      const baton::node::v1::KvLinkPut& put = message.put();
      TransferRecord& t = transfers[put.transfer()];
      if (t.request_id.empty()) {
        t.request_id = put.request_id();
        t.capability = put.capability();
      }
      if (put.request_id() != t.request_id || t.request_id.empty()) {
        protocol_error(str_cat("transfer ", put.transfer(), " names request '", put.request_id(), "' after '", t.request_id, "'"));
        break;
      }
      const std::int32_t pool = put.pool();
      const std::string where = str_cat("KvLink request ", t.request_id);
      const bool pool_ok = pool >= 0 && static_cast<std::size_t>(pool) < pools_.size();
      if (!pool_ok && t.error.ok()) {
        t.error = absl::InvalidArgumentError(str_cat(where, ": pool ", pool, " is out of range (", pools_.size(), " pools)"));
      }
      pieces.clear();
      bool too_large = false;
      for (const baton::node::v1::KvLinkCopy& copy : put.copies()) {
        if (copy.bytes() > largest_pool) {
          // No sender's pool holds that much: discarding it would take without end. The stream ends.
          protocol_error(str_cat(where, ": a copy of ", copy.bytes(), " bytes, more than any pool holds"));
          too_large = true;
          break;
        }
        absl::Status ok = pool_ok ? check_pool_range("destination", where, pool, copy.dst_offset(), copy.bytes(),
                                                     pools_[pool].bytes)
                                  : absl::InvalidArgumentError("bad pool");
        if (ok.ok() && check_) {
          absl::Status allowed = check_(t.request_id, t.capability, pool, copy.dst_offset(), copy.bytes());
          if (!allowed.ok()) {
            ok = absl::Status(allowed.code(), str_cat(where, ": write to pool ", pool, " offset ", copy.dst_offset(), " (",
                                                      copy.bytes(), " bytes) rejected: ", allowed.message()));
          }
        }
        if (!ok.ok() && t.error.ok() && pool_ok) t.error = ok;
        char* base = ok.ok() ? static_cast<char*>(pools_[pool].base) + copy.dst_offset() : nullptr;
        for_each_piece(copy.bytes(), max_piece, [&](std::uint64_t offset, std::uint64_t bytes) {
          pieces.push_back(LinkPiece{base != nullptr ? base + offset : nullptr, bytes});
        });
        if (ok.ok()) t.bytes += static_cast<std::int64_t>(copy.bytes());
      }
      if (too_large) break;
      absl::Status posted = link->post_receives(pieces);
      if (!posted.ok()) {
        result = grpc::Status(grpc::StatusCode::UNAVAILABLE, str_cat(where, ": the link broke: ", posted.message()));
        break;
      }
    } else if (message.has_finish()) {
      const std::uint64_t id = message.finish().transfer();
      TransferRecord t;
      if (auto it = transfers.find(id); it != transfers.end()) {
        t = std::move(it->second);
        transfers.erase(it);
      }
      link->when_done([writer, id, t = std::move(t)](absl::Status status) {
        writer->write(reply_for(id, t.error.ok() ? status : t.error, t.bytes));
      });
    } else {
      protocol_error("a second hello, or an empty message");
    }
  }
  // The stream ended (the sender closed it, went away or broke the protocol): no more replies,
  // and whatever is still posted will never be matched.
  writer->close();
  link->abort();
  link.reset();  // joins the link's thread: no callback runs after this
  if (result.ok() && context->IsCancelled()) return grpc::Status::OK;  // the sender's normal way out
  return result;
}

}  // namespace baton::kv
