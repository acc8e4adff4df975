#include "decode_node/sidecar_connection.h"

#include <algorithm>

#include "spdlog/spdlog.h"
#include "security/grpc_credentials.h"

namespace baton {

using Stream = grpc::ClientReaderWriter<node::v1::ProposerRequest, node::v1::ProposerReply>;

SidecarConnection::SidecarConnection(SidecarConnectionOptions options, SidecarStats* stats)
    : options_(std::move(options)), stats_(stats) {
  grpc::ChannelArguments args;
  // The channel's own reconnection should not lag behind ours after a sidecar restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(options_.initial_backoff.count()));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(options_.initial_backoff.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(options_.max_backoff.count()));
  channel_ = grpc::CreateCustomChannel(options_.endpoint, security::cluster_channel_credentials(), args);
  stub_ = node::v1::ProposerNode::NewStub(channel_);
  thread_ = std::thread([this] { run(); });
}

SidecarConnection::~SidecarConnection() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (live_ctx_ != nullptr) live_ctx_->TryCancel();
  }
  cv_.notify_all();
  thread_.join();
}

std::optional<std::uint64_t> SidecarConnection::epoch() const {
  std::lock_guard lock(mu_);
  if (!connected_) return std::nullopt;
  return epoch_;
}

bool SidecarConnection::send(std::uint64_t epoch, node::v1::ProposerRequest message) {
  std::lock_guard lock(mu_);
  if (!connected_ || epoch_ != epoch) return false;
  if (queue_.size() >= options_.max_queued_messages) {
    // The sidecar has stopped reading: drop the stream; the contexts resync on the next one.
    spdlog::warn("proposer sidecar {} stopped reading ({} messages queued): reconnecting", options_.endpoint,
                 queue_.size());
    if (live_ctx_ != nullptr) live_ctx_->TryCancel();
    return false;
  }
  queue_.push_back(std::move(message));
  cv_.notify_all();
  return true;
}

std::optional<node::v1::ProposerReply> SidecarConnection::await(std::uint64_t step,
                                                                std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  const std::uint64_t epoch = epoch_;
  cv_.wait_until(lock, deadline, [&] {
    return stopping_ || !connected_ || epoch_ != epoch || (latest_reply_ && latest_reply_->step() >= step);
  });
  if (connected_ && epoch_ == epoch && latest_reply_ && latest_reply_->step() == step) {
    std::optional<node::v1::ProposerReply> r = std::move(latest_reply_);
    latest_reply_.reset();
    return r;
  }
  return std::nullopt;
}

bool SidecarConnection::connect_once(std::unique_ptr<grpc::ClientContext>& ctx, std::unique_ptr<Stream>& stream) {
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(500))) return false;
  ctx = std::make_unique<grpc::ClientContext>();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    live_ctx_ = ctx.get();
  }
  stream = stub_->Propose(ctx.get());
  node::v1::ProposerRequest hello;
  hello.mutable_hello()->set_protocol_version(1);
  hello.mutable_hello()->set_node_id(options_.node_id);
  hello.mutable_hello()->set_speculative_config(options_.speculative_config);
  node::v1::ProposerReply ack;
  if (!stream->Write(hello) || !stream->Read(&ack) || !ack.has_hello()) {
    stream->WritesDone();
    const grpc::Status s = stream->Finish();
    spdlog::warn("proposer sidecar {} refused the stream: {}", options_.endpoint,
                 s.ok() ? std::string("no hello reply") : s.error_message());
    std::lock_guard lock(mu_);
    live_ctx_ = nullptr;
    return false;
  }
  return true;
}

void SidecarConnection::write_loop(std::uint64_t epoch, Stream* stream) {
  while (true) {
    node::v1::ProposerRequest message;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !connected_ || epoch_ != epoch || !queue_.empty(); });
      if (stopping_ || !connected_ || epoch_ != epoch) return;
      message = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!stream->Write(message)) return;  // the reader sees the broken stream
  }
}

void SidecarConnection::run() {
  std::chrono::milliseconds backoff = options_.initial_backoff;
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<Stream> stream;
    if (connect_once(ctx, stream)) {
      backoff = options_.initial_backoff;
      std::uint64_t epoch = 0;
      {
        std::lock_guard lock(mu_);
        connected_ = true;
        epoch = ++epoch_;
        queue_.clear();
        latest_reply_.reset();
        if (ever_connected_) ++stats_->reconnects;
        ever_connected_ = true;
        stats_->connected = true;
      }
      spdlog::info("connected to the proposer sidecar {} (connection {})", options_.endpoint, epoch);
      std::thread writer([this, epoch, s = stream.get()] { write_loop(epoch, s); });
      node::v1::ProposerReply reply;
      while (stream->Read(&reply)) {
        std::lock_guard lock(mu_);
        latest_reply_ = std::move(reply);
        cv_.notify_all();
      }
      bool stopping = false;
      {
        std::lock_guard lock(mu_);
        connected_ = false;
        stats_->connected = false;
        live_ctx_ = nullptr;
        stopping = stopping_;
      }
      cv_.notify_all();
      ctx->TryCancel();
      writer.join();
      const grpc::Status s = stream->Finish();
      if (stopping) return;  // our own shutdown, not a loss
      spdlog::warn("lost the proposer sidecar {} ({}); drafting locally until it is back", options_.endpoint,
                   s.ok() ? std::string("stream closed") : s.error_message());
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, backoff, [&] { return stopping_; });
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

}  // namespace baton
