// UcxKvSender (ucx_transport.h): the transport thread that owns the sender's UCP worker. Callers
// hand it work through a CommandQueue; it posts puts, flushes at finish, enforces deadlines and
// reports each transfer once. Endpoints come from its UcxPeerCache.
// Must not: block a caller on the network (only begin() waits, for a new endpoint's wire-up, by a
// deadline); run a done callback inside ucp_worker_progress (they are collected and run after).
#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/status.h"
#include "kv_transfer/copy_range.h"
#include "kv_transfer/ucx_peer_cache.h"
#include "kv_transfer/ucx_sender_state.h"
#include "kv_transfer/ucx_shm_memory.h"
#include "spdlog/spdlog.h"
#include "kv_transfer/ucx_transport.h"

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
  std::string_view path() const override { return state_->shm_path.load() ? "shm" : "network"; }

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
    peers_.reset();
    for (ucp_mem_h m : local_memh_) worker_->unmap(m);
    for (ucp_mem_h m : shm_memh_) shm_worker_->unmap(m);
  }

  absl::Status init() {
    BATON_ASSIGN_OR_RETURN(worker_, UcxWorker::create("ucx sender"));
    for (const MemoryRegion& pool : local_) {
      BATON_ASSIGN_OR_RETURN(ucp_mem_h memh, worker_->map(pool));
      local_memh_.push_back(memh);
    }
    init_shared_memory();
    peers_ = std::make_unique<UcxPeerCache>(worker_.get(), shm_worker_.get());
    queue_ = std::make_shared<CommandQueue>(worker_->wake_fd());
    thread_ = std::thread([this] { run(); });
    return absl::OkStatus();
  }

  // The shared-memory worker (same transports as the receiver's, ucx_shm_memory.h), driven by the
  // transport thread beside the network one. Without it every peer takes the network path.
  void init_shared_memory() {
    std::optional<std::string> tls = shared_memory_transports(std::getenv("UCX_TLS"));
    if (!tls) return;
    UcxWorkerOptions options;
    options.tls = *tls;
    auto worker = UcxWorker::create("ucx shared-memory sender", options);
    absl::Status ok = worker.status();
    std::vector<ucp_mem_h> memh;
    for (std::size_t i = 0; ok.ok() && i < local_.size(); ++i) {
      auto m = (*worker)->map(local_[i]);
      ok = m.status();
      if (ok.ok()) memh.push_back(*m);
    }
    if (ok.ok()) ok = worker_->drive_also(worker->get());
    if (!ok.ok()) {
      spdlog::warn("ucx sender: no shared-memory path ({}); every peer takes the network path", std::string(ok.message()));
      if (worker.ok()) {
        for (ucp_mem_h m : memh) (*worker)->unmap(m);
      }
      return;
    }
    shm_worker_ = std::move(*worker);
    shm_memh_ = std::move(memh);
  }

  std::int64_t connections_made() const { return peers_->connections_made(); }

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

    if (std::this_thread::get_id() == thread_.get_id()) {  // begin() from a done callback: no waiting
      BATON_RETURN_IF_ERROR(connect(state, *decoded, target.peer_instance, nullptr));
      return std::make_unique<UcxKvTransfer>(queue_, state);
    }
    auto result = std::make_shared<std::promise<absl::Status>>();
    auto answered = result->get_future();
    Command cmd = ConnectCmd{state, std::move(*decoded), target.peer_instance, result};
    if (!queue_->push(cmd)) return absl::CancelledError(str_cat(where, ": the sender is shutting down"));
    absl::Status connected = answered.wait_for(options_.begin_timeout) == std::future_status::ready
                                 ? answered.get()
                                 : absl::DeadlineExceededError(str_cat(
                                       "no connection within ", options_.begin_timeout.count(), " ms (",
                                       state->connect_taken.load() ? "the peer's wire-up did not complete"
                                                                   : "the transport thread did not take the request",
                                       ")"));
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
  // ---- UCX callbacks (transport thread, inside ucp_worker_progress) ------------------------------

  static void on_put_done(void* request, ucs_status_t status, void* user_data) {
    auto* t = static_cast<TransferState*>(user_data);
    --t->in_flight;
    if (status != UCS_OK) record_failure(*t, status, "put");
    ucp_request_free(request);
    t->loop->touched_.push_back(t);
  }

  static void on_flush_done(void* request, ucs_status_t status, void* user_data) {
    auto* t = static_cast<TransferState*>(user_data);
    t->flush_pending = false;
    if (status != UCS_OK) record_failure(*t, status, "flush");
    ucp_request_free(request);
    t->loop->touched_.push_back(t);
  }

  // An operation cancelled because its endpoint was closed reports why it was closed (the peer
  // failed, restarted, was invalidated or missed a deadline), not just "canceled".
  static void record_failure(TransferState& t, ucs_status_t status, std::string_view what) {
    if (!t.error.ok()) return;
    if (t.peer->closed && !t.peer->failure.ok()) {
      t.error = absl::UnavailableError(str_cat(t.where(), ": ", what, " failed: ", t.peer->failure.message()));
    } else {
      t.error = ucs_to_status(status, str_cat(t.where(), ": ", what));
    }
  }

  // ---- transport thread ----------------------------------------------------------------------

  void run() {
    while (!stopping_.load(std::memory_order_acquire)) {
      for (Command& cmd : queue_->take()) handle(cmd);
      worker_->progress();
      peers_->after_progress();
      expire_deadlines();
      settle();
      run_dones();
      worker_->wait(next_deadline());
    }
    shutdown();
  }

  void handle(Command& cmd) {
    if (auto* c = std::get_if<ConnectCmd>(&cmd)) {
      c->transfer->connect_taken.store(true);
      absl::Status now = connect(c->transfer, c->descriptor, c->instance, c->result);
      if (!now.ok()) c->result->set_value(std::move(now));
    } else if (auto* p = std::get_if<PutCmd>(&cmd)) {
      post_puts(*p->transfer, p->pool, p->copies);
    } else if (auto* f = std::get_if<FinishCmd>(&cmd)) {
      start_finish(f->transfer, f->deadline, std::move(f->done));
    } else if (auto* inv = std::get_if<InvalidateCmd>(&cmd)) {
      peers_->invalidate(inv->address, absl::UnavailableError(str_cat("ucx peer ", inv->address, " was invalidated")));
    }
  }

  absl::Status connect(const std::shared_ptr<TransferState>& t, const UcxDescriptor& desc, std::uint64_t instance,
                       std::shared_ptr<std::promise<absl::Status>> on_ready) {
    BATON_ASSIGN_OR_RETURN(t->peer, peers_->get(t->address, instance, desc, t->where()));
    t->shm_path.store(t->peer->shm);  // before begin() is answered
    active_.emplace(t.get(), t);
    UcxPeerCache::when_ready(*t->peer, std::move(on_ready));
    return absl::OkStatus();
  }

  // Checks the whole batch, then posts it with adjacent copies merged: a bad copy posts nothing.
  void post_puts(TransferState& t, std::int32_t pool, std::vector<Copy>& copies) {
    if (t.reported || t.finishing || !t.error.ok()) return;
    const Peer& p = *t.peer;
    if (p.closed) {
      t.error = absl::UnavailableError(str_cat(t.where(), ": connection closed: ", p.failure.message()));
      return;
    }
    if (pool < 0 || static_cast<std::size_t>(pool) >= local_.size() || static_cast<std::size_t>(pool) >= p.pools.size()) {
      t.error = absl::InvalidArgumentError(str_cat(t.where(), ": pool ", pool, " is out of range (", local_.size(),
                                                   " local pools, ", p.pools.size(), " on the peer)"));
      return;
    }
    for (std::size_t i = 0; i < copies.size(); ++i) {
      const Copy& c = copies[i];
      const auto where = [&] { return str_cat(t.where(), ": copy ", t.copies_put + i); };
      absl::Status bounds = check_pool_range("local", where(), pool, c.src_offset, c.bytes, local_[pool].bytes);
      if (bounds.ok()) bounds = check_pool_range("peer", where(), pool, c.dst_offset, c.bytes, p.pools[pool].bytes);
      if (!bounds.ok()) {
        t.error = std::move(bounds);
        return;
      }
    }
    t.copies_put += copies.size();
    merge_adjacent_copies(copies);

    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.cb.send = &Loop::on_put_done;
    param.user_data = &t;
    param.memh = p.shm ? shm_memh_[pool] : local_memh_[pool];
    auto* src_base = static_cast<const char*>(local_[pool].base);
    for (const Copy& c : copies) {
      void* req = ucp_put_nbx(p.ep, src_base + c.src_offset, c.bytes, p.pools[pool].base + c.dst_offset,
                              p.rkeys[pool], &param);
      if (req == nullptr) continue;  // completed in place
      if (UCS_PTR_IS_ERR(req)) {
        t.error = ucs_to_status(UCS_PTR_STATUS(req), str_cat(t.where(), ": ucp_put_nbx"));
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
    std::vector<std::shared_ptr<Peer>> late;
    for (auto& [key, t] : active_) {
      if (!t->finishing || t->reported || now < t->deadline) continue;
      report(*t, absl::DeadlineExceededError(str_cat(t->where(), ": not complete at the deadline (", t->in_flight,
                                                     " puts", t->flush_pending ? " and the flush" : "",
                                                     " in flight); the connection is dropped")));
      late.push_back(t->peer);
      touched_.push_back(key);
    }
    // Force-closing cancels whatever is still in flight, so the buffers are no longer read.
    for (auto& p : late) peers_->close(p, absl::UnavailableError(str_cat("ucx peer ", p->address, " missed a deadline")));
  }

  std::optional<Deadline> next_deadline() const {
    std::optional<Deadline> next;
    for (const auto& [key, t] : active_) {
      if (t->finishing && !t->reported && (!next || t->deadline < *next)) next = t->deadline;
    }
    return next;
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
    peers_->close_all(std::chrono::steady_clock::now() + kCloseTimeout);
    run_dones();
  }

  std::vector<MemoryRegion> local_;
  UcxSenderOptions options_;
  std::unique_ptr<UcxWorker> shm_worker_;  // null: no shared-memory path; before worker_, which drives it
  std::unique_ptr<UcxWorker> worker_;
  std::vector<ucp_mem_h> local_memh_;
  std::vector<ucp_mem_h> shm_memh_;       // the local pools on shm_worker_
  std::unique_ptr<UcxPeerCache> peers_;  // transport thread only (and connections_made())
  std::shared_ptr<CommandQueue> queue_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  // Transport thread only.
  std::unordered_map<TransferState*, std::shared_ptr<TransferState>> active_;
  std::vector<TransferState*> touched_;  // completions since the last settle()
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
