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
#include <dlfcn.h>

#include <climits>
#include <memory>
#include <string>
#include <type_traits>

#include "kernels/cuda/gemm_internal.cuh"

namespace baton::cuda {
namespace {

std::string cublas_error(const CublasApi& api, const char* what, cublasStatus_t s) {
  return std::string("cuBLAS: ") + what + " failed: " + api.status_name(s) + " (" + api.status_string(s) + ")";
}

// libcublas of the toolkit we were compiled against, loaded once per process (never unloaded).
// Null with *error set when it or one of its symbols is missing.
const CublasApi* load_cublas(std::string* error) {
  static const CublasApi* api = nullptr;
  static std::string load_error;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      load_error = "cannot load " + soname + ": " + dlerror();
    } else {
      static CublasApi loaded;
      bool ok = true;
      auto bind = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
        if (fn == nullptr && ok) {
          ok = false;
          load_error = soname + " has no " + name;
        }
      };
      bind(loaded.create, "cublasCreate_v2");
      bind(loaded.destroy, "cublasDestroy_v2");
      bind(loaded.set_stream, "cublasSetStream_v2");
      bind(loaded.set_math_mode, "cublasSetMathMode");
      bind(loaded.set_workspace, "cublasSetWorkspace_v2");
      bind(loaded.gemm_ex, "cublasGemmEx");
      bind(loaded.status_name, "cublasGetStatusName");
      bind(loaded.status_string, "cublasGetStatusString");
      if (ok) api = &loaded;
    }
  }
  if (api == nullptr && error != nullptr) *error = load_error;
  return api;
}

bool fits_int(const LinearArgs& a) {
  for (const std::int64_t v : {a.m, a.n, a.k, a.ldx, a.ldw, a.ldy}) {
    if (v > INT_MAX) return false;
  }
  return true;
}

}  // namespace

GemmContext* gemm_create(cudaStream_t stream, bool with_cublas, std::string* error) {
  auto ctx = std::make_unique<GemmContext>();
  ctx->stream = stream;
  if (!with_cublas) return ctx.release();
  ctx->cublas = load_cublas(error);
  if (ctx->cublas == nullptr) return nullptr;
  const CublasApi& api = *ctx->cublas;
  cublasStatus_t s = api.create(&ctx->handle);
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (error != nullptr) *error = cublas_error(api, "cublasCreate", s);
    return nullptr;
  }
  s = api.set_stream(ctx->handle, stream);
  const char* what = "cublasSetStream";
  if (s == CUBLAS_STATUS_SUCCESS) {
    // Tensor cores for the 16-bit GEMMs; F32 GEMMs ask for CUBLAS_COMPUTE_32F_PEDANTIC per call.
    s = api.set_math_mode(ctx->handle, CUBLAS_DEFAULT_MATH);
    what = "cublasSetMathMode";
  }
  if (s == CUBLAS_STATUS_SUCCESS) {
    if (cudaMalloc(&ctx->workspace, kCublasWorkspaceBytes) != cudaSuccess) {
      cudaGetLastError();
      ctx->workspace = nullptr;
      if (error != nullptr) *error = "cannot allocate cuBLAS's workspace (" + std::to_string(kCublasWorkspaceBytes) + " bytes)";
      api.destroy(ctx->handle);
      return nullptr;
    }
    s = api.set_workspace(ctx->handle, ctx->workspace, kCublasWorkspaceBytes);
    what = "cublasSetWorkspace";
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (error != nullptr) *error = cublas_error(api, what, s);
    api.destroy(ctx->handle);
    if (ctx->workspace != nullptr) cudaFree(ctx->workspace);
    return nullptr;
  }
  return ctx.release();
}

void gemm_destroy(GemmContext* context) {
  if (context == nullptr) return;
  if (context->scratch != nullptr) {
    // Stream-ordered frees after the work that used them; wait so the memory is really returned.
    context->retired_scratch.push_back(context->scratch);
    for (void* block : context->retired_scratch) cudaFreeAsync(block, context->stream);
    cudaStreamSynchronize(context->stream);
  }
  if (context->handle != nullptr) context->cublas->destroy(context->handle);
  if (context->workspace != nullptr) cudaFree(context->workspace);  // after the handle that used it
  delete context;
}

cudaError_t linear(GemmContext* context, const LinearArgs& args, bool batch_invariant, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0) return cudaSuccess;
  if (!batch_invariant && context != nullptr && context->handle != nullptr && args.m > kCublasMinRows && args.k > 0 &&
      fits_int(args)) {
    return linear_cublas(*context, args, stream);
  }
  return linear_invariant(args, stream);
}

}  // namespace baton::cuda
