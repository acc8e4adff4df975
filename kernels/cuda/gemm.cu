// linear() (gemm.cuh): the GemmContext's life cycle and the choice between the batch-invariant
// kernel (gemm_invariant.cu) and cuBLAS (gemm_cublas.cu).
//
// The choice: cuBLAS only when the backend is not batch-invariant, m > kCublasMinRows, k > 0 and
// every size and stride fits cuBLAS's int arguments; the invariant kernel otherwise (so small
// batches keep their bits even on a non-invariant backend).
//
// Must not: synchronise the host in linear(); pick a path by anything that varies between the
// calls a batch-invariant backend makes (the invariant path is taken whenever batch_invariant is
// true, for every m).
#include <climits>
#include <memory>
#include <string>

#include "kernels/cuda/gemm_internal.cuh"

namespace baton::cuda {
namespace {

std::string cublas_error(const char* what, cublasStatus_t s) {
  return std::string("cuBLAS: ") + what + " failed: " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")";
}

bool fits_int(const LinearArgs& a) {
  for (const std::int64_t v : {a.m, a.n, a.k, a.ldx, a.ldw, a.ldy}) {
    if (v > INT_MAX) return false;
  }
  return true;
}

}  // namespace

GemmContext* gemm_create(cudaStream_t stream, std::string* error) {
  auto ctx = std::make_unique<GemmContext>();
  ctx->stream = stream;
  cublasStatus_t s = cublasCreate(&ctx->handle);
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (error != nullptr) *error = cublas_error("cublasCreate", s);
    return nullptr;
  }
  s = cublasSetStream(ctx->handle, stream);
  const char* what = "cublasSetStream";
  if (s == CUBLAS_STATUS_SUCCESS) {
    // Tensor cores for the 16-bit GEMMs; F32 GEMMs ask for CUBLAS_COMPUTE_32F_PEDANTIC per call.
    s = cublasSetMathMode(ctx->handle, CUBLAS_DEFAULT_MATH);
    what = "cublasSetMathMode";
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (error != nullptr) *error = cublas_error(what, s);
    cublasDestroy(ctx->handle);
    return nullptr;
  }
  return ctx.release();
}

void gemm_destroy(GemmContext* context) {
  if (context == nullptr) return;
  if (context->scratch != nullptr) {
    // Stream-ordered free after the work that used it; wait so the memory is really returned.
    cudaFreeAsync(context->scratch, context->stream);
    cudaStreamSynchronize(context->stream);
  }
  if (context->handle != nullptr) cublasDestroy(context->handle);
  delete context;
}

cudaError_t linear(GemmContext* context, const LinearArgs& args, bool batch_invariant, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0) return cudaSuccess;
  if (!batch_invariant && context != nullptr && args.m > kCublasMinRows && args.k > 0 && fits_int(args)) {
    return linear_cublas(*context, args, stream);
  }
  return linear_invariant(args, stream);
}

}  // namespace baton::cuda
