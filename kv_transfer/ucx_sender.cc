// UcxKvSender (ucx_transport.h): the transport thread that owns the sender's UCP worker. Callers
// hand it work through a CommandQueue; it posts puts, flushes at finish, keeps the per-peer
// connection cache, enforces deadlines and reports each transfer once.
#include <algorithm>
#include <atomic>
#include <thread>
#include <unordered_map>

#include "common/status.h"
#include "kv_transfer/copy_range.h"
#include "kv_transfer/ucx_sender_state.h"
#include "kv_transfer/ucx_transport.h"
#include "spdlog/spdlog.h"

namespace baton::kv {
namespace {

// A transfer handle dropped without finish() still flushes (its puts may be in flight); this
// bounds how long the thread keeps it.
constexpr auto kAbandonedFlushTimeout = std::chrono::seconds(30);
// At shutdown, how long the thread waits for endpoint closes to complete.
constexpr auto kCloseTimeout = std::chrono::seconds(2);

class UcxKvTransfer final : public KvTransfer {
 public:
  UcxKvTransfer(std::shared_ptr<CommandQueue> queue, std::shared_ptr<TransferState> state)
      : queue_(std::move(queue)), state_(std::move(state)) {}

  ~UcxKvTransfer() override {
    if (finished_) return;
    Command cmd = FinishCmd{state_, std::chrono::steady_clock::now() + kAbandonedFlushTimeout, nullptr};
    queue_->push(cmd);
  }

  void put(std::int32_t pool, std::span<const Copy> copies) override {
    BATON_CHECK(!finished_, "put() after finish() on ", state_->where());
    std::int64_t bytes = 0;
    for (const Copy& c : copies) bytes += static_cast<std::int64_t>(c.bytes);
    bytes_posted_.fetch_add(bytes, std::memory_order_relaxed);
    Command cmd = PutCmd{state_, pool, std::vector<Copy>(copies.begin(), copies.end())};
    queue_->push(cmd);  // a closed queue: the sender is gone and finish() says so
  }

  void finish(Deadline deadline, DoneCallback done) override {
    BATON_CHECK(!finished_, "finish() called twice on ", state_->where());
    finished_ = true;
    Command cmd = FinishCmd{state_, deadline, std::move(done)};
    if (!queue_->push(cmd)) {
      auto& finish = std::get<FinishCmd>(cmd);
      if (finish.done) finish.done(absl::CancelledError(str_cat(state_->where(), ": the sender was destroyed")));
    }
  }

  std::int64_t bytes_posted() const override { return bytes_posted_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<CommandQueue> queue_;
  std::shared_ptr<TransferState> state_;
  std::atomic<std::int64_t> bytes_posted_{0};
  bool finished_ = false;
};

}  // namespace

class UcxKvSender::Loop {
 public:
  Loop(std::vector<MemoryRegion> local, UcxSenderOptions options) : local_(std::move(local)), options_(options) {}

  ~Loop() {
    if (thread_.joinable()) {
      stopping_.store(true, std::memory_order_release);
      queue_->close();
      worker_->wake_fd()->signal();
      thread_.join();
    }
    active_.clear();
    cache_.clear();
    for (ucp_mem_h m : local_memh_) worker_->unmap(m);
  }

  absl::Status init() {
    BATON_ASSIGN_OR_RETURN(worker_, UcxWorker::create("ucx sender"));
    for (const MemoryRegion& pool : local_) {
      BATON_ASSIGN_OR_RETURN(ucp_mem_h memh, worker_->map(pool));
      local_memh_.push_back(memh);
    }
    queue_ = std::make_shared<CommandQueue>(worker_->wake_fd());
    thread_ = std::thread([this] { run(); });
    return absl::OkStatus();
  }

  std::int64_t connections_made() const { return connections_made_.load(); }

