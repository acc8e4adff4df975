// PoolMemory: the one allocation behind a pool (a KvCache's KV, a StateCache's recurrent state):
// the backend's memory, or host memory a KvMemoryProvider hands out under the pool's name (so that
// a KV transport can write a peer's bytes straight into it).
//
// Must not: take a provider's memory on a non-CPU device (refused); move or shrink while it lives.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/kv/kv_memory.h"
#include "kernels/backend.h"

namespace baton {

class PoolMemory {
 public:
  // `bytes` bytes from `provider` under `pool_name` when one is given, else from the backend;
  // errors start with `what` ("KV cache", "recurrent state cache").
  static absl::StatusOr<PoolMemory> allocate(Backend& backend, std::size_t bytes, KvMemoryProvider* provider,
                                             std::string_view pool_name, std::string_view what);

  void* data() const { return external_.data != nullptr ? external_.data : device_.data(); }
  std::size_t bytes() const { return bytes_; }  // as asked for

 private:
  DeviceBuffer device_;      // backend memory, or
  ExternalMemory external_;  // the provider's (then device_ is empty)
  std::size_t bytes_ = 0;
};

}  // namespace baton
