#include "kernels/backend.h"

#include <utility>

#include "common/status.h"

namespace baton {

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  if (owner_ != nullptr && data_ != nullptr) owner_->free(data_, bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

TensorView DeviceBuffer::view(DType dtype, std::initializer_list<std::int64_t> shape) const {
  TensorView v = TensorView::contiguous(data_, dtype, shape, owner_ != nullptr ? owner_->device() : Device{});
  BATON_CHECK(static_cast<std::size_t>(v.numel()) * dtype_size(dtype) <= bytes_, "view ", v.describe(),
              " does not fit a buffer of ", bytes_, " bytes");
  return v;
}

void Backend::sample_rows(const TensorView& /*logits*/, std::span<const SampleRowParams> /*params*/,
                          const TensorView& /*out*/) {
  BATON_CHECK(false, "sample_rows() on ", describe(), ", which does not sample (samples_rows() is false)");
}

}  // namespace baton
