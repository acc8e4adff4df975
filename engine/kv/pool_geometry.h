// PoolGeometry: how one pool's transfer region splits into the spans a hand-off moves — the
// region is [num_layers, num_units, unit_bytes], a unit being a KV block (a KvCache pool) or one
// slot of a recurrent state group (the StateCache pool: unit = group * slots + slot). The nodes
// use it to compute a peer's offsets and to check that a write stays inside units reserved for it.
//
// Must not: know what the bytes mean (K/V rows, convolution inputs, state matrices).
#pragma once

#include <cstdint>
#include <optional>

namespace baton {

struct PoolGeometry {
  std::int32_t num_layers = 0;
  std::int32_t num_units = 0;
  std::uint64_t unit_bytes = 0;

  std::uint64_t layer_stride() const { return static_cast<std::uint64_t>(num_units) * unit_bytes; }
  std::uint64_t region_bytes() const { return static_cast<std::uint64_t>(num_layers) * layer_stride(); }
  // Byte offset of (layer, unit).
  std::uint64_t offset(std::int32_t layer, std::int32_t unit) const {
    return static_cast<std::uint64_t>(layer) * layer_stride() + static_cast<std::uint64_t>(unit) * unit_bytes;
  }
  // The unit that holds all of [offset, offset + bytes), or nullopt when the range leaves the
  // region or crosses a unit's end.
  std::optional<std::int32_t> unit_of(std::uint64_t offset, std::uint64_t bytes) const {
    if (unit_bytes == 0 || num_units <= 0) return std::nullopt;
    const std::uint64_t layer = offset / layer_stride(), within = offset % layer_stride();
    if (layer >= static_cast<std::uint64_t>(num_layers) || bytes > unit_bytes || (within % unit_bytes) + bytes > unit_bytes) {
      return std::nullopt;
    }
    return static_cast<std::int32_t>(within / unit_bytes);
  }
};

}  // namespace baton
