// Copy-range helpers shared by the transports: the bounds check (a copy's byte range must lie inside
// the pool it reads or writes, on both sides; overflow-safe, since offsets come from peers and
// callers) and the merging of copies that continue one another on both sides.
//
// Must not: know what the bytes mean; abort on bad ranges (they come back as INVALID_ARGUMENT).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/status.h"
#include "kv_transfer/transport.h"

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

// Merges each copy into the one before it when both its source and destination continue that one's
// (consecutive blocks of a layer usually do), and drops empty copies. Same bytes, fewer
// operations; the order of the rest is kept.
inline void merge_adjacent_copies(std::vector<Copy>& copies) {
  std::size_t out = 0;
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const Copy& c = copies[i];
    if (c.bytes == 0) continue;
    if (out > 0) {
      Copy& last = copies[out - 1];
      if (last.src_offset + last.bytes == c.src_offset && last.dst_offset + last.bytes == c.dst_offset) {
        last.bytes += c.bytes;
        continue;
      }
    }
    copies[out++] = c;
  }
  copies.resize(out);
}

}  // namespace baton::kv
