// KvMemoryProvider: lets whoever embeds the engine supply the host memory its KV transports use
// (the target's and a drafter's pool): the CPU pools themselves, or the host mirrors of device
// pools (kv_host_mirror.h), e.g. memory a KV transport allocated so that a peer on the same host
// can write into it directly. The engine only asks for bytes by pool name; it never learns what
// the memory is or who else maps it.
//
// Must not: be used for device (GPU) pools themselves — KvCache::create refuses it there; hand out
// memory that moves or shrinks while its ExternalMemory lives.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"

namespace baton {

// A block of host memory with its own release: dropping the last copy of `owner` frees it.
struct ExternalMemory {
  void* data = nullptr;
  std::size_t bytes = 0;
  std::shared_ptr<void> owner;
};

class KvMemoryProvider {
 public:
  virtual ~KvMemoryProvider() = default;
  // At least `bytes` bytes, page-aligned, zero-filled, for the pool `pool_name` ("target",
  // "draft"). Called while the engine is created, on that thread.
  virtual absl::StatusOr<ExternalMemory> allocate(std::size_t bytes, std::string_view pool_name) = 0;
};

}  // namespace baton
