// UcxKvMemoryProvider (ucx_kv_memory.h). Must not: hand out memory it cannot release.
#include "decode_node/ucx_kv_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace baton {
namespace {

class UcxKvMemoryProvider final : public KvMemoryProvider {
 public:
  explicit UcxKvMemoryProvider(std::shared_ptr<kv::UcxShmMemory> shm) : shm_(std::move(shm)) {}

  absl::StatusOr<ExternalMemory> allocate(std::size_t bytes, std::string_view pool_name) override {
    auto shared = shm_->allocate(bytes, pool_name);
    if (shared.ok()) return ExternalMemory{shared->base, shared->bytes, std::move(shared->owner)};
    spdlog::warn("KV pool {}: no UCX shared memory for {} bytes ({}); same-host prefill nodes will use the "
                 "slower network path",
                 pool_name, bytes, std::string(shared.status().message()));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(str_cat("KV pool ", pool_name, ": mmap of ", bytes, " bytes: ", std::strerror(errno)));
    }
    return ExternalMemory{p, bytes, std::shared_ptr<void>(p, [bytes](void* q) { munmap(q, bytes); })};
  }

 private:
  std::shared_ptr<kv::UcxShmMemory> shm_;
};

}  // namespace

std::shared_ptr<KvMemoryProvider> make_ucx_kv_memory_provider(std::shared_ptr<kv::UcxShmMemory> shm) {
  return std::make_shared<UcxKvMemoryProvider>(std::move(shm));
}

}  // namespace baton
