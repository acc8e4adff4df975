// LinkKvSender (kv_link_transport.h): the prefill side of DecodeNode.KvLink. Per peer: one stream,
// one link, a writer thread that turns queued puts into "announce on the stream, then post the
// sends on the link" (in that order, so that D posts its receives in ours) and watches finish
// deadlines, and a reader thread that hands D's replies to the transfers' done callbacks.
// Must not: let a put or finish wait on the network; post a piece D has not been told of; report
// a transfer twice; join a peer's thread from that thread.
#include <condition_variable>
#include <deque>
#include <future>
#include <optional>
#include <thread>
#include <variant>

#include "common/status.h"
#include "kv_transfer/copy_range.h"
#include "kv_transfer/kv_link_transport.h"
#include "security/grpc_credentials.h"

namespace baton::kv {

using baton::node::v1::KvLinkMessage;
using baton::node::v1::KvLinkReply;

namespace {

struct PutCommand {
  std::uint64_t transfer = 0;
  std::string request_id;
  std::string capability;
  std::int32_t pool = 0;
  std::vector<Copy> copies;
};
struct FinishCommand {
  std::uint64_t transfer = 0;
  std::string request_id;
  Deadline deadline{};
  DoneCallback done;  // empty: the handle was dropped without finish(); D's answer is ignored
  absl::Status local_error;  // a put this side rejected (never announced)
  std::int64_t bytes = 0;    // announced; D's answer must count as many
};
using Command = std::variant<PutCommand, FinishCommand>;

struct Pending {
  std::string request_id;
  Deadline deadline{};
  DoneCallback done;
  absl::Status local_error;
  std::int64_t bytes = 0;
};

using Report = std::pair<DoneCallback, absl::Status>;

void run(std::vector<Report>& reports) {
  for (auto& [done, status] : reports) done(std::move(status));
  reports.clear();
}

}  // namespace

// One peer's stream and link, shared by the sender, its two threads and the transfer handles; it
// owns no thread (the sender joins them), so dropping the last handle anywhere is safe.
class LinkKvSender::Peer {
 public:
  Peer(std::string address, std::uint64_t instance, std::vector<MemoryRegion> pools, std::uint64_t max_piece)
      : address_(std::move(address)), instance_(instance), pools_(std::move(pools)), max_piece_(max_piece) {}

  ~Peer() {
    if (stream_) {
      context_.TryCancel();
      stream_->Finish();  // both threads have exited: nothing reads or writes any more
    }
  }

  const std::string& address() const { return address_; }
  std::uint64_t instance() const { return instance_; }
  const std::vector<MemoryRegion>& pools() const { return pools_; }
  std::uint64_t next_transfer() { return ++last_transfer_; }

  bool alive() const {
    std::lock_guard lock(mu_);
    return !dead_;
  }

