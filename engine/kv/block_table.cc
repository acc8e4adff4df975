#include "engine/kv/block_table.h"

#include "common/status.h"

namespace baton {

std::int32_t BlockTable::slot(std::int32_t position) const {
  const std::int32_t b = position / block_size_;
  BATON_CHECK(position >= 0 && b < num_blocks(), "position ", position, " beyond the table's ", num_blocks(),
              " blocks");
  return blocks_[static_cast<std::size_t>(b)] * block_size_ + position % block_size_;
}

std::int32_t BlockTable::blocks_needed(std::int32_t num_tokens) const {
  return std::max(0, blocks_for(num_tokens, block_size_) - num_blocks());
}

bool BlockTable::grow_to(KvBlockPool& pool, std::int32_t num_tokens) {
  const std::int32_t need = blocks_needed(num_tokens);
  if (need == 0) return true;
  auto fresh = pool.allocate(need);
  if (!fresh) return false;
  blocks_.insert(blocks_.end(), fresh->begin(), fresh->end());
  return true;
}

void BlockTable::shrink_to(KvBlockPool& pool, std::int32_t num_tokens) {
  const std::int32_t keep = blocks_for(num_tokens, block_size_);
  BATON_CHECK(num_tokens >= num_registered_ * block_size_, "rollback to ", num_tokens,
              " tokens would cut into ", num_registered_, " final blocks");
  if (keep >= num_blocks()) return;
  pool.release(std::span<const BlockId>(blocks_).subspan(static_cast<std::size_t>(keep)));
  blocks_.resize(static_cast<std::size_t>(keep));
}

void BlockTable::adopt_prefix(std::span<const BlockId> blocks) {
  BATON_CHECK(blocks_.empty(), "adopt_prefix on a table that already has ", blocks_.size(), " blocks");
  blocks_.assign(blocks.begin(), blocks.end());
  // Adopted blocks are registered already; recompute the chain so later blocks link to them.
  num_registered_ = 0;
  last_hash_ = salt_;
  last_canonical_ = -1;
}

void BlockTable::register_full_blocks(KvBlockPool& pool, std::span<const std::int32_t> final_tokens) {
  BATON_CHECK(pool.block_size() == block_size_, "a table of blocks of ", block_size_, " registering in a pool of ",
              pool.block_size());
  const std::int32_t full = std::min(num_blocks(), pool.keyed_blocks(final_tokens.size()));
  for (std::int32_t i = num_registered_; i < full; ++i) {
    const auto tokens = pool.block_key(final_tokens, i);
    const BlockHash hash = KvBlockPool::hash_block(last_hash_, tokens);
    const BlockId parent = i > 0 ? last_canonical_ : -1;
    // If an identical block is already cached, ours simply stays unregistered (and is freed with
    // the sequence); later blocks chain to the cached one, which holds the same content.
    last_canonical_ = pool.register_full_block(blocks_[static_cast<std::size_t>(i)], hash, parent, tokens, salt_);
    last_hash_ = hash;
    num_registered_ = i + 1;
  }
}

void BlockTable::release_all(KvBlockPool& pool) {
  pool.release(blocks_);
  blocks_.clear();
  num_registered_ = 0;
  last_hash_ = salt_;
  last_canonical_ = -1;
}

}  // namespace baton
