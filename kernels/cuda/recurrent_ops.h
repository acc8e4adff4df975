// recurrent_ops: the CUDA backend's recurrent-layer ops (Backend's sigmoid_mul .. ssd_recurrence,
// kernels/backend.h) — each checks its TensorViews as the CPU twin does and launches
// recurrent.cuh's kernel on `stream`. CudaBackend forwards to these.
//
// Must not: synchronize, or read device memory from the host (the RecurrentBatch's rows live on
// the device; its ranges were checked when the batch was planned).
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.h"

namespace baton::cuda_ops {

void sigmoid_mul(cudaStream_t stream, const TensorView& x, const TensorView& gate, const TensorView& out);
void relu_squared(cudaStream_t stream, const TensorView& x, const TensorView& out);
void gated_rms_norm(cudaStream_t stream, const TensorView& x, const TensorView& gate, const TensorView& weight,
                    float eps, const TensorView& out);
void gated_group_rms_norm(cudaStream_t stream, const TensorView& x, const TensorView& gate, const TensorView& weight,
                          std::int64_t group_size, float eps, const TensorView& out);
void causal_conv1d(cudaStream_t stream, const TensorView& x, const TensorView& weight, const TensorView& bias,
                   const TensorView& state, const RecurrentBatch& batch, const TensorView& out);
void gated_delta_rule(cudaStream_t stream, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& b, const TensorView& a, const TensorView& a_log, const TensorView& dt_bias,
                      const TensorView& state, const RecurrentBatch& batch, const TensorView& out);
void ssd_recurrence(cudaStream_t stream, const TensorView& x, const TensorView& dt_in, const TensorView& b,
                    const TensorView& c, const TensorView& a_log, const TensorView& dt_bias, const TensorView& d,
                    float dt_min, float dt_max, const TensorView& state, const RecurrentBatch& batch,
                    const TensorView& out);

}  // namespace baton::cuda_ops