  // Opens the stream, says hello, and once D has accepted it joins the link with D and waits for
  // D's answer, all by `deadline`.
  absl::Status connect(KvLinkFactory& factory, Deadline deadline) {
    channel_ = grpc::CreateChannel(address_, security::cluster_channel_credentials());
    stub_ = baton::node::v1::DecodeNode::NewStub(channel_);
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() + (deadline - std::chrono::steady_clock::now()))) {
      return absl::UnavailableError(str_cat("KV link to ", address_, ": the decode node cannot be reached"));
    }
    stream_ = stub_->KvLink(&context_);
    BATON_ASSIGN_OR_RETURN(const std::string link_id, factory.new_link_id());
    KvLinkMessage hello;
    hello.mutable_hello()->set_link_kind(std::string(factory.kind()));
    hello.mutable_hello()->set_link_id(link_id);
    hello.mutable_hello()->set_max_segment_bytes(max_piece_);
    for (const MemoryRegion& p : pools_) hello.mutable_hello()->add_pool_names(p.name);
    if (!stream_->Write(hello)) return stream_ended_status("saying hello");
    // D answers twice: whether it takes the hello (then it joins), and whether it joined.
    auto read_answer = [this] {
      KvLinkReply reply;
      return stream_->Read(&reply) ? std::optional<KvLinkReply>(reply) : std::nullopt;
    };
    auto accepted = std::async(std::launch::async, read_answer);
    if (accepted.wait_until(deadline) != std::future_status::ready) context_.TryCancel();
    const std::optional<KvLinkReply> acceptance = accepted.get();
    if (!acceptance) return stream_ended_status("waiting for the decode node to accept the link");
    if (acceptance->code() != 0) return absl::Status(static_cast<absl::StatusCode>(acceptance->code()), acceptance->error());
    std::atomic<bool> refused{false};
    auto answer = std::async(std::launch::async, [&] {
      std::optional<KvLinkReply> reply = read_answer();
      if (!reply || reply->code() != 0) refused = true;  // D will not join: stop waiting for it
      return reply;
    });
    auto joined = factory.join(link_id, 0, deadline, [&refused] { return refused.load(); });
    if (!joined.ok()) {
      if (answer.wait_until(std::chrono::steady_clock::now()) != std::future_status::ready) context_.TryCancel();
      const std::optional<KvLinkReply> refusal = answer.get();
      if (refusal && refusal->code() != 0) return absl::Status(static_cast<absl::StatusCode>(refusal->code()), refusal->error());
      return absl::Status(joined.status().code(),
                          str_cat("KV link to ", address_, ": cannot join the link: ", joined.status().message()));
    }
    link_ = std::move(*joined);
    if (answer.wait_until(deadline) != std::future_status::ready) context_.TryCancel();
    const std::optional<KvLinkReply> reply = answer.get();
    if (!reply) return stream_ended_status("waiting for the decode node to join");
    if (reply->code() != 0) return absl::Status(static_cast<absl::StatusCode>(reply->code()), reply->error());
    return absl::OkStatus();
  }

  void push(Command command) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(command));
    }
    cv_.notify_one();
  }

  // Fails the peer: aborts the link, ends the stream, and reports every waiting transfer (`late`,
  // if waiting, gets DEADLINE_EXCEEDED, the rest `why`). Later finishes report `why` at once.
  void fail(absl::Status why, std::uint64_t late = 0) {
    std::vector<Report> reports;
    {
      std::lock_guard lock(mu_);
      fail_locked(std::move(why), late, reports);
    }
    cv_.notify_all();
    run(reports);
  }

  // Ends both threads' loops (the sender then joins them).
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    fail(absl::CancelledError(str_cat("KV link to ", address_, ": the sender is shutting down")));
  }

  void writer_loop() {
    std::unique_lock lock(mu_);
    std::vector<Report> reports;
    for (;;) {
      expire_locked(reports);
      if (!reports.empty()) {
        lock.unlock();
        run(reports);
        lock.lock();
        continue;
      }
      if (queue_.empty()) {
        if (stopping_) break;
        std::optional<Deadline> earliest;
        for (const auto& [id, p] : pending_) earliest = std::min(earliest.value_or(p.deadline), p.deadline);
        if (earliest && !dead_) {
          cv_.wait_until(lock, *earliest);
        } else {
          cv_.wait(lock);
        }
        continue;
      }
      Command command = std::move(queue_.front());
      queue_.pop_front();
      if (auto* put = std::get_if<PutCommand>(&command)) {
        if (dead_) continue;  // its finish reports why
        lock.unlock();
        absl::Status posted = announce_and_send(*put);
        lock.lock();
        if (!posted.ok()) fail_locked(std::move(posted), 0, reports);
      } else {
        auto& finish = std::get<FinishCommand>(command);
        if (dead_) {
          if (finish.done) reports.emplace_back(std::move(finish.done), finish.local_error.ok() ? death_ : finish.local_error);
          continue;
        }
        if (finish.done) {
          pending_[finish.transfer] =
              Pending{finish.request_id, finish.deadline, std::move(finish.done), finish.local_error, finish.bytes};
        }
        lock.unlock();
        KvLinkMessage message;
        message.mutable_finish()->set_transfer(finish.transfer);
        const bool written = stream_->Write(message);
        lock.lock();
        if (!written) fail_locked(stream_ended_status("finishing request " + finish.request_id), 0, reports);
      }
    }
    lock.unlock();
    run(reports);
  }

  void reader_loop() {
    KvLinkReply reply;
    while (stream_->Read(&reply)) {
      std::optional<Pending> p;
      {
        std::lock_guard lock(mu_);
        if (auto it = pending_.find(reply.transfer()); it != pending_.end()) {
          p = std::move(it->second);
          pending_.erase(it);
        }
      }
      if (!p) continue;  // a dropped handle's transfer, or one already failed
      if (!p->local_error.ok()) {
        p->done(p->local_error);
      } else if (reply.code() != 0) {
        p->done(absl::Status(static_cast<absl::StatusCode>(reply.code()), reply.error()));
      } else if (reply.bytes() != p->bytes) {
        // The two sides disagree on what this transfer was: a bug, never a success.
        p->done(absl::InternalError(str_cat("KV link transfer of request ", p->request_id, " to ", address_, ": ",
                                            p->bytes, " bytes announced, the decode node received ", reply.bytes())));
      } else {
        p->done(absl::OkStatus());
      }
    }
    fail(stream_ended_status("reading the decode node's answers"));
  }

 private:
  absl::Status stream_ended_status(const std::string& doing) const {
    return absl::UnavailableError(str_cat("KV link to ", address_, ": the stream ended while ", doing));
  }

  // Tells D of the copies, then posts their sends (one piece per max_piece_ bytes at most).
  absl::Status announce_and_send(const PutCommand& put) {
    KvLinkMessage message;
    auto* m = message.mutable_put();
    m->set_transfer(put.transfer);
    m->set_request_id(put.request_id);
    m->set_capability(put.capability);
    m->set_pool(put.pool);
    std::vector<LinkPiece> pieces;
    char* base = static_cast<char*>(pools_[put.pool].base);
    for (const Copy& c : put.copies) {
      auto* copy = m->add_copies();
      copy->set_dst_offset(c.dst_offset);
      copy->set_bytes(c.bytes);
      for_each_piece(c.bytes, max_piece_, [&](std::uint64_t offset, std::uint64_t bytes) {
        pieces.push_back(LinkPiece{base + c.src_offset + offset, bytes});
      });
    }
    if (!stream_->Write(message)) return stream_ended_status("announcing request " + put.request_id);
    absl::Status posted = link_->post_sends(pieces);
    if (!posted.ok()) {
      return absl::UnavailableError(str_cat("KV link to ", address_, ": request ", put.request_id,
                                            ": the link broke: ", posted.message()));
    }
    return absl::OkStatus();
  }

  void expire_locked(std::vector<Report>& reports) {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [id, p] : pending_) {
      if (p.deadline <= now) {
        // Its pieces may never match now: the link cannot be trusted for anything after them.
        fail_locked(absl::UnavailableError(str_cat("KV link to ", address_, ": aborted because request ", p.request_id,
                                                   " passed its deadline")),
                    id, reports);
        return;
      }
    }
  }

  void fail_locked(absl::Status why, std::uint64_t late, std::vector<Report>& reports) {
    if (!dead_) {
      dead_ = true;
      death_ = why;
      context_.TryCancel();
      if (link_) link_->abort();
    }
    for (auto& [id, p] : pending_) {
      absl::Status s = !p.local_error.ok() ? p.local_error
                       : id == late ? absl::DeadlineExceededError(str_cat("KV link transfer of request ", p.request_id, " to ",
                                                                         address_, " did not finish by its deadline"))
                                    : death_;
      reports.emplace_back(std::move(p.done), std::move(s));
    }
    pending_.clear();
  }

  const std::string address_;
  const std::uint64_t instance_;
  const std::vector<MemoryRegion> pools_;
  const std::uint64_t max_piece_;
  std::atomic<std::uint64_t> last_transfer_{0};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<baton::node::v1::DecodeNode::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<KvLinkMessage, KvLinkReply>> stream_;
  std::unique_ptr<KvLink> link_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> queue_;
  std::map<std::uint64_t, Pending> pending_;  // finished by us, not yet answered
  bool dead_ = false;
  absl::Status death_;
  bool stopping_ = false;
};

