// make_backend: the one place that turns BackendOptions::device into a Backend.
//
// The CPU backend is always built; the CUDA backend only when the toolkit was found at configure
// time (BATON_CUDA=AUTO|ON). Asking for a device this build or this machine lacks is an error that
// says which, never a silent fall-back to the CPU.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace baton {

absl::StatusOr<std::unique_ptr<Backend>> make_backend(const BackendOptions& options);

// "cpu", "cuda" (= cuda:0) or "cuda:N".
absl::StatusOr<Device> parse_device(std::string_view text);

// Whether this build includes the CUDA backend (it may still find no GPU at run time).
bool cuda_backend_built();

// The number of CUDA devices this process can use: 0 without the CUDA backend, a driver or a GPU.
int available_cuda_devices();

}  // namespace baton
