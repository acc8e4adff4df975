// DevicePicks: one token id per logits row, written on the backend where the logits are
// (Backend::argmax_rows / sample_rows), and those ids brought to the host: read in place where the
// host can read device memory, else one copy of rows * 4 bytes into staging memory. Shared by the engine's step (the
// target's picks) and the model proposers (greedy drafts), so the logits rows never cross.
//
// Sized once (allocate()); no allocation after that. It picks
// nothing itself beyond argmax(): the caller says which backend op fills ids().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace baton {

class DevicePicks {
 public:
  absl::Status allocate(Backend& backend, std::int64_t max_rows);

  // [rows] I32 on the backend, for an op to write (rows <= the allocated maximum).
  TensorView ids(std::int64_t rows) const;
  // The first `rows` ids as the last op wrote them; valid until the next fetch() or argmax().
  std::span<const std::int32_t> fetch(std::int64_t rows);
  // Backend::argmax_rows over logits ([rows, vocab] on the backend), then fetch().
  std::span<const std::int32_t> argmax(const TensorView& logits);

 private:
  Backend* backend_ = nullptr;
  std::int64_t max_rows_ = 0;
  DeviceBuffer device_;  // [max_rows] I32
  DeviceBuffer host_;    // [max_rows] I32 staging memory, where the host cannot read device memory
};

}  // namespace baton
