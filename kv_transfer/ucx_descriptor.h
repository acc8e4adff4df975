// The UCX receiver's descriptor: what a sender needs to write into a decode node's pools — the
// receiver worker's address and, per pool, its name, remote base address, size and packed remote
// key. Encoded as a small versioned little-endian binary record (it travels as
// KvDestination.transport_descriptor bytes):
//
//   "BUCX" | u32 version (1) | u32 len, worker address | u32 pool count |
//   per pool: u32 len, name | u64 base | u64 bytes | u32 len, packed rkey
//
// Must not: depend on UCX (the bytes of addresses and keys are opaque here); trust its input —
// decode checks every length and range and names the field it rejects.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::kv {

inline constexpr std::uint32_t kUcxDescriptorVersion = 1;

struct UcxRemotePool {
  std::string name;
  std::uint64_t base = 0;   // address in the receiver's process
  std::uint64_t bytes = 0;
  std::string rkey;         // ucp_rkey_pack output
};

struct UcxDescriptor {
  std::string worker_address;  // ucp_worker_get_address output
  std::vector<UcxRemotePool> pools;
};

std::string encode_ucx_descriptor(const UcxDescriptor& descriptor);

// INVALID_ARGUMENT naming the field when the bytes are truncated, of another version or transport,
// have trailing bytes, or describe an impossible pool (empty, or base + bytes past 2^64).
absl::StatusOr<UcxDescriptor> decode_ucx_descriptor(std::string_view bytes);

}  // namespace baton::kv
