#include "engine/kv/kv_cache.h"

#include "common/status.h"

namespace baton {

std::string KvCacheLayout::describe() const {
  return str_cat(num_layers, " layers x [blocks, 2, ", block_size, ", ", num_kv_heads, ", ", head_dim, "] ",
                 dtype_name(dtype));
}

std::int32_t KvCache::blocks_for_budget(const KvCacheLayout& layout, std::int64_t bytes) {
  const std::int64_t per = layout.bytes_per_block();
  if (per <= 0 || bytes <= 0) return 0;
  return static_cast<std::int32_t>(std::min<std::int64_t>(bytes / per, INT32_MAX / layout.block_size));
}

absl::StatusOr<KvCache> KvCache::create(Backend& backend, const KvCacheLayout& layout, std::int32_t num_blocks) {
  if (num_blocks <= 0) {
    return absl::ResourceExhaustedError(str_cat("KV cache: the memory budget holds no block of ",
                                                layout.bytes_per_block(), " bytes (", layout.describe(),
                                                "); raise --kv-cache-memory"));
  }
  KvCache cache;
  cache.layout_ = layout;
  cache.num_blocks_ = num_blocks;
  cache.layers_.reserve(static_cast<std::size_t>(layout.num_layers));
  const auto bytes = static_cast<std::size_t>(layout.bytes_per_block_per_layer() * num_blocks);
  for (std::int32_t i = 0; i < layout.num_layers; ++i) {
    BATON_ASSIGN_OR_RETURN(DeviceBuffer buffer, backend.allocate(bytes));
    cache.layers_.push_back(std::move(buffer));
  }
  return cache;
}

TensorView KvCache::layer(std::int32_t i) const {
  BATON_CHECK(i >= 0 && i < layout_.num_layers, "KV layer ", i);
  return layers_[static_cast<std::size_t>(i)].view(
      layout_.dtype, {num_blocks_, 2, layout_.block_size, layout_.num_kv_heads, layout_.head_dim});
}

}  // namespace baton
