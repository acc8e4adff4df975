#include "prefill_node/kv_push_plan.h"

#include <algorithm>

#include "common/status.h"

namespace baton {

std::uint64_t kv_span_offset(const KvCacheLayout& layout, std::int32_t num_blocks, std::int32_t layer, std::int32_t block) {
  const auto per = static_cast<std::uint64_t>(layout.bytes_per_block_per_layer());
  return (static_cast<std::uint64_t>(layer) * static_cast<std::uint64_t>(num_blocks) + static_cast<std::uint64_t>(block)) * per;
}

void plan_rows(const KvCache& local, const PeerPool& peer, std::int32_t layer, BlockId local_block, BlockId peer_block,
               std::int32_t row_begin, std::int32_t row_end, std::vector<kv::Copy>& out) {
  const KvCacheLayout& l = local.layout();
  BATON_CHECK(peer_block >= 0 && peer_block < peer.num_blocks, "peer block ", peer_block, " of ", peer.num_blocks);
  const std::uint64_t half = static_cast<std::uint64_t>(l.bytes_per_block_per_layer()) / 2;  // K or V of one block
  const std::uint64_t row = half / static_cast<std::uint64_t>(l.block_size);
  const std::uint64_t src = local.span(layer, local_block).offset;
  const std::uint64_t dst = kv_span_offset(peer.layout, peer.num_blocks, layer, peer_block);
  const std::uint64_t first = static_cast<std::uint64_t>(row_begin) * row;
  const std::uint64_t bytes = static_cast<std::uint64_t>(row_end - row_begin) * row;
  if (row_begin == 0 && row_end == l.block_size) {
    out.push_back({src, dst, 2 * half});  // the whole (layer, block): K and V together
    return;
  }
  out.push_back({src + first, dst + first, bytes});                // K rows
  out.push_back({src + half + first, dst + half + first, bytes});  // V rows
}

void plan_positions(const KvCache& local, const PeerPool& peer, std::int32_t layer, std::int32_t start,
                    std::int32_t num_tokens, std::span<const BlockId> local_blocks, std::span<const BlockId> peer_blocks,
                    std::vector<kv::Copy>& out) {
  const std::int32_t bs = local.layout().block_size;
  const std::int32_t end = start + num_tokens;
  for (std::int32_t pos = start; pos < end;) {
    const auto b = static_cast<std::size_t>(pos / bs);
    if (b >= peer_blocks.size() || b >= local_blocks.size()) break;
    const std::int32_t block_end = std::min(end, static_cast<std::int32_t>(b + 1) * bs);
    plan_rows(local, peer, layer, local_blocks[b], peer_blocks[b], pos - static_cast<std::int32_t>(b) * bs,
              block_end - static_cast<std::int32_t>(b) * bs, out);
    pos = block_end;
  }
}

void plan_blocks(const KvCache& local, const PeerPool& peer, std::span<const BlockId> local_blocks,
                 std::span<const BlockId> peer_blocks, std::vector<kv::Copy>& out) {
  BATON_CHECK(local_blocks.size() <= peer_blocks.size(), local_blocks.size(), " blocks for ", peer_blocks.size());
  const std::int32_t bs = local.layout().block_size;
  for (std::int32_t layer = 0; layer < local.layout().num_layers; ++layer) {
    for (std::size_t i = 0; i < local_blocks.size(); ++i) {
      plan_rows(local, peer, layer, local_blocks[i], peer_blocks[i], 0, bs, out);
    }
  }
}

void plan_state(const StateCache& local, std::int32_t peer_groups, std::int32_t group, std::int32_t peer_group,
                std::int32_t slot, std::vector<kv::Copy>& out) {
  const StateCacheLayout& l = local.layout();
  BATON_CHECK(peer_group >= 0 && peer_group < peer_groups, "peer state group ", peer_group, " of ", peer_groups);
  PoolGeometry peer = local.geometry();
  peer.num_units = peer_groups * l.slots;
  for (std::int32_t layer = 0; layer < l.num_layers; ++layer) {
    const KvSpan src = local.span(layer, group, slot);
    out.push_back({src.offset, peer.offset(layer, peer_group * l.slots + slot), src.bytes});
  }
}

}  // namespace baton
