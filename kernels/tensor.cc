#include "kernels/tensor.h"

#include "absl/strings/str_join.h"

namespace baton {

std::string device_name(Device d) {
  return d.type == DeviceType::kCpu ? std::string("cpu") : str_cat("cuda:", d.index);
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                                  Device device) {
  BATON_CHECK(shape.size() <= kMaxDims, "too many dims: ", shape.size());
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (std::int64_t s : shape) v.shape[static_cast<std::size_t>(i++)] = s;
  std::int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[static_cast<std::size_t>(d)] = stride;
    stride *= v.shape[static_cast<std::size_t>(d)];
  }
  return v;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[static_cast<std::size_t>(d)];
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

TensorView TensorView::slice0(std::int64_t begin, std::int64_t end) const {
  BATON_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "slice0 [", begin, ", ",
              end, ") of ", describe());
  TensorView v = *this;
  v.data = static_cast<char*>(data) + begin * strides[0] * static_cast<std::int64_t>(dtype_size(dtype));
  v.shape[0] = end - begin;
  return v;
}

TensorView TensorView::slice_last(std::int64_t begin, std::int64_t end) const {
  const auto last = static_cast<std::size_t>(ndim - 1);
  BATON_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[last], "slice_last [", begin,
              ", ", end, ") of ", describe());
  TensorView v = *this;
  v.data = static_cast<char*>(data) + begin * strides[last] * static_cast<std::int64_t>(dtype_size(dtype));
  v.shape[last] = end - begin;
  return v;
}

TensorView TensorView::reshape(std::initializer_list<std::int64_t> new_shape) const {
  BATON_CHECK(is_contiguous(), "reshape of a non-contiguous view ", describe());
  TensorView v = contiguous(data, dtype, new_shape, device);
  BATON_CHECK(v.numel() == numel(), "reshape changes the element count: ", describe(), " -> ",
              v.describe());
  return v;
}

TensorView TensorView::split_last(std::int64_t n) const {
  const auto last = static_cast<std::size_t>(ndim - 1);
  BATON_CHECK(ndim < kMaxDims && n > 0 && shape[last] % n == 0, "split_last(", n, ") of ", describe());
  TensorView v = *this;
  v.ndim = ndim + 1;
  v.shape[last] = n;
  v.shape[last + 1] = shape[last] / n;
  v.strides[last] = strides[last] * v.shape[last + 1];
  v.strides[last + 1] = strides[last];
  return v;
}

std::string TensorView::describe() const {
  std::vector<std::int64_t> s(shape.begin(), shape.begin() + ndim);
  std::vector<std::int64_t> st(strides.begin(), strides.begin() + ndim);
  return str_cat(dtype_name(dtype), "[", absl::StrJoin(s, ", "), "] strides [",
                      absl::StrJoin(st, ", "), "] on ", device_name(device));
}

}  // namespace baton
