// UcxKvMemoryProvider: the engine's KvMemoryProvider backed by the UCX transport's shared memory
// (kv_transfer/ucx_shm_memory.h), so that a prefill node on the same host writes the decode
// engine's KV pools with memory copies. When shared memory cannot hold a pool (a small /dev/shm,
// SysV limits) the pool gets private memory instead, with a warning: it still works over the
// network path, only slower.
// Must not: let the engine see UCX (it sees only KvMemoryProvider).
#pragma once

#include <memory>

#include "engine/kv/kv_memory.h"
#include "kv_transfer/ucx_shm_memory.h"

namespace baton {

std::shared_ptr<KvMemoryProvider> make_ucx_kv_memory_provider(std::shared_ptr<kv::UcxShmMemory> shm);

}  // namespace baton
