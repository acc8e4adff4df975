// KvCache: the KV memory of one model on one device — per layer a contiguous pool
// [num_blocks, 2, block_size, kv_heads, head_dim] allocated through the Backend, so one layer's
// blocks can be sent (or received) as soon as that layer is done.
//
// It owns memory only; which block belongs to whom is KvBlockPool's and BlockTable's business.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace baton {

struct KvCacheLayout {
  std::int32_t num_layers = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t block_size = 16;
  DType dtype = DType::kF32;

  std::int64_t bytes_per_block_per_layer() const {
    return 2LL * block_size * num_kv_heads * head_dim * static_cast<std::int64_t>(dtype_size(dtype));
  }
  std::int64_t bytes_per_block() const { return bytes_per_block_per_layer() * num_layers; }
  std::string describe() const;
};

class KvCache {
 public:
  // Fails with a message naming the budget when it cannot hold even one block.
  static absl::StatusOr<KvCache> create(Backend& backend, const KvCacheLayout& layout, std::int32_t num_blocks);
  static std::int32_t blocks_for_budget(const KvCacheLayout& layout, std::int64_t bytes);

  const KvCacheLayout& layout() const { return layout_; }
  std::int32_t num_blocks() const { return num_blocks_; }
  // One layer's pool: [num_blocks, 2, block_size, kv_heads, head_dim].
  TensorView layer(std::int32_t i) const;

 private:
  KvCacheLayout layout_;
  std::int32_t num_blocks_ = 0;
  std::vector<DeviceBuffer> layers_;
};

}  // namespace baton
