// linear() on CUDA: y = x @ w^T (+ bias) with F32 activations and F32/BF16/F16 weights, F32
// accumulation.
//
// Two paths. The batch-invariant kernel (gemm_invariant.cu; the default) computes every output
// element with one fixed reduction order that depends on k alone (8-element chunks dealt round-robin
// to 32 lanes, fmaf in index order, a fixed xor-butterfly over the lanes, then the bias), whatever
// the number of rows, so a token's logits are bit-identical in a decode step, a (k+1)-token
// verification or a prefill; for m <= 8 it reads each weight once per call for all rows (the k+1
// verification tokens ride along in the weight read), larger m is tiled by 8 rows. The cuBLAS path
// (gemm_cublas.cu; only when the backend's batch_invariant is false and m > 64) is faster for large
// row counts, and its bits depend on them.
//
// linear() enqueues on `stream` and never synchronises the host. It returns the launch status
// (cudaGetLastError) or a cuBLAS failure mapped to a cudaError_t (gemm_internal.cuh:
// cuda_error_from_cublas). The only allocation is the cuBLAS path's conversion scratch, owned by
// the context, stream-ordered, grown when a call needs more.
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
  float* y = nullptr;        // [m, n], rows ldy apart; must not overlap x
  std::int64_t ldy = 0;
  std::int64_t m = 0, n = 0, k = 0;
};

// Handles and scratch the GEMM paths keep between calls (cuBLAS handle, conversion buffers).
struct GemmContext;

// Null with *error set when the context cannot be made. `with_cublas` (for a backend that is not
// batch-invariant) loads libcublas with dlopen and makes a handle: a missing library or a failing
// initialisation is that error; without it linear() always takes the invariant kernel. The
// handle is bound to `stream`; linear() rebinds it if called with another stream, but the scratch
// is only safe to share between calls on one stream (CudaBackend has one).
GemmContext* gemm_create(cudaStream_t stream, bool with_cublas, std::string* error);
// Frees the handle and the scratch (waits for `stream` when there is scratch to free).
void gemm_destroy(GemmContext* context);

cudaError_t linear(GemmContext* context, const LinearArgs& args, bool batch_invariant, cudaStream_t stream);

// One tile of a grouped linear: rows [begin, end) of x and y go through expert `expert`'s weight
// (at most the launch's rows_per_tile rows); expert < 0 marks an unused tile, whose block exits.
struct GroupTile {
  std::int32_t expert = -1;
  std::int32_t begin = 0;
  std::int32_t end = 0;
  std::int32_t pad = 0;
};

// Mixture-of-experts linear: y[r] = x[r] @ w_e^T for every row r of every tile, e the tile's
// expert, with the batch-invariant kernel's reduction order, so row r's bits equal linear() of
// that row alone with w_e. The tiles (written on the device by moe_plan, moe.cuh) say which rows
// go to which expert, so the host never learns the grouping and nothing synchronises.
struct GroupedLinearArgs {
  const float* x = nullptr;  // [rows, k], rows ldx apart
  std::int64_t ldx = 0;
  const void* const* weights = nullptr;  // device array: expert e's [n, k] weight, rows ldw apart
  WeightType w_type = WeightType::kF32;
  std::int64_t ldw = 0;
  bool weights_vec = false;  // every expert's weight base and row stride are 16-byte aligned
  float* y = nullptr;        // [rows, n], rows ldy apart; must not overlap x
  std::int64_t ldy = 0;
  std::int64_t n = 0, k = 0;
  const GroupTile* tiles = nullptr;  // device array of max_tiles
  std::int64_t max_tiles = 0;
  int rows_per_tile = 1;  // 1, 2, 4 or 8: no tile holds more rows
};

cudaError_t linear_grouped(const GroupedLinearArgs& args, cudaStream_t stream);

}  // namespace baton::cuda
