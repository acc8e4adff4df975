// CudaBackend: the Backend on one NVIDIA GPU. F32 activations (like the CPU backend, so that the
// engine's activation buffers, the KV cache and the logits have the same meaning on both); weights
// in F32, BF16 or F16, uploaded once at load and read in their stored dtype with F32 accumulation.
//
// Every op is enqueued on the backend's one stream in call order; copy_to_host() and synchronize()
// wait for it. begin_capture()/end_capture() record the ops into a CUDA graph (thread-local stream
// capture) that OpGraph::replay() launches in one call; cuBLAS gets its own workspace at creation
// (cublasSetWorkspace) so a captured GEMM allocates nothing. Kernels live in kernels/cuda/*.cu by op (pointwise, rope, attention, gemm); this
// file only checks views and translates them to the launchers' plain arguments. Any thread may
// call it: each entry point first binds the calling thread to the backend's device
// (device_binding.h), and fences from the compute and the copy stream use separate event rings
// (fence_ring.h).
//
// Must not: fall back to the CPU for any op; allocate device memory inside an op other than the
// GEMM's cuBLAS scratch (which grows once); read host memory in place (reads_host_memory() is
// false, so the loader uploads weights).
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace baton {

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options);

// The number of CUDA devices this process sees (0 when there is no driver or no GPU).
int cuda_device_count();

}  // namespace baton
