// Row-wise and element-wise CUDA ops of the Backend: embedding, RMSNorm, SiLU·mul, add, row
// gather and strided copy. F32 activations; each output row is computed by one thread block (or
// independent threads) in an order that does not depend on how many rows the call has, so results
// are batch-invariant. Semantics are the CPU twins' (kernels/cpu/cpu_backend.cc).
#pragma once

#include "kernels/cuda/launch_args.cuh"

namespace baton::cuda {

// out[t, :] = widen(table[ids[t], :]). table: [vocab, hidden] rows `table_stride` elements apart.
cudaError_t embedding(const void* table, WeightType table_type, std::int64_t table_stride, std::int64_t hidden,
                      const std::int32_t* ids, std::int64_t tokens, RowsArg out, cudaStream_t stream);

// out = x * rsqrt(mean(x^2) + eps) * weight, row-wise; x and out may alias. weight: [cols] F32.
cudaError_t rms_norm(RowsArg x, const float* weight, float eps, RowsArg out, cudaStream_t stream);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, out.cols + i].
cudaError_t silu_mul(RowsArg gate_up, RowsArg out, cudaStream_t stream);

// out = a + b; any of them may alias.
cudaError_t add(RowsArg a, RowsArg b, RowsArg out, cudaStream_t stream);

// out = residual + silu(x); any of them may alias.
cudaError_t silu_add(RowsArg x, RowsArg residual, RowsArg out, cudaStream_t stream);

// out[i, :] = src[indices[i], :] for i < out.count.
cudaError_t gather_rows(RowsArg src, const std::int32_t* indices, RowsArg out, cudaStream_t stream);

// out = src, same count and cols.
cudaError_t copy_rows(RowsArg src, RowsArg out, cudaStream_t stream);

}  // namespace baton::cuda