namespace {

class LinkTransfer final : public KvTransfer {
 public:
  LinkTransfer(std::shared_ptr<LinkKvSender::Peer> peer, std::string request_id, std::string capability, std::string path)
      : peer_(std::move(peer)),
        transfer_(peer_->next_transfer()),
        request_id_(std::move(request_id)),
        capability_(std::move(capability)),
        path_(std::move(path)) {}

  ~LinkTransfer() override {
    if (!finished_) peer_->push(FinishCommand{transfer_, request_id_, Deadline{}, DoneCallback{}, absl::OkStatus(), posted_});
  }

  void put(std::int32_t pool, std::span<const Copy> copies) override {
    if (finished_ || copies.empty()) return;
    const std::string where = str_cat("KV link transfer of request ", request_id_);
    if (pool < 0 || static_cast<std::size_t>(pool) >= peer_->pools().size()) {
      if (error_.ok()) error_ = absl::InvalidArgumentError(str_cat(where, ": pool ", pool, " is out of range (",
                                                                   peer_->pools().size(), " pools)"));
      return;
    }
    std::vector<Copy> kept;
    kept.reserve(copies.size());
    for (const Copy& c : copies) {
      absl::Status ok = check_pool_range("source", where, pool, c.src_offset, c.bytes, peer_->pools()[pool].bytes);
      if (!ok.ok()) {
        if (error_.ok()) error_ = std::move(ok);
        return;  // none of this put goes out: D hears of nothing it would wait for
      }
      if (c.bytes > 0) kept.push_back(c);
    }
    merge_adjacent_copies(kept);
    for (const Copy& c : kept) posted_ += static_cast<std::int64_t>(c.bytes);
    peer_->push(PutCommand{transfer_, request_id_, capability_, pool, std::move(kept)});
  }

