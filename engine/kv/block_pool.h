// KvBlockPool: the bookkeeping of a paged KV cache's physical blocks — a free list, reference
// counts, and the prefix cache's map from chained block hashes to blocks.
//
// It owns no KV memory (KvCache does) and knows nothing of models or requests: it hands out block
// ids. A block is in exactly one of three states:
//   in use     ref_count > 0;
//   cached     ref_count == 0 but it holds a registered full block (its hash is in the map), kept
//              for prefix reuse and evicted least-recently-released first when blocks run out;
//   free       ref_count == 0 and no hash.
// num_available() counts free + cached blocks (both can be allocated). Not thread-safe: the engine
// thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace baton {

using BlockId = std::int32_t;
using BlockHash = std::uint64_t;

class KvBlockPool {
 public:
  // key_lead: how many tokens past its last position a block's content depends on. 0 for a
  // model's own KV (position p holds what tokens [0, p] made); 1 for an EAGLE/MTP head's, whose
  // position p also consumed token p + 1. Block i is then keyed by tokens [i * block_size + lead,
  // (i + 1) * block_size + lead), the first block by tokens [0, block_size + lead).
  KvBlockPool(std::int32_t num_blocks, std::int32_t block_size, std::int32_t key_lead = 0);

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(blocks_.size()); }
  std::int32_t block_size() const { return block_size_; }
  std::int32_t key_lead() const { return key_lead_; }
  // The tokens block i of a sequence is keyed by (see key_lead), and how many leading blocks of a
  // sequence of n tokens have all of theirs.
  std::span<const std::int32_t> block_key(std::span<const std::int32_t> tokens, std::int32_t i) const;
  std::int32_t keyed_blocks(std::size_t n) const;
  // free + cached (evictable)
  std::int32_t num_available() const { return static_cast<std::int32_t>(free_.size() + cached_lru_.size()); }
  std::int32_t num_cached() const { return static_cast<std::int32_t>(cached_lru_.size()); }
  std::int32_t num_in_use() const { return num_blocks() - num_available(); }

  // A block with ref_count 1 and no hash, taken from the free list first, else by evicting the
  // least recently released cached block (its hash is dropped). nullopt when none is available.
  std::optional<BlockId> allocate();
  // Allocates n blocks or none (all-or-nothing).
  std::optional<std::vector<BlockId>> allocate(std::int32_t n);

  void add_ref(BlockId id);  // id must be in use or cached (a cached block becomes in use again)
  void release(BlockId id);  // drops one reference; at 0 the block becomes cached or free
  void release(std::span<const BlockId> ids);  // releases in reverse order (tail blocks evict first)
  std::int32_t ref_count(BlockId id) const;

  // ---- prefix cache -------------------------------------------------------------------------
  // Chained hash of a full block: xxh3-64 of its token ids seeded with the parent's hash (for the
  // first block: the request's cache salt, 0 without one). Equal chains of tokens give equal hashes.
  static BlockHash hash_block(BlockHash parent, std::span<const std::int32_t> tokens);

  // Registers `id` (in use, full, already holding the KV of `tokens`, its block_key) under `hash`, with its
  // parent block (-1 for the first block, which also records `salt`). If another block already
  // holds this exact content, nothing changes and that block's id is returned; otherwise returns id.
  BlockId register_full_block(BlockId id, BlockHash hash, BlockId parent, std::span<const std::int32_t> tokens,
                              std::uint64_t salt = 0);

  // The cached or in-use block holding exactly these tokens after `parent` (for a first block:
  // under `salt`), if any. Verifies the tokens, the parent and a first block's salt, so neither a
  // hash collision nor another cache salt can alias two prefixes. Does not take a reference.
  std::optional<BlockId> lookup(BlockHash hash, BlockId parent, std::span<const std::int32_t> tokens,
                                std::uint64_t salt = 0) const;

  // Longest run of leading full blocks of `tokens` that are cached under `salt` (a request's cache
  // salt: requests with different salts never share blocks), at most max_blocks; takes a reference
  // on each returned block.
  std::vector<BlockId> match_prefix(std::span<const std::int32_t> tokens, std::int32_t max_blocks,
                                    std::uint64_t salt = 0);
  // Gives back the tail of a match_prefix() result the caller does not use after all: releases
  // those blocks (last first) and takes them out of the hit count.
  void unmatch(std::span<const BlockId> blocks);

  bool is_registered(BlockId id) const;

  // Hit statistics for metrics: blocks asked for in match_prefix and blocks found.
  std::int64_t prefix_queries() const { return prefix_queries_; }
  std::int64_t prefix_hits() const { return prefix_hits_; }

 private:
  struct Block {
    std::int32_t ref_count = 0;
    std::uint64_t generation = 0;  // bumped whenever the block's content may change (eviction)
    bool registered = false;
    BlockHash hash = 0;
    BlockId parent = -1;
    std::uint64_t parent_generation = 0;
    std::uint64_t salt = 0;                 // a first block's (parent -1) cache salt
    std::vector<std::int32_t> tokens;       // the block's tokens while registered
    std::list<BlockId>::iterator lru_pos;   // valid while cached
  };

  void unregister(BlockId id);
  void check_id(BlockId id) const;

  std::int32_t block_size_;
  std::int32_t key_lead_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;             // a stack: recently freed blocks are reused first
  std::list<BlockId> cached_lru_;         // front: released longest ago (evicted first)
  std::unordered_multimap<BlockHash, BlockId> by_hash_;
  std::int64_t prefix_queries_ = 0;
  std::int64_t prefix_hits_ = 0;
};

}  // namespace baton
