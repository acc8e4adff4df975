// tensor_args: TensorViews checked and turned into the CUDA launchers' plain arguments
// (launch_args.cuh), and CUDA errors turned into checks. Shared by the CUDA backend's op files.
//
// Must not: launch anything, or accept a view whose layout a launcher cannot read.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/cuda/launch_args.cuh"
#include "kernels/tensor.h"

namespace baton {

inline void check_cuda(cudaError_t err, const char* what) {
  BATON_CHECK(err == cudaSuccess, "CUDA ", what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

inline void check_f32(const TensorView& v, const char* what) {
  BATON_CHECK(v.dtype == DType::kF32, what, " must be F32: ", v.describe());
}

inline cuda::WeightType weight_type(const TensorView& w, const char* what) {
  switch (w.dtype) {
    case DType::kF32: return cuda::WeightType::kF32;
    case DType::kBF16: return cuda::WeightType::kBF16;
    case DType::kF16: return cuda::WeightType::kF16;
    default: break;
  }
  BATON_CHECK(false, what, " must be F32, BF16 or F16: ", w.describe());
  return cuda::WeightType::kF32;
}

// The same row view as kernels/cpu/rows.h, as launcher arguments.
inline cuda::RowsArg rows(const TensorView& v) {
  BATON_CHECK(v.ndim >= 1 && v.ndim <= 3, "expected 1-3 dims: ", v.describe());
  BATON_CHECK(v.dim(-1) <= 1 || v.stride(-1) == 1, "last dim must be contiguous: ", v.describe());
  cuda::RowsArg a;
  a.data = v.data;
  a.cols = v.dim(-1);
  a.inner = v.ndim == 3 ? v.dim(1) : 1;
  a.count = v.ndim == 1 ? 1 : v.dim(0) * a.inner;
  a.stride0 = v.ndim == 1 ? 0 : v.stride(0);
  a.stride1 = v.ndim == 3 ? v.stride(1) : 0;
  return a;
}

inline cuda::HeadsArg heads(const TensorView& v, const char* what) {
  check_f32(v, what);
  BATON_CHECK(v.ndim == 3 && v.stride(2) == 1, what, " must be [tokens, heads, head_dim] with contiguous head_dim: ",
              v.describe());
  cuda::HeadsArg a;
  a.data = v.ptr<float>();
  a.tokens = v.dim(0);
  a.heads = static_cast<int>(v.dim(1));
  a.head_dim = static_cast<int>(v.dim(2));
  a.stride0 = v.stride(0);
  a.stride1 = v.stride(1);
  return a;
}

}  // namespace baton
