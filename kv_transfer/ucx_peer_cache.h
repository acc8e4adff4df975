// UcxPeerCache: the UCX sender's endpoints, one per peer address, each with its pools' unpacked
// remote keys. A different instance id for a cached address replaces the entry (the peer
// restarted: its keys changed); a failed endpoint leaves the cache at once.
//
// Two paths: when the descriptor has a shared-memory section and the sender has a shared-memory
// worker, the endpoint is made there first (UCS_ERR_UNREACHABLE on another host, or the peer's
// memory cannot be mapped: then the network). Shared-memory endpoints use
// UCP_ERR_HANDLING_MODE_NONE (UCX 1.13 offers no shared-memory transport with PEER; with only
// shared-memory lanes a dead peer cannot abort us: puts are copies into memory we have mapped and
// complete locally) and are never force-closed (undefined in that mode). Network endpoints use
// UCP_ERR_HANDLING_MODE_PEER, so a dead peer completes their operations with an error.
//
// Owned and driven by the sender's transport thread only (ucx_sender.cc); internal to
// kv_transfer. Must not: close an endpoint from inside a UCX callback (closes are deferred to
// after_progress()); destroy remote keys before the close that ends their operations completes.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv_transfer/ucx_descriptor.h"
#include "kv_transfer/ucx_worker.h"

namespace baton::kv {

class UcxPeerCache;

// One endpoint to one receiver instance.
struct Peer : std::enable_shared_from_this<Peer> {
  std::string address;
  std::uint64_t instance = 0;
  UcxPeerCache* cache = nullptr;
  ucp_ep_h ep = nullptr;
  std::vector<ucp_rkey_h> rkeys;      // per pool, unpacked on `ep`
  std::vector<UcxRemotePool> pools;   // base and size per pool (rkey bytes dropped)
  absl::Status failure;               // why it is no longer usable (OK while it is)
  bool ready = false;                 // wire-up done (its first flush completed)
  bool closed = false;                // endpoint closed: nothing more may be posted on it
  bool shm = false;                   // on the shared-memory worker (else the network one)
  // Callers waiting for the wire-up; answered once, with the failure when it fails.
  std::vector<std::shared_ptr<std::promise<absl::Status>>> waiters;

  void answer_waiters(const absl::Status& status);
};

class UcxPeerCache {
 public:
  // `shm_worker` may be null (no shared-memory path).
  UcxPeerCache(UcxWorker* worker, UcxWorker* shm_worker) : worker_(worker), shm_worker_(shm_worker) {}
  ~UcxPeerCache();  // requires close_all() to have run
  UcxPeerCache(const UcxPeerCache&) = delete;
  UcxPeerCache& operator=(const UcxPeerCache&) = delete;

  // The cached endpoint for (address, instance), else a new one from `desc` (closing the entry of
  // another instance; shared memory first, see above). A new endpoint is flushed at once: the
  // flush completes when its wire-up has. `where` prefixes errors.
  absl::StatusOr<std::shared_ptr<Peer>> get(const std::string& address, std::uint64_t instance,
                                            const UcxDescriptor& desc, std::string_view where);
  // Answers `on_ready` when the peer's wire-up is done (now, when it is), or with its failure.
  static void when_ready(Peer& peer, std::shared_ptr<std::promise<absl::Status>> on_ready);

  // Closes the endpoint. Forced: whatever is outstanding on it completes with an error at once (a
  // failed, replaced or late peer). Otherwise it is flushed first.
  void close(const std::shared_ptr<Peer>& peer, const absl::Status& why, bool force = true);
  void invalidate(const std::string& address, const absl::Status& why);

  // After each ucp_worker_progress: closes endpoints that reported a failure, releases finished
  // closes.
  void after_progress();
  // Shutdown: closes every endpoint (gracefully when healthy) and progresses until the closes are
  // done or `until` passes.
  void close_all(Deadline until);

  std::int64_t connections_made() const { return connections_made_.load(); }

 private:
  static void on_wireup_done(void* request, ucs_status_t status, void* user_data);
  static void on_peer_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void destroy_rkeys(Peer& peer);
  // Creates `peer`'s endpoint on `worker` and unpacks `rkeys` on it (closing it on failure).
  absl::Status open(const std::shared_ptr<Peer>& peer, UcxWorker& worker, const std::string& worker_address,
                    const std::vector<std::string>& rkeys, std::string_view where);
  void reap_closing();

  UcxWorker* worker_;
  UcxWorker* shm_worker_;
  std::unordered_map<std::string, std::shared_ptr<Peer>> cache_;
  std::vector<std::shared_ptr<Peer>> failed_;   // reported by the error callback, not yet closed
  std::vector<std::shared_ptr<Peer>> wiring_;   // wire-up flush pending
  struct Closing {
    std::shared_ptr<Peer> peer;
    void* request;
  };
  std::vector<Closing> closing_;
  std::atomic<std::int64_t> connections_made_{0};
};

}  // namespace baton::kv
