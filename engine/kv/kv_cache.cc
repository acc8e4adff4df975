#include "engine/kv/kv_cache.h"

#include <algorithm>

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

absl::StatusOr<KvCache> KvCache::create(Backend& backend, const KvCacheLayout& layout, std::int32_t num_blocks,
                                        KvMemoryProvider* provider, std::string_view pool_name) {
  if (num_blocks <= 0) {
    return absl::ResourceExhaustedError(str_cat("KV cache: the memory budget holds no block of ",
                                                layout.bytes_per_block(), " bytes (", layout.describe(),
                                                "); raise --kv-cache-memory"));
  }
  KvCache cache;
  cache.layout_ = layout;
  cache.num_blocks_ = num_blocks;
  cache.device_ = backend.device();
  BATON_ASSIGN_OR_RETURN(cache.memory_,
                         PoolMemory::allocate(backend, static_cast<std::size_t>(layout.bytes_per_block() * num_blocks),
                                              provider, pool_name, "KV cache"));
  return cache;
}

std::size_t KvCache::layer_stride() const {
  return static_cast<std::size_t>(layout_.bytes_per_block_per_layer()) * static_cast<std::size_t>(num_blocks_);
}

TensorView KvCache::layer(std::int32_t i) const {
  BATON_CHECK(i >= 0 && i < layout_.num_layers, "KV layer ", i, " of ", layout_.num_layers);
  void* base = static_cast<char*>(this->base()) + static_cast<std::size_t>(i) * layer_stride();
  return TensorView::contiguous(base, layout_.dtype,
                                {num_blocks_, 2, layout_.block_size, layout_.num_kv_heads, layout_.head_dim}, device_);
}

KvRegion KvCache::region() const {
  return KvRegion{memory_.data(), memory_.bytes(), device_};
}

KvSpan KvCache::span(std::int32_t layer, std::int32_t block) const {
  BATON_CHECK(layer >= 0 && layer < layout_.num_layers, "KV layer ", layer, " of ", layout_.num_layers);
  BATON_CHECK(block >= 0 && block < num_blocks_, "KV block ", block, " of ", num_blocks_);
  const auto per = static_cast<std::size_t>(layout_.bytes_per_block_per_layer());
  return KvSpan{static_cast<std::size_t>(layer) * layer_stride() + static_cast<std::size_t>(block) * per, per};
}

void KvCache::append_position_spans(std::int32_t layer, std::int32_t start, std::int32_t num_tokens,
                                    std::span<const std::int32_t> blocks, std::vector<KvSpan>& out) const {
  const std::int32_t bs = layout_.block_size;
  const auto half = static_cast<std::size_t>(layout_.bytes_per_block_per_layer()) / 2;  // K or V of one block
  const std::size_t row = half / static_cast<std::size_t>(bs);
  const std::int32_t end = start + num_tokens;
  for (std::int32_t pos = start; pos < end;) {
    const auto b = static_cast<std::size_t>(pos / bs);
    if (b >= blocks.size()) break;
    const std::int32_t first = pos - static_cast<std::int32_t>(b) * bs;
    const std::int32_t last = std::min(end - static_cast<std::int32_t>(b) * bs, bs);
    const KvSpan whole = span(layer, blocks[b]);
    if (first == 0 && last == bs) {
      out.push_back(whole);
    } else {
      const std::size_t offset = static_cast<std::size_t>(first) * row, bytes = static_cast<std::size_t>(last - first) * row;
      out.push_back({whole.offset + offset, bytes});         // K rows
      out.push_back({whole.offset + half + offset, bytes});  // V rows
    }
    pos = static_cast<std::int32_t>(b + 1) * bs;
  }
}

}  // namespace baton
