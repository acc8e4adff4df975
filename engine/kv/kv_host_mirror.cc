// KvHostMirror (kv_host_mirror.h).
#include "engine/kv/kv_host_mirror.h"

#include "common/status.h"

namespace baton {
namespace {

// Calls f(offset, bytes) once per run of back-to-back spans (blocks allocated in a row are
// adjacent in a layer), so a long prompt's KV moves in few large copies, not one per block.
template <class F>
void for_each_run(std::span<const KvSpan> spans, std::size_t limit, F&& f) {
  std::size_t i = 0;
  while (i < spans.size()) {
    const std::size_t offset = spans[i].offset;
    std::size_t end = offset + spans[i].bytes;
    for (++i; i < spans.size() && spans[i].offset == end; ++i) end += spans[i].bytes;
    BATON_CHECK(end <= limit, "KV host mirror: span [", offset, ", ", end, ") outside the pool's ", limit, " bytes");
    f(offset, end - offset);
  }
}

}  // namespace

absl::StatusOr<KvHostMirror> KvHostMirror::create(Backend& backend, const KvCache& pool, KvMemoryProvider* provider,
                                                  std::string_view pool_name) {
  KvHostMirror m(backend, pool);
  const std::size_t bytes = pool.region().bytes;
  if (provider != nullptr) {
    BATON_ASSIGN_OR_RETURN(m.external_, provider->allocate(bytes, pool_name));
    if (m.external_.data == nullptr || m.external_.bytes < bytes) {
      return absl::InternalError(str_cat("KV host mirror of pool ", pool_name, ": the KV memory provider gave ",
                                         m.external_.bytes, " bytes, ", bytes, " needed"));
    }
    m.data_ = static_cast<char*>(m.external_.data);
  } else {
    absl::StatusOr<DeviceBuffer> staging = backend.allocate_staging(bytes);
    if (!staging.ok()) {
      return absl::Status(staging.status().code(), str_cat("KV host mirror of pool ", pool_name, " (", bytes,
                                                           " bytes, as large as the pool): ", staging.status().message()));
    }
    m.staging_ = std::move(*staging);
    m.data_ = static_cast<char*>(m.staging_.data());
  }
  m.bytes_ = bytes;
  return m;
}

std::uint64_t KvHostMirror::download(std::span<const KvSpan> spans) {
  const auto* pool = static_cast<const char*>(pool_->region().base);
  copies_.clear();
  for_each_run(spans, bytes_, [&](std::size_t offset, std::size_t bytes) {
    copies_.push_back(HostCopy{data_ + offset, pool + offset, bytes});
  });
  if (copies_.empty()) return 0;  // fence 0 has always passed
  return backend_->copy_to_host_async(copies_);
}

void KvHostMirror::upload(std::span<const KvSpan> spans) {
  auto* pool = static_cast<char*>(pool_->region().base);
  for_each_run(spans, bytes_, [&](std::size_t offset, std::size_t bytes) {
    backend_->copy_to_device(pool + offset, data_ + offset, bytes);
  });
  // Page-locked sources are read by a later DMA: wait, so the caller may rewrite them.
  backend_->wait_for(backend_->fence());
}

void KvHostMirror::append_block_spans(std::span<const std::int32_t> blocks, std::vector<KvSpan>& out) const {
  for (std::int32_t layer = 0; layer < pool_->layout().num_layers; ++layer) {
    for (const std::int32_t b : blocks) out.push_back(pool_->span(layer, b));
  }
}

}  // namespace baton
