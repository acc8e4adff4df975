#include "engine/kv/block_pool.h"

#include <algorithm>

#include "common/status.h"
#include "xxhash.h"

namespace baton {

KvBlockPool::KvBlockPool(std::int32_t num_blocks, std::int32_t block_size, std::int32_t key_lead)
    : block_size_(block_size), key_lead_(key_lead), blocks_(static_cast<std::size_t>(std::max(0, num_blocks))) {
  BATON_CHECK(num_blocks >= 0 && block_size > 0 && key_lead >= 0, "KvBlockPool(", num_blocks, ", ", block_size, ", ",
              key_lead, ")");
  free_.reserve(blocks_.size());
  // Stack order: block 0 is handed out first.
  for (std::int32_t i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

void KvBlockPool::check_id(BlockId id) const {
  BATON_CHECK(id >= 0 && id < num_blocks(), "block id ", id, " outside [0, ", num_blocks(), ")");
}

std::optional<BlockId> KvBlockPool::allocate() {
  BlockId id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!cached_lru_.empty()) {
    id = cached_lru_.front();
    cached_lru_.pop_front();
    unregister(id);
  } else {
    return std::nullopt;
  }
  Block& b = blocks_[static_cast<std::size_t>(id)];
  ++b.generation;  // new content will be written
  b.ref_count = 1;
  return id;
}

std::optional<std::vector<BlockId>> KvBlockPool::allocate(std::int32_t n) {
  if (n > num_available()) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(static_cast<std::size_t>(std::max(0, n)));
  for (std::int32_t i = 0; i < n; ++i) out.push_back(*allocate());
  return out;
}

void KvBlockPool::add_ref(BlockId id) {
  check_id(id);
  Block& b = blocks_[static_cast<std::size_t>(id)];
  if (b.ref_count == 0) {
    BATON_CHECK(b.registered, "add_ref on free block ", id);
    cached_lru_.erase(b.lru_pos);
  }
  ++b.ref_count;
}

void KvBlockPool::release(BlockId id) {
  check_id(id);
  Block& b = blocks_[static_cast<std::size_t>(id)];
  BATON_CHECK(b.ref_count > 0, "release of block ", id, " that is not in use (double free)");
  if (--b.ref_count > 0) return;
  if (b.registered) {
    b.lru_pos = cached_lru_.insert(cached_lru_.end(), id);
  } else {
    free_.push_back(id);
  }
}

void KvBlockPool::release(std::span<const BlockId> ids) {
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) release(*it);
}

std::int32_t KvBlockPool::ref_count(BlockId id) const {
  check_id(id);
  return blocks_[static_cast<std::size_t>(id)].ref_count;
}

std::span<const std::int32_t> KvBlockPool::block_key(std::span<const std::int32_t> tokens, std::int32_t i) const {
  const auto bs = static_cast<std::size_t>(block_size_), lead = static_cast<std::size_t>(key_lead_);
  const std::size_t first = i == 0 ? 0 : static_cast<std::size_t>(i) * bs + lead;
  return tokens.subspan(first, (static_cast<std::size_t>(i) + 1) * bs + lead - first);
}

std::int32_t KvBlockPool::keyed_blocks(std::size_t n) const {
  const auto lead = static_cast<std::size_t>(key_lead_);
  return n < lead ? 0 : static_cast<std::int32_t>((n - lead) / static_cast<std::size_t>(block_size_));
}

BlockHash KvBlockPool::hash_block(BlockHash parent, std::span<const std::int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent);
}

std::optional<BlockId> KvBlockPool::lookup(BlockHash hash, BlockId parent, std::span<const std::int32_t> tokens,
                                           std::uint64_t salt) const {
  const std::uint64_t parent_generation = parent >= 0 ? blocks_[static_cast<std::size_t>(parent)].generation : 0;
  auto [it, end] = by_hash_.equal_range(hash);
  for (; it != end; ++it) {
    const Block& b = blocks_[static_cast<std::size_t>(it->second)];
    if (b.parent == parent && b.parent_generation == parent_generation && (parent >= 0 || b.salt == salt) &&
        std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end())) {
      return it->second;
    }
  }
  return std::nullopt;
}

BlockId KvBlockPool::register_full_block(BlockId id, BlockHash hash, BlockId parent,
                                         std::span<const std::int32_t> tokens, std::uint64_t salt) {
  check_id(id);
  const std::int32_t key_size = block_size_ + (parent < 0 ? key_lead_ : 0);
  BATON_CHECK(static_cast<std::int32_t>(tokens.size()) == key_size, "registering a block keyed by ", tokens.size(),
              " tokens (", key_size, " expected: block size ", block_size_, ", key lead ", key_lead_, ")");
  Block& b = blocks_[static_cast<std::size_t>(id)];
  BATON_CHECK(b.ref_count > 0, "registering block ", id, " that is not in use");
  if (b.registered) return id;
  if (auto existing = lookup(hash, parent, tokens, salt)) return *existing;
  b.registered = true;
  b.hash = hash;
  b.parent = parent;
  b.salt = parent >= 0 ? 0 : salt;
  b.parent_generation = parent >= 0 ? blocks_[static_cast<std::size_t>(parent)].generation : 0;
  b.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, id);
  return id;
}

void KvBlockPool::unregister(BlockId id) {
  Block& b = blocks_[static_cast<std::size_t>(id)];
  if (!b.registered) return;
  auto [it, end] = by_hash_.equal_range(b.hash);
  for (; it != end; ++it) {
    if (it->second == id) {
      by_hash_.erase(it);
      break;
    }
  }
  b.registered = false;
  b.tokens.clear();
}

bool KvBlockPool::is_registered(BlockId id) const {
  check_id(id);
  return blocks_[static_cast<std::size_t>(id)].registered;
}

std::vector<BlockId> KvBlockPool::match_prefix(std::span<const std::int32_t> tokens, std::int32_t max_blocks,
                                               std::uint64_t salt) {
  std::vector<BlockId> out;
  BlockHash hash = salt;
  BlockId parent = -1;
  const std::int32_t limit = std::min(keyed_blocks(tokens.size()), max_blocks);
  prefix_queries_ += std::max(0, limit);
  for (std::int32_t i = 0; i < limit; ++i) {
    const auto block_tokens = block_key(tokens, i);
    hash = hash_block(hash, block_tokens);
    const auto found = lookup(hash, parent, block_tokens, salt);
    if (!found) break;
    add_ref(*found);
    out.push_back(*found);
    parent = *found;
  }
  prefix_hits_ += static_cast<std::int64_t>(out.size());
  return out;
}

void KvBlockPool::unmatch(std::span<const BlockId> blocks) {
  release(blocks);
  prefix_hits_ -= static_cast<std::int64_t>(blocks.size());
}

}  // namespace baton
