#include "engine/model/device_picks.h"

#include <algorithm>

#include "common/status.h"

namespace baton {

absl::Status DevicePicks::allocate(Backend& backend, std::int64_t max_rows) {
  backend_ = &backend;
  max_rows_ = std::max<std::int64_t>(max_rows, 1);
  const std::size_t bytes = static_cast<std::size_t>(max_rows_) * sizeof(std::int32_t);
  BATON_ASSIGN_OR_RETURN(device_, backend.allocate(bytes));
  if (!backend.host_reads_device_memory()) {
    BATON_ASSIGN_OR_RETURN(host_, backend.allocate_staging(bytes));
  }
  return absl::OkStatus();
}

TensorView DevicePicks::ids(std::int64_t rows) const {
  BATON_CHECK(backend_ != nullptr && rows >= 0 && rows <= max_rows_, "DevicePicks: ", rows, " rows, room for ",
              max_rows_, " (allocate())");
  return device_.view(DType::kI32, {rows});
}

std::span<const std::int32_t> DevicePicks::fetch(std::int64_t rows) {
  const TensorView v = ids(rows);
  if (backend_->host_reads_device_memory()) {
    backend_->synchronize();
    return {v.ptr<const std::int32_t>(), static_cast<std::size_t>(rows)};
  }
  auto* host = static_cast<std::int32_t*>(host_.data());
  backend_->copy_to_host(host, v.data, static_cast<std::size_t>(rows) * sizeof(std::int32_t));
  return {host, static_cast<std::size_t>(rows)};
}

std::span<const std::int32_t> DevicePicks::argmax(const TensorView& logits) {
  const std::int64_t rows = logits.dim(0);
  backend_->argmax_rows(logits, ids(rows));
  return fetch(rows);
}

}  // namespace baton
