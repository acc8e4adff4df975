// KvCache: the KV memory of one model (a "pool": the target's, or a draft model's or draft
// head's) on one device — ONE allocation laid out [num_layers, num_blocks, 2, block_size,
// kv_heads, head_dim], so that
//   - a transport registers the pool once (region()), and
//   - the KV of one (layer, block) is one contiguous span at a computable offset (span()), which
//     can leave as soon as that layer is written, and land directly in a peer's block.
//
// It owns memory only; which block belongs to whom is KvBlockPool's and BlockTable's business.
// It never moves, resizes or frees its region while it lives (a registered region stays valid).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_memory.h"
#include "engine/kv/pool_geometry.h"
#include "engine/kv/pool_memory.h"
#include "kernels/backend.h"

namespace baton {

struct KvCacheLayout {
  std::int32_t num_layers = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t block_size = 16;
  DType dtype = DType::kF32;

  // Bytes of one (layer, block): [2, block_size, kv_heads, head_dim].
  std::int64_t bytes_per_block_per_layer() const {
    return 2LL * block_size * num_kv_heads * head_dim * static_cast<std::int64_t>(dtype_size(dtype));
  }
  std::int64_t bytes_per_block() const { return bytes_per_block_per_layer() * num_layers; }
  std::string describe() const;
  friend bool operator==(const KvCacheLayout&, const KvCacheLayout&) = default;
};

// A pool's memory as a transport sees it.
struct KvRegion {
  void* base = nullptr;
  std::size_t bytes = 0;
  Device device{};
};

// Where one (layer, block) lives inside the region: [offset, offset + bytes).
struct KvSpan {
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

class KvCache {
 public:
  // Fails with a message naming the budget when it cannot hold even one block. With a `provider`
  // (CPU backends only) the memory comes from it, asked for under `pool_name`; else from the backend.
  static absl::StatusOr<KvCache> create(Backend& backend, const KvCacheLayout& layout, std::int32_t num_blocks,
                                        KvMemoryProvider* provider = nullptr, std::string_view pool_name = "target");
  static std::int32_t blocks_for_budget(const KvCacheLayout& layout, std::int64_t bytes);

  const KvCacheLayout& layout() const { return layout_; }
  std::int32_t num_blocks() const { return num_blocks_; }
  // One layer's pool: [num_blocks, 2, block_size, kv_heads, head_dim].
  TensorView layer(std::int32_t i) const;

  KvRegion region() const;
  // The region as (layer, block) spans.
  PoolGeometry geometry() const {
    return PoolGeometry{layout_.num_layers, num_blocks_, static_cast<std::uint64_t>(layout_.bytes_per_block_per_layer())};
  }
  // Byte stride between consecutive layers: num_blocks * bytes_per_block_per_layer().
  std::size_t layer_stride() const;
  // The span of (layer, block); both must be in range (checked).
  KvSpan span(std::int32_t layer, std::int32_t block) const;
  // The bytes of positions [start, start + num_tokens) in one layer, appended to `out`: per block,
  // its K rows and its V rows (one span when the whole block is covered). `blocks` is the
  // sequence's block table (index = position / block_size); positions past it are left out.
  void append_position_spans(std::int32_t layer, std::int32_t start, std::int32_t num_tokens,
                             std::span<const std::int32_t> blocks, std::vector<KvSpan>& out) const;

 private:
  KvCacheLayout layout_;
  std::int32_t num_blocks_ = 0;
  PoolMemory memory_;  // the backend's, or a KvMemoryProvider's
  Device device_{};

  void* base() const { return memory_.data(); }
};

}  // namespace baton
