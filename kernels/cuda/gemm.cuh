// linear() on CUDA: y = x @ w^T (+ bias) with F32 activations and F32/BF16/F16 weights, F32
// accumulation.
//
// Two paths. The batch-invariant kernel (the default) computes every output element with one
// fixed reduction order whatever the number of rows, so a token's logits are bit-identical in a
// decode step, a (k+1)-token verification or a prefill; it reads each weight once per call for all
// rows (the k+1 verification tokens ride along in the weight read). The cuBLAS path (only when the
// backend's batch_invariant is false) is faster for large row counts, and its bits depend on them.
#pragma once

#include <string>

#include "kernels/cuda/launch_args.cuh"

namespace baton::cuda {

struct LinearArgs {
  const float* x = nullptr;  // [m, k], rows ldx apart
  std::int64_t ldx = 0;
  const void* w = nullptr;   // [n, k], rows ldw apart
  WeightType w_type = WeightType::kF32;
  std::int64_t ldw = 0;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;        // [m, n], rows ldy apart
  std::int64_t ldy = 0;
  std::int64_t m = 0, n = 0, k = 0;
};

// Handles and scratch the GEMM paths keep between calls (cuBLAS handle, conversion buffers).
struct GemmContext;

// Null with *error set when the context cannot be made (e.g. cuBLAS fails to initialise).
GemmContext* gemm_create(cudaStream_t stream, std::string* error);
void gemm_destroy(GemmContext* context);

cudaError_t linear(GemmContext* context, const LinearArgs& args, bool batch_invariant, cudaStream_t stream);

}  // namespace baton::cuda
