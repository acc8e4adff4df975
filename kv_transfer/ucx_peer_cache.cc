// UcxPeerCache (ucx_peer_cache.h): endpoint creation, wire-up wait, replacement and closing.
// Must not: close an endpoint from inside a UCX callback, or free its keys before the close ends.
#include "kv_transfer/ucx_peer_cache.h"

#include <algorithm>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton::kv {

void Peer::answer_waiters(const absl::Status& status) {
  for (auto& w : waiters) w->set_value(status);
  waiters.clear();
}

UcxPeerCache::~UcxPeerCache() {
  for (Closing& c : closing_) {  // late: UCX releases the request when it completes
    ucp_request_free(c.request);
    destroy_rkeys(*c.peer);      // nothing progresses the worker any more
  }
}

absl::StatusOr<std::shared_ptr<Peer>> UcxPeerCache::get(const std::string& address, std::uint64_t instance,
                                                        const UcxDescriptor& desc, std::string_view where) {
  auto it = cache_.find(address);
  if (it != cache_.end() && it->second->instance == instance && it->second->failure.ok()) return it->second;
  if (it != cache_.end()) {
    close(it->second, absl::UnavailableError(str_cat("ucx peer ", address, " restarted (instance ",
                                                     it->second->instance, " -> ", instance, ")")));
  }
  auto make_peer = [&](bool shm) {
    auto peer = std::make_shared<Peer>();
    peer->address = address;
    peer->instance = instance;
    peer->cache = this;
    peer->shm = shm;
    peer->pools = desc.pools;
    for (UcxRemotePool& pool : peer->pools) pool.rkey.clear();
    return peer;
  };
  std::shared_ptr<Peer> peer;
  if (desc.shm && shm_worker_ != nullptr) {
    peer = make_peer(/*shm=*/true);
    absl::Status opened = open(peer, *shm_worker_, desc.shm->worker_address, desc.shm->rkeys, where);
    if (!opened.ok()) {
      spdlog::info("ucx peer {}: no shared-memory path ({}); using the network", address, std::string(opened.message()));
      peer = nullptr;
    }
  }
  if (peer == nullptr) {
    peer = make_peer(/*shm=*/false);
    std::vector<std::string> rkeys;
    for (const UcxRemotePool& pool : desc.pools) rkeys.push_back(pool.rkey);
    BATON_RETURN_IF_ERROR(open(peer, *worker_, desc.worker_address, rkeys, where));
  }
  cache_[address] = peer;
  connections_made_.fetch_add(1);
  spdlog::info("ucx peer {} (instance {}): KV puts take the {} path", address, instance,
               peer->shm ? "shared-memory" : "network");
  // Waiting for the wire-up lets begin() report an unreachable peer, and keeps endpoints from
  // being closed half wired (UCX 1.13 aborts when it purges a pending wire-up message).
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxPeerCache::on_wireup_done;
  param.user_data = peer.get();
  void* req = ucp_ep_flush_nbx(peer->ep, &param);
  if (UCS_PTR_IS_ERR(req)) {
    absl::Status why = ucs_to_status(UCS_PTR_STATUS(req), str_cat(where, ": wire-up flush"));
    close(peer, why);
    return why;
  }
  if (req == nullptr) {
    peer->ready = true;
  } else {
    wiring_.push_back(peer);
  }
  return peer;
}

void UcxPeerCache::when_ready(Peer& peer, std::shared_ptr<std::promise<absl::Status>> on_ready) {
  if (!on_ready) return;
  if (peer.closed) {
    on_ready->set_value(absl::UnavailableError(peer.failure.message()));
  } else if (peer.ready) {
    on_ready->set_value(absl::OkStatus());
  } else {
    peer.waiters.push_back(std::move(on_ready));
  }
}

