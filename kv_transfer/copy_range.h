// Bounds checks shared by the transports: a copy's byte range must lie inside the pool it reads or
// writes, on both sides. Overflow-safe (offsets come from peers and callers).
//
// Must not: know what the bytes mean; abort on bad ranges (they come back as INVALID_ARGUMENT).
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "common/status.h"

namespace baton::kv {

// OK when [offset, offset + bytes) lies inside [0, pool_bytes). `side` says whose pool ("local",
// "peer"), `where` names the transfer (request id, copy index) for the message.
inline absl::Status check_pool_range(std::string_view side, std::string_view where, std::int32_t pool,
                                     std::uint64_t offset, std::uint64_t bytes,
                                     std::uint64_t pool_bytes) {
  if (offset > pool_bytes || bytes > pool_bytes - offset) {
    return absl::InvalidArgumentError(
        str_cat(where, ": ", side, " pool ", pool, " range [", offset, ", ", offset, " + ", bytes,
                ") is outside the pool's ", pool_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace baton::kv
