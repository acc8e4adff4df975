// BlockTable: one sequence's physical KV blocks, in position order (position p lives in block
// blocks()[p / block_size] at offset p % block_size).
//
// It grows as tokens are scheduled, shrinks on rollback (speculative tokens rejected), takes
// shared blocks from the prefix cache, and registers its own full blocks there once their tokens
// are final. It never frees a block another sequence still uses: all sharing goes through the
// pool's reference counts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv/block_pool.h"

namespace baton {

class BlockTable {
 public:
  explicit BlockTable(std::int32_t block_size) : block_size_(block_size) {}

  std::span<const BlockId> blocks() const { return blocks_; }
  std::int32_t num_blocks() const { return static_cast<std::int32_t>(blocks_.size()); }
  std::int32_t capacity_tokens() const { return num_blocks() * block_size_; }
  std::int32_t block_size() const { return block_size_; }
  std::int32_t slot(std::int32_t position) const;  // block * block_size + offset

  static std::int32_t blocks_for(std::int32_t num_tokens, std::int32_t block_size) {
    return (num_tokens + block_size - 1) / block_size;
  }
  // Blocks that growing to num_tokens would take from the pool.
  std::int32_t blocks_needed(std::int32_t num_tokens) const;

  // Makes room for positions [0, num_tokens). All-or-nothing: false (nothing taken) if the pool
  // has too few blocks.
  bool grow_to(KvBlockPool& pool, std::int32_t num_tokens);

  // Rollback: keeps only the blocks positions [0, num_tokens) need; the rest go back to the pool.
  // Must not cut into blocks registered in the prefix cache (their tokens are final).
  void shrink_to(KvBlockPool& pool, std::int32_t num_tokens);

  // Adopts leading blocks found in the prefix cache (the caller already holds their references).
  // Only valid on an empty table.
  void adopt_prefix(std::span<const BlockId> blocks);

  // The request's cache salt (0: none): its blocks are registered under it, and match only
  // requests with the same salt. Set before any block is registered.
  void set_salt(std::uint64_t salt) {
    salt_ = salt;
    if (num_registered_ == 0) last_hash_ = salt;
  }
  std::uint64_t salt() const { return salt_; }

  // Registers every full block whose key tokens (KvBlockPool::block_key) are all in `final_tokens`
  // (the sequence's tokens whose KV is computed and will not be rewritten) and not yet registered.
  void register_full_blocks(KvBlockPool& pool, std::span<const std::int32_t> final_tokens);

  // Returns every block to the pool (reverse order, so the tail is evicted first).
  void release_all(KvBlockPool& pool);

 private:
  std::int32_t block_size_;
  std::vector<BlockId> blocks_;
  std::int32_t num_registered_ = 0;  // leading blocks already in the prefix cache
  std::uint64_t salt_ = 0;
  BlockHash last_hash_ = 0;          // chained hash of block num_registered_ - 1 (salt_ before the first)
  BlockId last_canonical_ = -1;      // the cached block holding block num_registered_ - 1's content
};

}  // namespace baton
