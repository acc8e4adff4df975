// TensorView: a non-owning description of an n-d array in some device's memory.
//
// A view is a pointer, a dtype, a shape and strides (in elements), plus the device the pointer
// lives on. It never owns or frees memory and never copies; ownership lives in DeviceBuffer
// (backend.h). Host code must not dereference a view whose device is not the CPU.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/status.h"
#include "kernels/dtype.h"

namespace baton {

enum class DeviceType : std::uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

std::string device_name(Device d);

struct TensorView {
  static constexpr int kMaxDims = 5;

  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device{};
  int ndim = 0;
  std::array<std::int64_t, kMaxDims> shape{};
  std::array<std::int64_t, kMaxDims> strides{};  // in elements, not bytes

  // A contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               Device device = {});

  std::int64_t dim(int i) const { return shape[static_cast<std::size_t>(i < 0 ? ndim + i : i)]; }
  std::int64_t stride(int i) const { return strides[static_cast<std::size_t>(i < 0 ? ndim + i : i)]; }
  std::int64_t numel() const;
  bool is_contiguous() const;
  bool empty() const { return data == nullptr; }

  // Rows [begin, end) of dimension 0.
  TensorView slice0(std::int64_t begin, std::int64_t end) const;
  // Columns [begin, end) of the last dimension (the result is strided when end-begin < dim(-1)).
  TensorView slice_last(std::int64_t begin, std::int64_t end) const;
  // Same memory, new contiguous shape. The view must be contiguous.
  TensorView reshape(std::initializer_list<std::int64_t> new_shape) const;
  // Splits the last dimension into [n, dim(-1)/n]; strides follow.
  TensorView split_last(std::int64_t n) const;

  template <class T>
  T* ptr() const { return static_cast<T*>(data); }

  std::string describe() const;  // "F32[3, 4] strides [4, 1] on cpu"
};

}  // namespace baton
