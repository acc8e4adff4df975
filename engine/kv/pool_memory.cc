#include "engine/kv/pool_memory.h"

#include "common/status.h"

namespace baton {

absl::StatusOr<PoolMemory> PoolMemory::allocate(Backend& backend, std::size_t bytes, KvMemoryProvider* provider,
                                                std::string_view pool_name, std::string_view what) {
  PoolMemory m;
  m.bytes_ = bytes;
  if (provider == nullptr) {
    BATON_ASSIGN_OR_RETURN(m.device_, backend.allocate(bytes));
    return m;
  }
  if (backend.device().type != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        str_cat(what, ": pool ", pool_name, " cannot take memory from a KV memory provider on a non-CPU device"));
  }
  BATON_ASSIGN_OR_RETURN(m.external_, provider->allocate(bytes, pool_name));
  if (m.external_.data == nullptr || m.external_.bytes < bytes) {
    return absl::InternalError(str_cat(what, ": the KV memory provider gave pool ", pool_name, " ", m.external_.bytes,
                                       " bytes, ", bytes, " needed"));
  }
  return m;
}

}  // namespace baton
