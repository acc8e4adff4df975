// Fuzzes the UCX descriptor decoder, kv_transfer/ucx_descriptor.h: decode_ucx_descriptor on the
// bytes a prefill node finds in KvDestination.transport_descriptor (a decode node's, or anyone's
// who can reach the prefill node's service).
//
// Input: the descriptor bytes.
//
// Checks: decode returns (never throws or crashes); a descriptor that decodes is well-formed as
// ucx_descriptor.h says (1 to 16 pools, none empty, base + bytes below 2^64, non-empty keys and
// addresses, one shared-memory key per pool) and is canonical: encode_ucx_descriptor gives back
// exactly the input (the format has one encoding per descriptor and decode refuses trailing bytes).
//
// Must not: start UCX, or skip an input by its content.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_support.h"
#include "kv_transfer/ucx_descriptor.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto decoded = baton::kv::decode_ucx_descriptor(bytes);
  if (!decoded.ok()) return 0;
  const baton::kv::UcxDescriptor& d = *decoded;
  FUZZ_CHECK(!d.worker_address.empty());
  FUZZ_CHECK(!d.pools.empty() && d.pools.size() <= 16);
  for (const baton::kv::UcxRemotePool& pool : d.pools) {
    FUZZ_CHECK(pool.bytes > 0 && pool.base <= UINT64_MAX - pool.bytes && !pool.rkey.empty());
  }
  if (d.shm) {
    FUZZ_CHECK(!d.shm->worker_address.empty() && d.shm->rkeys.size() == d.pools.size());
    for (const auto& rkey : d.shm->rkeys) FUZZ_CHECK(!rkey.empty());
  }
  FUZZ_CHECK(baton::kv::encode_ucx_descriptor(d) == bytes);
  return 0;
}