absl::Status UcxPeerCache::open(const std::shared_ptr<Peer>& peer, UcxWorker& worker,
                                const std::string& worker_address, const std::vector<std::string>& rkeys,
                                std::string_view where) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
  if (peer->shm) {
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  } else {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxPeerCache::on_peer_error;
    params.err_handler.arg = peer.get();
  }
  ucs_status_t st = ucp_ep_create(worker.worker(), &params, &peer->ep);
  if (st != UCS_OK) {
    peer->ep = nullptr;
    peer->closed = true;
    return ucs_to_status(st, str_cat(where, ": ucp_ep_create", peer->shm ? " (shared memory)" : ""));
  }
  for (std::size_t i = 0; i < rkeys.size(); ++i) {
    ucp_rkey_h rkey = nullptr;
    st = ucp_ep_rkey_unpack(peer->ep, rkeys[i].data(), &rkey);
    if (st != UCS_OK) {
      absl::Status why = ucs_to_status(st, str_cat(where, ": descriptor pool ", i, peer->shm ? " shared-memory" : "", " rkey"));
      close(peer, why);
      return absl::InvalidArgumentError(why.message());
    }
    peer->rkeys.push_back(rkey);
  }
  return absl::OkStatus();
}

void UcxPeerCache::on_wireup_done(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  ucp_request_free(request);
  if (status == UCS_OK) {
    p->ready = true;
    p->answer_waiters(absl::OkStatus());
  } else if (p->failure.ok()) {
    p->failure = ucs_to_status(status, str_cat("ucx peer ", p->address, ": wire-up"));
    p->cache->failed_.push_back(p->shared_from_this());
  }
  UcxPeerCache* cache = p->cache;
  std::erase_if(cache->wiring_, [p](const std::shared_ptr<Peer>& w) { return w.get() == p; });  // may free p
}

void UcxPeerCache::on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  if (p->closed) return;
  if (p->failure.ok()) p->failure = ucs_to_status(status, str_cat("ucx peer ", p->address));
  p->cache->failed_.push_back(p->shared_from_this());
}

void UcxPeerCache::close(const std::shared_ptr<Peer>& peer, const absl::Status& why, bool force) {
  // `peer` may be the cache's own entry (close(it->second)), which the erase below destroys: hold
  // the peer until it is closed (else the peer is freed here and its keys read after the free).
  const std::shared_ptr<Peer> p = peer;
  if (p->closed) return;
  p->closed = true;
  if (p->failure.ok()) p->failure = why;
  p->answer_waiters(absl::UnavailableError(p->failure.message()));
  auto it = cache_.find(p->address);
  if (it != cache_.end() && it->second == p) cache_.erase(it);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  // A forced close is undefined for an endpoint without error handling (shared memory); its
  // operations are local copies, so a graceful close completes without the peer.
  param.flags = force && !p->shm ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* req = ucp_ep_close_nbx(p->ep, &param);
  p->ep = nullptr;
  if (UCS_PTR_IS_PTR(req)) {
    closing_.push_back({p, req});
  } else {
    destroy_rkeys(*p);
  }
}

void UcxPeerCache::invalidate(const std::string& address, const absl::Status& why) {
  auto it = cache_.find(address);
  if (it != cache_.end()) close(it->second, why);
}

void UcxPeerCache::destroy_rkeys(Peer& p) {
  for (ucp_rkey_h rkey : p.rkeys) ucp_rkey_destroy(rkey);
  p.rkeys.clear();
}

void UcxPeerCache::reap_closing() {
  std::erase_if(closing_, [](Closing& c) {
    if (ucp_request_check_status(c.request) == UCS_INPROGRESS) return false;
    ucp_request_free(c.request);
    destroy_rkeys(*c.peer);
    return true;
  });
}

void UcxPeerCache::after_progress() {
  std::vector<std::shared_ptr<Peer>> failed;
  failed.swap(failed_);
  for (auto& p : failed) {
    if (p->closed) continue;
    spdlog::warn("{}; dropping the connection", std::string(p->failure.message()));
    close(p, p->failure);
  }
  reap_closing();
}

void UcxPeerCache::close_all(Deadline until) {
  std::vector<std::shared_ptr<Peer>> peers;
  for (auto& [address, p] : cache_) peers.push_back(p);
  // Healthy endpoints close gracefully: a forced close can catch the peer mid wire-up.
  for (auto& p : peers) close(p, absl::CancelledError("ucx sender: shutting down"), /*force=*/!p->failure.ok());
  while (!closing_.empty() && std::chrono::steady_clock::now() < until) {
    worker_->progress();  // and the shared-memory worker (UcxWorker::drive_also)
    after_progress();
    if (!closing_.empty()) worker_->wait(until);
  }
}

}  // namespace baton::kv
