// Fuzzes what a decode node checks in a prefill node's KvLink stream (kv_transfer/kv_link_receiver.cc)
// with the receiver's own helpers: the parse of each KvLinkMessage (node.proto), the bounds check of
// every put's copies against the receiver's pools (check_pool_range, kv_transfer/copy_range.h) and
// the cutting of each copy into link pieces (for_each_piece, kv_transfer/kv_link.h) under the
// receiver's guard (a copy larger than its largest pool ends the stream before it is cut). It also
// merges each put's copies as the senders do (merge_adjacent_copies).
//
// LinkKvReceiver::handle_link itself reads a grpc::ServerReaderWriter and joins a link, which
// needs a live gRPC call: its inline checks (hello fields, one request id per transfer, the
// largest-pool guard) are not reached here; docs/fuzzing.md says how to make them reachable.
//
// Input: the stream's messages, each as a varint length and the KvLinkMessage's wire bytes (protobuf's
// delimited format); parsing stops at the first that does not parse, as the stream would end. The
// receiver has pools "target" (1 MiB) and "draft" (64 KiB); its piece size is the first hello's
// max_segment_bytes when that is at least 4 KiB, else NCCL's 64 MiB.
//
// Checks: check_pool_range accepts a copy exactly when it lies inside the pool (offset + bytes
// computed with an overflow check) and names the range when it refuses; the pieces of a copy tile it in order, each
// non-empty and at most the piece size; merging keeps the bytes and order and drops empty copies.
//
// Must not: open sockets, start gRPC, threads or NCCL, or skip an input by its content.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "baton/v1/node.pb.h"
#include "fuzz/fuzz_support.h"
#include "kv_transfer/copy_range.h"
#include "kv_transfer/kv_link.h"

namespace {

struct Pool {
  const char* name;
  std::uint64_t bytes;
};
constexpr Pool kPools[] = {{"target", 1u << 20}, {"draft", 64u << 10}};
constexpr std::uint64_t kLargestPool = 1u << 20;
constexpr std::uint64_t kNcclPieceBytes = std::uint64_t{64} << 20;

void check_copy(std::int32_t pool, const baton::node::v1::KvLinkCopy& copy, std::uint64_t max_piece) {
  if (copy.bytes() > kLargestPool) return;  // the receiver ends the stream here
  const bool pool_ok = pool >= 0 && static_cast<std::size_t>(pool) < std::size(kPools);
  if (pool_ok) {
    const std::uint64_t pool_bytes = kPools[pool].bytes;
    const absl::Status s = baton::kv::check_pool_range("destination", "KvLink request r", pool, copy.dst_offset(),
                                                       copy.bytes(), pool_bytes);
    std::uint64_t end = 0;
    const bool inside = !__builtin_add_overflow(copy.dst_offset(), copy.bytes(), &end) && end <= pool_bytes;
    FUZZ_CHECK(s.ok() == inside);
    FUZZ_CHECK(s.ok() || (s.code() == absl::StatusCode::kInvalidArgument && !s.message().empty()));
  }
  std::uint64_t next = 0, pieces = 0;
  baton::kv::for_each_piece(copy.bytes(), max_piece, [&](std::uint64_t offset, std::uint64_t bytes) {
    FUZZ_CHECK(offset == next);
    FUZZ_CHECK(bytes > 0 && bytes <= max_piece);
    next += bytes;
    ++pieces;
  });
  FUZZ_CHECK(next == copy.bytes());
  FUZZ_CHECK(pieces == copy.bytes() / max_piece + (copy.bytes() % max_piece != 0 ? 1 : 0));
}

void check_merge(const baton::node::v1::KvLinkPut& put) {
  std::vector<baton::kv::Copy> copies;
  std::uint64_t total = 0;
  bool overflow = false;  // totals past 2^64 are not compared
  for (const auto& c : put.copies()) {
    copies.push_back({c.dst_offset() ^ put.transfer(), c.dst_offset(), c.bytes()});
    overflow |= __builtin_add_overflow(total, c.bytes(), &total);
  }
  baton::kv::merge_adjacent_copies(copies);
  std::uint64_t merged = 0;
  for (const baton::kv::Copy& c : copies) {
    FUZZ_CHECK(c.bytes > 0);
    overflow |= __builtin_add_overflow(merged, c.bytes, &merged);
  }
  FUZZ_CHECK(overflow || merged == total);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // strings that are not UTF-8 fail the parse quietly
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  std::uint64_t max_piece = kNcclPieceBytes;
  bool first = true;
  baton::node::v1::KvLinkMessage message;
  std::uint32_t length = 0;
  while (in.ReadVarint32(&length)) {
    const auto limit = in.PushLimit(static_cast<int>(length));
    const bool parsed = message.ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
    in.PopLimit(limit);
    if (!parsed) break;
    if (message.has_hello()) {
      if (first && message.hello().max_segment_bytes() >= 4096) max_piece = message.hello().max_segment_bytes();
    } else if (message.has_put()) {
      for (const auto& copy : message.put().copies()) check_copy(message.put().pool(), copy, max_piece);
      check_merge(message.put());
    }
    first = false;
  }
  return 0;
}