  absl::StatusOr<std::unique_ptr<KvTransfer>> begin(const TransferTarget& target) {
    const std::string where = str_cat("ucx begin(request ", target.request_id, ", peer ", target.peer_address, ")");
    auto decoded = decode_ucx_descriptor(target.descriptor);
    if (!decoded.ok()) return absl::InvalidArgumentError(str_cat(where, ": ", decoded.status().message()));
    for (std::size_t i = 0; i < std::min(local_.size(), decoded->pools.size()); ++i) {
      if (local_[i].name != decoded->pools[i].name) {
        return absl::InvalidArgumentError(str_cat(where, ": pool ", i, " is \"", local_[i].name,
                                                  "\" here and \"", decoded->pools[i].name, "\" on the peer"));
      }
    }
    auto state = std::make_shared<TransferState>();
    state->request_id = target.request_id;
    state->address = target.peer_address;
    state->loop = this;

    if (std::this_thread::get_id() == thread_.get_id()) {  // begin() from a done callback
      BATON_RETURN_IF_ERROR(connect(state, *decoded, target.peer_instance, nullptr));  // no wait here
      return std::make_unique<UcxKvTransfer>(queue_, state);
    }
    auto result = std::make_shared<std::promise<absl::Status>>();
    auto answered = result->get_future();
    Command cmd = ConnectCmd{state, std::move(*decoded), target.peer_instance, result};
    if (!queue_->push(cmd)) return absl::CancelledError(str_cat(where, ": the sender is shutting down"));
    absl::Status connected = answered.wait_for(options_.begin_timeout) == std::future_status::ready
                                 ? answered.get()
                                 : absl::DeadlineExceededError(str_cat("no connection within ",
                                                                       options_.begin_timeout.count(), " ms"));
    if (!connected.ok()) {
      Command abandon = FinishCmd{state, std::chrono::steady_clock::now(), nullptr};  // drops it
      queue_->push(abandon);
      return absl::Status(connected.code(), str_cat(where, ": ", connected.message()));
    }
    return std::make_unique<UcxKvTransfer>(queue_, state);
  }

  void invalidate(const std::string& address) {
    Command cmd = InvalidateCmd{address};
    queue_->push(cmd);
  }

 private:
  // ---- transport thread: UCX callbacks (inside ucp_worker_progress) --------------------------

  static void on_put_done(void* request, ucs_status_t status, void* user_data) {
    auto* t = static_cast<TransferState*>(user_data);
    --t->in_flight;
    if (status != UCS_OK && t->error.ok()) t->error = ucs_to_status(status, str_cat(t->where(), ": put"));
    ucp_request_free(request);
    t->loop->touched_.push_back(t);
  }

  static void on_flush_done(void* request, ucs_status_t status, void* user_data) {
    auto* t = static_cast<TransferState*>(user_data);
    t->flush_pending = false;
    if (status != UCS_OK && t->error.ok()) t->error = ucs_to_status(status, str_cat(t->where(), ": flush"));
    ucp_request_free(request);
    t->loop->touched_.push_back(t);
  }

  static void on_wireup_done(void* request, ucs_status_t status, void* user_data) {
    auto* p = static_cast<Peer*>(user_data);
    ucp_request_free(request);
    if (status == UCS_OK) {
      p->ready = true;
      p->answer_waiters(absl::OkStatus());
    } else if (p->failure.ok()) {
      p->failure = ucs_to_status(status, str_cat("ucx peer ", p->address, ": wire-up"));
      p->loop->failed_peers_.push_back(p->shared_from_this());
    }
    std::erase_if(p->loop->wiring_, [p](const std::shared_ptr<Peer>& w) { return w.get() == p; });
  }

  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* p = static_cast<Peer*>(arg);
    if (p->closed) return;
    if (p->failure.ok()) p->failure = ucs_to_status(status, str_cat("ucx peer ", p->address));
    // Closing from inside the error callback is not allowed: the loop closes it after progress.
    p->loop->failed_peers_.push_back(p->shared_from_this());
  }

  void run() {
    while (!stopping_.load(std::memory_order_acquire)) {
      for (Command& cmd : queue_->take()) handle(cmd);
      worker_->progress();
      close_failed_peers();
      reap_closing();
      expire_deadlines();
      settle();
      run_dones();
      worker_->wait(next_deadline());
    }
    shutdown();
  }

  void handle(Command& cmd) {
    if (auto* c = std::get_if<ConnectCmd>(&cmd)) {
      absl::Status now = connect(c->transfer, c->descriptor, c->instance, c->result);
      if (!now.ok()) c->result->set_value(std::move(now));
    } else if (auto* p = std::get_if<PutCmd>(&cmd)) {
      post_puts(*p->transfer, p->pool, p->copies);
    } else if (auto* f = std::get_if<FinishCmd>(&cmd)) {
      start_finish(f->transfer, f->deadline, std::move(f->done));
    } else if (auto* inv = std::get_if<InvalidateCmd>(&cmd)) {
      auto it = cache_.find(inv->address);
      if (it != cache_.end()) close_peer(it->second, absl::UnavailableError(str_cat("ucx peer ", inv->address, " was invalidated")));
    }
  }

