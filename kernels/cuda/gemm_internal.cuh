// Internals shared by the linear() translation units (gemm.cu dispatches, gemm_invariant.cu holds
// the batch-invariant kernel, gemm_cublas.cu the cuBLAS path). Not for use outside kernels/cuda/gemm*.
//
// Must not: be included by anything but gemm*.cu (it pulls in cuBLAS, which cuda_backend.cc and the
// engine never see); hold state outside GemmContext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cublas_v2.h>

#include "kernels/cuda/gemm.cuh"

namespace baton::cuda {

// Rows above which the non-invariant backend hands linear() to cuBLAS. At or below it the
// batch-invariant kernel is used anyway: it reads the weights once for all rows, which is what
// matters for decode and verification batches, and there cuBLAS has no advantage to trade bits for.
constexpr std::int64_t kCublasMinRows = 64;

// The cuBLAS entry points linear() uses, resolved with dlopen/dlsym when a non-invariant backend
// is created (gemm.cu). Nothing links libcublas: loading it puts ~110 KB of static TLS into every
// thread's stack, which breaks libraries that start threads with small fixed stacks (civetweb, the
// metrics endpoint, fails to start its workers), and a batch-invariant backend never calls it.
struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
  // (cublas_api.h overloads cublasGemmEx for C++; this is the C entry point's signature.)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
};

// One per CudaBackend (one stream). Everything here is touched only from the host thread that
// enqueues on `stream`.
struct GemmContext {
  const CublasApi* cublas = nullptr;  // null: no cuBLAS path (batch-invariant backend)
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;  // the stream `handle` is bound to
  // x converted to the weight's 16-bit type for cublasGemmEx (gemm_cublas.cu). Stream-ordered
  // (cudaMallocAsync on `stream`); grows (by powers of two), never shrinks, only when a call needs
  // more than it has, and never inside a graph capture.
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  // Blocks the scratch outgrew. A CUDA graph captured earlier holds their addresses and replays
  // them, so they stay allocated until gemm_destroy (powers of two: together less than `scratch`).
  std::vector<void*> retired_scratch;
  // cuBLAS's own workspace, ours (cublasSetWorkspace) so that a GEMM captured in a CUDA graph
  // never has cuBLAS allocate inside the capture; kCublasWorkspaceBytes, cudaMalloc'd at create.
  void* workspace = nullptr;
};

// 32 MiB: what NVIDIA recommends for Hopper (4 MiB suffices before it).
constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

// The batch-invariant kernel (gemm_invariant.cu). Any m; needs no context.
cudaError_t linear_invariant(const LinearArgs& args, cudaStream_t stream);

// The cuBLAS path (gemm_cublas.cu). Needs k > 0 and every size and stride to fit in an int
// (cuBLAS's argument type); linear() checks both before calling it. A cuBLAS failure comes back as
// cuda_error_from_cublas(status).
cudaError_t linear_cublas(GemmContext& context, const LinearArgs& args, cudaStream_t stream);

// cuBLAS statuses as CUDA errors (CudaBackend reports linear() failures by cudaError_t):
// ALLOC_FAILED -> cudaErrorMemoryAllocation, INVALID_VALUE -> cudaErrorInvalidValue,
// NOT_SUPPORTED / ARCH_MISMATCH -> cudaErrorNotSupported, NOT_INITIALIZED -> cudaErrorInitializationError,
// anything else (EXECUTION_FAILED, INTERNAL_ERROR, ...) -> cudaErrorUnknown.
cudaError_t cuda_error_from_cublas(cublasStatus_t status);

}  // namespace baton::cuda
