#include "kernels/backend_factory.h"

#include <charconv>

#include "common/status.h"

#if BATON_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace baton {

absl::StatusOr<std::unique_ptr<Backend>> make_backend(const BackendOptions& options) {
  switch (options.device.type) {
    case DeviceType::kCpu:
      return make_cpu_backend(options);
    case DeviceType::kCuda:
#if BATON_HAVE_CUDA
      return make_cuda_backend(options);
#else
      return absl::UnimplementedError(str_cat("device ", device_name(options.device),
                                              ": this build has no CUDA backend (configure with -DBATON_CUDA=ON "
                                              "on a machine with the CUDA toolkit)"));
#endif
  }
  return absl::InvalidArgumentError("unknown device type");
}

absl::StatusOr<Device> parse_device(std::string_view text) {
  if (text == "cpu") return Device{DeviceType::kCpu, 0};
  if (text == "cuda") return Device{DeviceType::kCuda, 0};
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int index = -1;
    const char* end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data() + 5, end, index);
    if (ec == std::errc() && p == end && index >= 0) return Device{DeviceType::kCuda, index};
  }
  return absl::InvalidArgumentError(str_cat("device must be cpu, cuda or cuda:N, got '", text, "'"));
}

bool cuda_backend_built() { return BATON_HAVE_CUDA != 0; }

int available_cuda_devices() {
#if BATON_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

}  // namespace baton
