// Row access for CPU ops: a 1-D to 3-D view whose last dimension is contiguous, seen as
// count() rows of cols() elements (leading dimensions flattened in row-major order).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/status.h"
#include "kernels/tensor.h"

namespace baton::cpu {

// Rows per thread for a row-wise op over rows of `cols` floats: a thread's share must be worth
// waking it (a few tens of microseconds of work), or the op runs on the calling thread alone.
// Waking a worker costs as much as streaming ~32K floats, far more on a loaded machine.
inline std::int64_t min_rows_per_thread(std::int64_t cols) {
  constexpr std::int64_t kMinFloatsPerThread = 1 << 15;
  return std::max<std::int64_t>(1, kMinFloatsPerThread / std::max<std::int64_t>(1, cols));
}

template <class T>
class Rows {
 public:
  explicit Rows(const TensorView& v) : v_(v) {
    BATON_CHECK(v.ndim >= 1 && v.ndim <= 3, "expected 1-3 dims: ", v.describe());
    BATON_CHECK(v.dim(-1) <= 1 || v.stride(-1) == 1, "last dim must be contiguous: ", v.describe());
    cols_ = v.dim(-1);
    inner_ = v.ndim == 3 ? v.dim(1) : 1;
    count_ = v.ndim == 1 ? 1 : v.dim(0) * inner_;
  }
  std::int64_t count() const { return count_; }
  std::int64_t cols() const { return cols_; }
  T* row(std::int64_t r) const {
    if (v_.ndim == 1) return static_cast<T*>(v_.data);
    const std::int64_t outer = r / inner_;
    const std::int64_t in = r % inner_;
    std::int64_t off = outer * v_.stride(0);
    if (v_.ndim == 3) off += in * v_.stride(1);
    return static_cast<T*>(v_.data) + off;
  }

 private:
  TensorView v_;
  std::int64_t cols_ = 0, inner_ = 1, count_ = 0;
};

}  // namespace baton::cpu
