// Which bytes of a prefill node's KV pools go where in a decode node's pools: turns the engine's
// per-layer writes (KvLayerWrite: positions [start, start + n) of one request) and whole blocks
// (prefix-cache hits, the proposer's pool) into transport copies (kv::Copy).
//
// Both sides lay a pool out as [layers, blocks, 2 (K, V), block_size, kv_heads, head_dim] with the
// same layout (the fingerprints matched); only the number of blocks — hence the layer stride —
// may differ, so destination offsets use the decode node's block count. A partial block moves
// only the rows written (K rows and V rows), so a block filled over two prefill chunks never has
// two copies of the same bytes in flight.
//
// A hybrid model's recurrent state moves once, at the hand-off: one slot of the request's group
// per recurrent layer (StateCache::span), into the same slot of the group the decode node
// reserved; the state pool is laid out [layers, groups, slots, floats] on both sides, and only
// the number of groups may differ.
//
// Must not: touch memory (it only computes offsets).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/state_cache.h"
#include "kv_transfer/transport.h"

namespace baton {

// One pool's geometry on the decode side.
struct PeerPool {
  KvCacheLayout layout;       // equal to the local pool's (fingerprint-checked)
  std::int32_t num_blocks = 0;
};

// Byte offset of (layer, block) in a pool of `num_blocks` blocks.
std::uint64_t kv_span_offset(const KvCacheLayout& layout, std::int32_t num_blocks, std::int32_t layer, std::int32_t block);

// Rows [row_begin, row_end) of one (layer, block): K rows and V rows, appended to `out`.
void plan_rows(const KvCache& local, const PeerPool& peer, std::int32_t layer, BlockId local_block, BlockId peer_block,
               std::int32_t row_begin, std::int32_t row_end, std::vector<kv::Copy>& out);

// Positions [start, start + num_tokens) of one layer; local_blocks/peer_blocks are the request's
// block tables (index = position / block_size). Positions past the peer's blocks are not sent.
void plan_positions(const KvCache& local, const PeerPool& peer, std::int32_t layer, std::int32_t start,
                    std::int32_t num_tokens, std::span<const BlockId> local_blocks, std::span<const BlockId> peer_blocks,
                    std::vector<kv::Copy>& out);

// Whole blocks, every layer, paired by index (local_blocks[i] -> peer_blocks[i]).
void plan_blocks(const KvCache& local, const PeerPool& peer, std::span<const BlockId> local_blocks,
                 std::span<const BlockId> peer_blocks, std::vector<kv::Copy>& out);

// Slot `slot` of local group `group`, every recurrent layer, into the same slot of the peer's group
// `peer_group` of `peer_groups`.
void plan_state(const StateCache& local, std::int32_t peer_groups, std::int32_t group, std::int32_t peer_group,
                std::int32_t slot, std::vector<kv::Copy>& out);

}  // namespace baton
