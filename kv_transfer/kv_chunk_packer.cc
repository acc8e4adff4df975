// KvChunkPacker (kv_chunk_packer.h). Must not: copy a source byte before its copy's range is checked.
#include "kv_transfer/kv_chunk_packer.h"

#include <algorithm>

#include "common/status.h"
#include "kv_transfer/copy_range.h"

namespace baton::kv {
namespace {

// What a segment costs in a chunk beyond its data (tags, lengths, offset), rounded up: the chunk's
// budget counts it so that many tiny segments cannot push a message past the receiver's limit.
constexpr std::size_t kSegmentOverhead = 24;

}  // namespace

KvChunkPacker::KvChunkPacker(const std::vector<MemoryRegion>* local_pools, std::string request_id, std::string capability,
                             std::size_t max_chunk_bytes)
    : local_(local_pools),
      request_id_(std::move(request_id)),
      capability_(std::move(capability)),
      max_chunk_bytes_(std::max(kSegmentOverhead + 1, max_chunk_bytes)) {}

void KvChunkPacker::add(std::int32_t pool, std::vector<Copy> copies) {
  std::erase_if(copies, [](const Copy& c) { return c.bytes == 0; });
  const auto n = static_cast<std::int64_t>(copies.size());
  if (!copies.empty()) batches_.push_back(Batch{pool, std::move(copies), 0, 0, copies_added_});
  copies_added_ += n;
}

absl::Status KvChunkPacker::next(baton::node::v1::KvChunk& chunk) {
  chunk.clear_segments();  // keeps the segments' buffers for reuse
  chunk.clear_request_id();
  chunk.clear_capability();
  if (!sent_first_) {
    chunk.set_request_id(request_id_);
    chunk.set_capability(capability_);
  }
  sent_first_ = true;

  Batch& batch = batches_.front();
  const std::int32_t pool = batch.pool;
  chunk.set_pool(pool);
  if (pool < 0 || static_cast<std::size_t>(pool) >= local_->size()) {
    return absl::InvalidArgumentError(str_cat("grpc transfer of request ", request_id_, ": pool ", pool,
                                              " is out of range (", local_->size(), " local pools)"));
  }
  const MemoryRegion& region = (*local_)[pool];
  std::size_t used = 0;
  // Fill from the front batches of the same pool until the chunk is full.
  while (!batches_.empty() && batches_.front().pool == pool && max_chunk_bytes_ - used > kSegmentOverhead) {
    Batch& b = batches_.front();
    const Copy& c = b.copies[b.index];
    if (b.done_bytes == 0) {
      BATON_RETURN_IF_ERROR(check_pool_range(
          "local", str_cat("grpc transfer of request ", request_id_, ": copy ", b.first_copy_number + b.index),
          pool, c.src_offset, c.bytes, region.bytes));
    }
    const std::uint64_t n = std::min<std::uint64_t>(max_chunk_bytes_ - used - kSegmentOverhead, c.bytes - b.done_bytes);
    baton::node::v1::KvSegment* seg = chunk.add_segments();
    seg->set_dst_offset(c.dst_offset + b.done_bytes);
    seg->mutable_data()->assign(static_cast<const char*>(region.base) + c.src_offset + b.done_bytes, n);
    used += kSegmentOverhead + n;
    bytes_packed_ += static_cast<std::int64_t>(n);
    b.done_bytes += n;
    if (b.done_bytes == c.bytes) {
      b.done_bytes = 0;
      if (++b.index == b.copies.size()) batches_.pop_front();
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::kv
