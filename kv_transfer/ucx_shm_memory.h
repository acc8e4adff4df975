// UcxShmMemory: the decode node's shared-memory UCX context. It allocates the KV pools' memory
// (before the engine exists, which then uses it) from UCX's shared-memory domains, so that a
// sender on the same host can map the pools and write them with plain memory copies: no network
// stack, no progress on this side, ~10x the tcp path on loopback. UcxKvReceiver then publishes
// this context's worker address and keys as the descriptor's shared-memory section.
//
// Why a context of its own: UCX 1.13 leaves shared-memory transports out of endpoints that ask
// for peer failure reports (UCP_ERR_HANDLING_MODE_PEER), and an endpoint without them may abort the
// process when a network peer dies. This context only has shared-memory transports, whose puts
// complete locally, so its endpoints can go without failure reports safely (ucx_transport.h).
//
// The transports follow UCX_TLS: unset or "all" -> every shared-memory transport ("sm"); a list
// -> the shared-memory ones in it; none (e.g. UCX_TLS=tcp) -> no shared-memory path at all.
// Must not: expose UCX types (decode_node adapts it to the engine's KvMemoryProvider); hand out
// memory a peer could not map (allocation fails instead).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace baton::kv {

// Memory with its own release: dropping the last copy of `owner` frees it.
struct OwnedRegion {
  void* base = nullptr;
  std::size_t bytes = 0;
  std::shared_ptr<void> owner;
};

// The UCX_TLS value for the shared-memory context given the user's UCX_TLS (null: unset), or
// nullopt when the user's choice leaves no shared-memory transport that can carry a put.
std::optional<std::string> shared_memory_transports(const char* ucx_tls);

class UcxShmMemory {
 public:
  // Null (not an error) when UCX_TLS leaves no shared-memory transport.
  static absl::StatusOr<std::shared_ptr<UcxShmMemory>> create();
  ~UcxShmMemory();
  UcxShmMemory(const UcxShmMemory&) = delete;
  UcxShmMemory& operator=(const UcxShmMemory&) = delete;

  // `bytes` of zero-filled shared memory for pool `name`; any thread. RESOURCE_EXHAUSTED (or
  // the domain's error) when the host's shared memory (/dev/shm, SysV limits) cannot hold it.
  absl::StatusOr<OwnedRegion> allocate(std::size_t bytes, std::string_view name);

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit UcxShmMemory(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;  // shared with the regions it handed out
};

}  // namespace baton::kv