  void finish(Deadline deadline, DoneCallback done) override {
    if (finished_) return;
    finished_ = true;
    peer_->push(FinishCommand{transfer_, request_id_, deadline, std::move(done), error_, posted_});
  }

  std::int64_t bytes_posted() const override { return posted_; }
  std::string_view path() const override { return path_; }

 private:
  std::shared_ptr<LinkKvSender::Peer> peer_;
  const std::uint64_t transfer_;
  const std::string request_id_;
  const std::string capability_;
  const std::string path_;
  absl::Status error_;
  std::int64_t posted_ = 0;
  bool finished_ = false;
};

}  // namespace

// The sender's threads of a peer; the sender joins them when the peer is dropped.
struct LinkKvSender::PeerThreads {
  std::shared_ptr<Peer> peer;
  std::thread writer, reader;
  void stop_and_join() {
    peer->stop();
    if (writer.joinable()) writer.join();
    if (reader.joinable()) reader.join();
  }
};

LinkKvSender::LinkKvSender(std::vector<MemoryRegion> local_pools, std::shared_ptr<KvLinkFactory> factory,
                           LinkSenderOptions options)
    : pools_(std::move(local_pools)),
      factory_(std::move(factory)),
      options_(options),
      descriptor_(link_descriptor(factory_->kind())) {}

LinkKvSender::~LinkKvSender() {
  PeerMap peers;
  std::vector<std::unique_ptr<PeerThreads>> retired;
  {
    std::lock_guard lock(mu_);
    peers.swap(peers_);
    retired.swap(retired_);
  }
  for (auto& [address, p] : peers) p->stop_and_join();
  for (auto& p : retired) p->stop_and_join();
}

