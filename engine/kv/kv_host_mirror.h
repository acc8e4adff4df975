// KvHostMirror: host memory laid out exactly like one KV pool, for KV transports that reach only
// host memory while the pool lives where the host cannot read it (a GPU's memory; Debian's UCX
// has no CUDA support). A byte has the same offset in the mirror as in the pool, so a transport
// addresses the mirror as it would address the pool, and peers need not know it exists.
//
//   prefill role: download() the bytes a forward wrote, wait for the returned fence, and only
//                 then let the transport read them from the mirror;
//   decode role:  the transport writes the mirror; upload() moves a committed request's blocks
//                 into the pool before its first step.
//
// The mirror is as large as its pool (size the KV budget with that in mind). Its memory is the
// provider's when one is given (a decode node's shared memory, which a prefill node on the same
// host writes directly), else the backend's staging memory (page-locked on a GPU).
//
// Must not: copy anything it was not asked to; be used off the thread that drives the backend.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_memory.h"
#include "kernels/backend.h"

namespace baton {

class KvHostMirror {
 public:
  // `pool` and `backend` must outlive the mirror.
  static absl::StatusOr<KvHostMirror> create(Backend& backend, const KvCache& pool, KvMemoryProvider* provider,
                                             std::string_view pool_name);

  // The host memory transports use in place of the pool's.
  KvRegion region() const { return KvRegion{data_, bytes_, Device{DeviceType::kCpu, 0}}; }

  // Enqueues pool -> mirror copies of `spans` (offsets in the pool, hence in the mirror) behind
  // the work enqueued so far, beside later work where the device can (Backend::copy_to_host_async),
  // and returns a fence: the bytes are in the mirror once backend.wait_for(fence) has returned.
  // The pool's bytes in `spans` must not be rewritten before then.
  std::uint64_t download(std::span<const KvSpan> spans);
  // Mirror -> pool copies of `spans`; returns once they are done, so the mirror's bytes may change
  // again as soon as this returns.
  void upload(std::span<const KvSpan> spans);
  // The spans of whole blocks, every layer.
  void append_block_spans(std::span<const std::int32_t> blocks, std::vector<KvSpan>& out) const;

 private:
  KvHostMirror(Backend& backend, const KvCache& pool) : backend_(&backend), pool_(&pool) {}

  Backend* backend_;
  const KvCache* pool_;
  DeviceBuffer staging_;      // the backend's staging memory, or
  ExternalMemory external_;   // the provider's
  char* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<HostCopy> copies_;  // download()'s, reused
};

}  // namespace baton
