#include "kernels/backend.h"

#include <algorithm>
#include <new>
#include <utility>

#include "common/status.h"

namespace baton {

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      staging_(std::exchange(other.staging_, false)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    staging_ = std::exchange(other.staging_, false);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  if (owner_ != nullptr && data_ != nullptr) {
    if (staging_) {
      owner_->free_staging(data_, bytes_);
    } else {
      owner_->free(data_, bytes_);
    }
  }
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
  staging_ = false;
}

TensorView DeviceBuffer::view(DType dtype, std::initializer_list<std::int64_t> shape) const {
  TensorView v = TensorView::contiguous(data_, dtype, shape, owner_ != nullptr && !staging_ ? owner_->device() : Device{});
  BATON_CHECK(static_cast<std::size_t>(v.numel()) * dtype_size(dtype) <= bytes_, "view ", v.describe(),
              " does not fit a buffer of ", bytes_, " bytes");
  return v;
}

namespace {
constexpr std::align_val_t kStagingAlignment{64};
}  // namespace

void Backend::moe(const TensorView&, const TensorView&, const MoeExperts&, const MoeScratch&, const TensorView&) {
  BATON_CHECK(false, describe(), " has no mixture-of-experts kernels (check runs_moe() before loading such a model)");
}

void Backend::sigmoid_mul(const TensorView&, const TensorView&, const TensorView&) {
  BATON_CHECK(false, describe(), " has no linear-attention kernels (check runs_linear_attention() before loading)");
}

void Backend::causal_conv1d(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                            const RecurrentBatch&, const TensorView&) {
  BATON_CHECK(false, describe(), " has no linear-attention kernels (check runs_linear_attention() before loading)");
}

void Backend::gated_delta_rule(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                               const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                               const RecurrentBatch&, const TensorView&) {
  BATON_CHECK(false, describe(), " has no linear-attention kernels (check runs_linear_attention() before loading)");
}

void Backend::gated_rms_norm(const TensorView&, const TensorView&, const TensorView&, float, const TensorView&) {
  BATON_CHECK(false, describe(), " has no linear-attention kernels (check runs_linear_attention() before loading)");
}

void Backend::relu_squared(const TensorView&, const TensorView&) {
  BATON_CHECK(false, describe(), " has no Mamba-2 kernels (check runs_mamba2() before loading)");
}

void Backend::ssd_recurrence(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                             const TensorView&, const TensorView&, const TensorView&, float, float, const TensorView&,
                             const RecurrentBatch&, const TensorView&) {
  BATON_CHECK(false, describe(), " has no Mamba-2 kernels (check runs_mamba2() before loading)");
}

void Backend::gated_group_rms_norm(const TensorView&, const TensorView&, const TensorView&, std::int64_t, float,
                                   const TensorView&) {
  BATON_CHECK(false, describe(), " has no Mamba-2 kernels (check runs_mamba2() before loading)");
}

absl::StatusOr<DeviceBuffer> Backend::allocate_staging(std::size_t bytes) {
  void* p = ::operator new(std::max<std::size_t>(bytes, 1), kStagingAlignment, std::nothrow);
  if (p == nullptr) return absl::ResourceExhaustedError(str_cat("cannot allocate ", bytes, " bytes of host staging memory"));
  return DeviceBuffer(this, p, bytes, /*staging=*/true);
}

void Backend::free_staging(void* data, std::size_t /*bytes*/) { ::operator delete(data, kStagingAlignment); }

void Backend::sample_rows(const TensorView& /*logits*/, std::span<const SampleRowParams> /*params*/,
                          const TensorView& /*out*/) {
  BATON_CHECK(false, "sample_rows() on ", describe(), ", which does not sample (samples_rows() is false)");
}

absl::Status Backend::begin_capture() {
  return absl::UnimplementedError(str_cat(describe(), " cannot capture graphs"));
}

absl::StatusOr<std::unique_ptr<OpGraph>> Backend::end_capture() {
  return absl::UnimplementedError(str_cat(describe(), " cannot capture graphs"));
}

}  // namespace baton