std::int64_t LinkKvSender::links_made() const {
  std::lock_guard lock(mu_);
  return links_made_;
}

// Peers retired under the sender's lock, failed once it is released (failing reports transfers,
// whose callbacks may call begin()). Declared before the lock, so destroyed after it.
struct LinkKvSender::FailLater {
  std::vector<std::shared_ptr<Peer>> peers;
  ~FailLater() {
    for (const auto& p : peers) {
      p->fail(absl::UnavailableError(str_cat("KV link to ", p->address(), ": dropped (the peer changed or failed)")));
    }
  }
};

void LinkKvSender::retire_locked(PeerMap::iterator it, FailLater& fail_later) {
  fail_later.peers.push_back(it->second->peer);
  retired_.push_back(std::move(it->second));
  peers_.erase(it);
}

void LinkKvSender::reap(std::unique_lock<std::mutex>& lock) {
  // A retired peer's threads end soon after it failed; join those that are not this thread.
  std::vector<std::unique_ptr<PeerThreads>> done;
  const auto self = std::this_thread::get_id();
  for (auto it = retired_.begin(); it != retired_.end();) {
    if ((*it)->writer.get_id() != self && (*it)->reader.get_id() != self) {
      done.push_back(std::move(*it));
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
  lock.unlock();
  for (auto& p : done) p->stop_and_join();
  lock.lock();
}

absl::StatusOr<std::unique_ptr<KvTransfer>> LinkKvSender::begin(const TransferTarget& target) {
  if (target.descriptor != descriptor_) {
    return absl::InvalidArgumentError(str_cat("KV link sender (", factory_->kind(), "): request ", target.request_id,
                                              ": the peer's descriptor '", target.descriptor, "' is not '", descriptor_, "'"));
  }
  if (target.peer_address.empty()) {
    return absl::InvalidArgumentError(str_cat("KV link sender: request ", target.request_id, ": no peer address"));
  }
  const Deadline deadline = std::chrono::steady_clock::now() + options_.begin_timeout;
  FailLater fail_later;
  std::unique_lock lock(mu_);
  reap(lock);
  for (;;) {
    auto it = peers_.find(target.peer_address);
    if (it != peers_.end() && (it->second->peer->instance() != target.peer_instance || !it->second->peer->alive())) {
      retire_locked(it, fail_later);
      it = peers_.end();
    }
    if (it != peers_.end()) {
      return std::make_unique<LinkTransfer>(it->second->peer, target.request_id, target.capability,
                                            std::string(factory_->kind()));
    }
    if (connecting_.count(target.peer_address) == 0) break;
    // Another caller is making this peer's link: wait for it.
    if (connected_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return absl::DeadlineExceededError(str_cat("KV link to ", target.peer_address, ": request ", target.request_id,
                                                 ": another caller's link set-up did not end in time"));
    }
  }
  connecting_.insert(target.peer_address);
  lock.unlock();
  auto peer = std::make_shared<Peer>(target.peer_address, target.peer_instance, pools_, factory_->max_piece_bytes());
  absl::Status connected = peer->connect(*factory_, deadline);
  lock.lock();
  connecting_.erase(target.peer_address);
  connected_.notify_all();
  if (!connected.ok()) return connected;
  ++links_made_;
  auto threads = std::make_unique<PeerThreads>();
  threads->peer = peer;
  Peer* raw = peer.get();
  threads->writer = std::thread([raw] { raw->writer_loop(); });
  threads->reader = std::thread([raw] { raw->reader_loop(); });
  peers_[target.peer_address] = std::move(threads);
  return std::make_unique<LinkTransfer>(std::move(peer), target.request_id, target.capability,
                                        std::string(factory_->kind()));
}

void LinkKvSender::invalidate(const std::string& peer_address) {
  FailLater fail_later;
  std::unique_lock lock(mu_);
  if (auto it = peers_.find(peer_address); it != peers_.end()) retire_locked(it, fail_later);
}

}  // namespace baton::kv