  // Attaches the transfer to the cached connection, or to a new one (replacing one to an older
  // instance). Returns an error only for what fails at once; `on_ready` (may be null) is answered
  // when the connection's wire-up has completed or failed.
  absl::Status connect(const std::shared_ptr<TransferState>& t, const UcxDescriptor& desc, std::uint64_t instance,
                       std::shared_ptr<std::promise<absl::Status>> on_ready) {
    auto it = cache_.find(t->address);
    if (it != cache_.end() && it->second->instance == instance && it->second->failure.ok()) {
      attach(t, it->second, std::move(on_ready));
      return absl::OkStatus();
    }
    if (it != cache_.end()) {
      close_peer(it->second, absl::UnavailableError(str_cat("ucx peer ", t->address, " restarted (instance ",
                                                            it->second->instance, " -> ", instance, ")")));
    }
    auto peer = std::make_shared<Peer>();
    peer->address = t->address;
    peer->instance = instance;
    peer->loop = this;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(desc.worker_address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &Loop::on_peer_error;
    params.err_handler.arg = peer.get();
    ucs_status_t st = ucp_ep_create(worker_->worker(), &params, &peer->ep);
    if (st != UCS_OK) return ucs_to_status(st, str_cat(t->where(), ": ucp_ep_create"));
    for (std::size_t i = 0; i < desc.pools.size(); ++i) {
      ucp_rkey_h rkey = nullptr;
      st = ucp_ep_rkey_unpack(peer->ep, desc.pools[i].rkey.data(), &rkey);
      if (st != UCS_OK) {
        absl::Status why = ucs_to_status(st, str_cat(t->where(), ": descriptor pool ", i, " rkey"));
        close_peer(peer, why);
        return absl::InvalidArgumentError(why.message());
      }
      peer->rkeys.push_back(rkey);
      UcxRemotePool remote = desc.pools[i];
      remote.rkey.clear();
      peer->pools.push_back(std::move(remote));
    }
    cache_[t->address] = peer;
    connections_made_.fetch_add(1);
    // A flush of the fresh endpoint completes once its wire-up has: begin() waits for it, so an
    // unreachable peer is reported there and the endpoint is seldom closed half wired (UCX 1.13
    // aborts when it purges a pending wire-up message).
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &Loop::on_wireup_done;
    param.user_data = peer.get();
    void* req = ucp_ep_flush_nbx(peer->ep, &param);
    if (req == nullptr) {
      peer->ready = true;
    } else if (UCS_PTR_IS_ERR(req)) {
      absl::Status why = ucs_to_status(UCS_PTR_STATUS(req), str_cat(t->where(), ": wire-up flush"));
      close_peer(peer, why);
      return why;
    } else {
      wiring_.push_back(peer);
    }
    attach(t, peer, std::move(on_ready));
    return absl::OkStatus();
  }

  void attach(const std::shared_ptr<TransferState>& t, const std::shared_ptr<Peer>& peer,
              std::shared_ptr<std::promise<absl::Status>> on_ready) {
    t->peer = peer;
    active_.emplace(t.get(), t);
    if (!on_ready) return;
    if (peer->ready) {
      on_ready->set_value(absl::OkStatus());
    } else {
      peer->waiters.push_back(std::move(on_ready));
    }
  }

  void post_puts(TransferState& t, std::int32_t pool, const std::vector<Copy>& copies) {
    if (t.reported || t.finishing || !t.error.ok()) return;
    if (t.peer->closed) {
      t.error = absl::UnavailableError(str_cat(t.where(), ": connection closed: ", t.peer->failure.message()));
      return;
    }
    const Peer& p = *t.peer;
    if (pool < 0 || static_cast<std::size_t>(pool) >= local_.size() || static_cast<std::size_t>(pool) >= p.pools.size()) {
      t.error = absl::InvalidArgumentError(str_cat(t.where(), ": pool ", pool, " is out of range (", local_.size(),
                                                   " local pools, ", p.pools.size(), " on the peer)"));
      return;
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.cb.send = &Loop::on_put_done;
    param.user_data = &t;
    param.memh = local_memh_[pool];
    auto* src_base = static_cast<const char*>(local_[pool].base);
    for (std::size_t i = 0; i < copies.size(); ++i) {
      const Copy& c = copies[i];
      if (c.bytes == 0) continue;
      const std::string copy_where = str_cat(t.where(), ": copy ", i);
      absl::Status bounds = check_pool_range("local", copy_where, pool, c.src_offset, c.bytes, local_[pool].bytes);
      if (bounds.ok()) bounds = check_pool_range("peer", copy_where, pool, c.dst_offset, c.bytes, p.pools[pool].bytes);
      if (!bounds.ok()) {
        t.error = std::move(bounds);
        return;
      }
      void* req = ucp_put_nbx(p.ep, src_base + c.src_offset, c.bytes, p.pools[pool].base + c.dst_offset,
                              p.rkeys[pool], &param);
      if (req == nullptr) continue;  // completed in place
      if (UCS_PTR_IS_ERR(req)) {
        t.error = ucs_to_status(UCS_PTR_STATUS(req), str_cat(copy_where, ": ucp_put_nbx"));
        return;
      }
      ++t.in_flight;
    }
  }

  void start_finish(const std::shared_ptr<TransferState>& t, Deadline deadline, DoneCallback done) {
    if (!active_.contains(t.get())) {  // its connect never ran (begin timed out) or it already left
      if (done) dones_.emplace_back(std::move(done), absl::CancelledError(str_cat(t->where(), ": not connected")));
      return;
    }
    t->finishing = true;
    t->deadline = deadline;
    t->done = std::move(done);
    if (t->error.ok() && t->peer->closed) {
      t->error = absl::UnavailableError(str_cat(t->where(), ": connection closed: ", t->peer->failure.message()));
    }
    if (t->error.ok()) {
      // Completes once every earlier operation on the endpoint is complete at the peer.
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = &Loop::on_flush_done;
      param.user_data = t.get();
      void* req = ucp_ep_flush_nbx(t->peer->ep, &param);
      if (UCS_PTR_IS_ERR(req)) {
        t->error = ucs_to_status(UCS_PTR_STATUS(req), str_cat(t->where(), ": ucp_ep_flush_nbx"));
      } else if (req != nullptr) {
        t->flush_pending = true;
      }
    }
    touched_.push_back(t.get());
  }

  // Reports transfers that are done and forgets those with nothing left in flight.
  void settle() {
    std::vector<TransferState*> touched;
    touched.swap(touched_);
    for (TransferState* key : touched) {
      auto it = active_.find(key);
      if (it == active_.end()) continue;  // already forgotten (a duplicate entry)
      TransferState& t = *it->second;
      const bool quiet = t.in_flight == 0 && !t.flush_pending;
      if (t.finishing && !t.reported && quiet) report(t, t.error);
      if (t.reported && quiet) active_.erase(it);
    }
  }

  void report(TransferState& t, absl::Status status) {
    t.reported = true;
    if (t.done) dones_.emplace_back(std::move(t.done), std::move(status));
    t.done = nullptr;
  }

  void run_dones() {
    std::vector<std::pair<DoneCallback, absl::Status>> dones;
    dones.swap(dones_);
    for (auto& [done, status] : dones) done(std::move(status));
  }

  void expire_deadlines() {
    const Deadline now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<Peer>> to_close;
    for (auto& [key, t] : active_) {
      if (!t->finishing || t->reported || now < t->deadline) continue;
      report(*t, absl::DeadlineExceededError(str_cat(t->where(), ": not complete at the deadline (", t->in_flight,
                                                     " puts", t->flush_pending ? " and the flush" : "",
                                                     " in flight); the connection is dropped")));
      to_close.push_back(t->peer);
      touched_.push_back(key);
    }
    // Force-closing cancels whatever is still in flight, so the buffers are no longer read.
    for (auto& p : to_close) close_peer(p, absl::UnavailableError(str_cat("ucx peer ", p->address, " missed a deadline")));
  }

  std::optional<Deadline> next_deadline() const {
    std::optional<Deadline> next;
    for (const auto& [key, t] : active_) {
      if (t->finishing && !t->reported && (!next || t->deadline < *next)) next = t->deadline;
    }
    return next;
  }

  void close_failed_peers() {
    std::vector<std::shared_ptr<Peer>> failed;
    failed.swap(failed_peers_);
    for (auto& p : failed) {
      spdlog::warn("{}; dropping the connection", std::string(p->failure.message()));
      close_peer(p, p->failure);
    }
  }

  // Drops the endpoint. Forced: whatever is still outstanding on it completes with an error at
  // once (for a failed, replaced or late peer). Otherwise it is flushed first (shutdown). Its
  // keys go when the close has completed, after every operation that used them.
  void close_peer(const std::shared_ptr<Peer>& p, const absl::Status& why, bool force = true) {
    if (p->closed) return;
    p->closed = true;
    if (p->failure.ok()) p->failure = why;
    p->answer_waiters(absl::UnavailableError(p->failure.message()));
    auto it = cache_.find(p->address);
    if (it != cache_.end() && it->second == p) cache_.erase(it);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* req = ucp_ep_close_nbx(p->ep, &param);
    p->ep = nullptr;
    if (UCS_PTR_IS_PTR(req)) {
      closing_.push_back({p, req});
    } else {
      destroy_rkeys(*p);
    }
  }

  static void destroy_rkeys(Peer& p) {
    for (ucp_rkey_h rkey : p.rkeys) ucp_rkey_destroy(rkey);
    p.rkeys.clear();
  }

  void reap_closing() {
    std::erase_if(closing_, [](Closing& c) {
      if (ucp_request_check_status(c.request) == UCS_INPROGRESS) return false;
      ucp_request_free(c.request);
      destroy_rkeys(*c.peer);
      return true;
    });
  }

  void shutdown() {
    for (Command& cmd : queue_->take()) {  // the queue is closed: this is the last of them
      if (auto* c = std::get_if<ConnectCmd>(&cmd)) {
        c->result->set_value(absl::CancelledError("ucx sender: shutting down"));
      } else if (auto* f = std::get_if<FinishCmd>(&cmd)) {
        if (f->done) dones_.emplace_back(std::move(f->done), absl::CancelledError(str_cat(f->transfer->where(), ": the sender was destroyed")));
      }
    }
    for (auto& [key, t] : active_) {
      if (t->finishing && !t->reported) report(*t, absl::CancelledError(str_cat(t->where(), ": the sender was destroyed")));
    }
    std::vector<std::shared_ptr<Peer>> peers;
    for (auto& [address, p] : cache_) peers.push_back(p);
    for (auto& p : peers) close_peer(p, absl::CancelledError("ucx sender: shutting down"), /*force=*/!p->failure.ok());
    const Deadline until = std::chrono::steady_clock::now() + kCloseTimeout;
    while (!closing_.empty() && std::chrono::steady_clock::now() < until) {
      worker_->progress();
      reap_closing();
      if (!closing_.empty()) worker_->wait(until);
    }
    for (Closing& c : closing_) {  // late: UCX releases the request when it completes
      ucp_request_free(c.request);
      destroy_rkeys(*c.peer);  // nothing progresses the worker any more
    }
    closing_.clear();
    run_dones();
  }

  std::vector<MemoryRegion> local_;
  UcxSenderOptions options_;
  std::unique_ptr<UcxWorker> worker_;
  std::vector<ucp_mem_h> local_memh_;
  std::shared_ptr<CommandQueue> queue_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> connections_made_{0};

  // Transport thread only.
  std::unordered_map<std::string, std::shared_ptr<Peer>> cache_;
  std::unordered_map<TransferState*, std::shared_ptr<TransferState>> active_;
  std::vector<TransferState*> touched_;  // completions since the last settle()
  std::vector<std::shared_ptr<Peer>> failed_peers_;
  struct Closing {
    std::shared_ptr<Peer> peer;
    void* request;
  };
  std::vector<Closing> closing_;                  // endpoint close requests
  std::vector<std::shared_ptr<Peer>> wiring_;     // peers whose wire-up flush is pending
  std::vector<std::pair<DoneCallback, absl::Status>> dones_;
};

UcxKvSender::UcxKvSender(std::unique_ptr<Loop> loop) : loop_(std::move(loop)) {}
UcxKvSender::~UcxKvSender() = default;

absl::StatusOr<std::unique_ptr<UcxKvSender>> UcxKvSender::create(std::vector<MemoryRegion> local_pools,
                                                                 UcxSenderOptions options) {
  if (local_pools.empty()) return absl::InvalidArgumentError("ucx sender: no pools given");
  for (std::size_t i = 0; i < local_pools.size(); ++i) {
    if (local_pools[i].base == nullptr || local_pools[i].bytes == 0) {
      return absl::InvalidArgumentError(
          str_cat("ucx sender: pool ", i, " (", local_pools[i].name, ") is empty or has no memory"));
    }
  }
  auto loop = std::make_unique<Loop>(std::move(local_pools), options);
  BATON_RETURN_IF_ERROR(loop->init());
  return std::unique_ptr<UcxKvSender>(new UcxKvSender(std::move(loop)));
}

absl::StatusOr<std::unique_ptr<KvTransfer>> UcxKvSender::begin(const TransferTarget& target) {
  return loop_->begin(target);
}

void UcxKvSender::invalidate(const std::string& peer_address) { loop_->invalidate(peer_address); }

std::int64_t UcxKvSender::connections_made() const { return loop_->connections_made(); }

}  // namespace baton::kv
