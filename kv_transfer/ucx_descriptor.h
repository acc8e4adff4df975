// The UCX receiver's descriptor: what a sender needs to write into a decode node's pools — the
// network worker's address and, per pool, its name, remote base address, size and packed remote
// key; and, when the pools live in the receiver's shared memory (ucx_shm_memory.h), a second
// section for the shared-memory worker: its address and one packed remote key per pool (same
// pools, same bases). Encoded as a small versioned little-endian binary record (it travels as
// KvDestination.transport_descriptor bytes):
//
//   "BUCX" | u32 version (2) | u32 len, worker address | u32 pool count |
//   per pool: u32 len, name | u64 base | u64 bytes | u32 len, packed rkey |
//   u32 has shared memory (0 or 1) | if 1: u32 len, shm worker address | per pool: u32 len, shm rkey
//
// Must not: depend on UCX (the bytes of addresses and keys are opaque here); trust its input —
// decode checks every length and range and names the field it rejects.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::kv {

inline constexpr std::uint32_t kUcxDescriptorVersion = 2;

struct UcxRemotePool {
  std::string name;
  std::uint64_t base = 0;   // address in the receiver's process
  std::uint64_t bytes = 0;
  std::string rkey;         // ucp_rkey_pack output
};

// The same pools through the receiver's shared-memory worker (a sender on the same host only).
struct UcxShmSection {
  std::string worker_address;
  std::vector<std::string> rkeys;  // per pool, in pool order
};

struct UcxDescriptor {
  std::string worker_address;  // ucp_worker_get_address output
  std::vector<UcxRemotePool> pools;
  std::optional<UcxShmSection> shm;
};

std::string encode_ucx_descriptor(const UcxDescriptor& descriptor);

// INVALID_ARGUMENT naming the field when the bytes are truncated, of another version or transport,
// have trailing bytes, describe an impossible pool (empty, or base + bytes past 2^64), or have a
// shared-memory section that is malformed (flag not 0/1, empty address or key).
absl::StatusOr<UcxDescriptor> decode_ucx_descriptor(std::string_view bytes);

}  // namespace baton::kv
