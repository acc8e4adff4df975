#include "engine/model/device_picks.h"

#include <algorithm>

#include "common/status.h"

namespace baton {

absl::Status DevicePicks::allocate(Backend& backend, std::int64_t max_rows) {
  backend_ = &backend;
  max_rows_ = std::max<std::int64_t>(max_rows, 1);
  BATON_ASSIGN_OR_RETURN(device_, backend.allocate(static_cast<std::size_t>(max_rows_) * sizeof(std::int32_t)));
  host_.reserve(static_cast<std::size_t>(max_rows_));
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
  host_.resize(static_cast<std::size_t>(rows));
  backend_->copy_to_host(host_.data(), v.data, host_.size() * sizeof(std::int32_t));
  return host_;
}

std::span<const std::int32_t> DevicePicks::argmax(const TensorView& logits) {
  const std::int64_t rows = logits.dim(0);
  backend_->argmax_rows(logits, ids(rows));
  return fetch(rows);
}

}  // namespace baton
