// moe_ops: the CUDA backend's mixture-of-experts layer (Backend::moe, kernels/backend.h), built
// from moe.cuh's routing, grouping and combining kernels, the grouped batch-invariant linear
// (gemm.cuh) and the backend's own gather_rows, silu_mul and linear. A token's output is
// bit-identical whatever else shares its batch or its experts.
//
// MoeRunner keeps the device memory this needs between calls: the routing tables (grown by powers
// of two, old blocks kept alive for graphs captured with them) and, per layer, the device array of
// its experts' weight pointers. Both are made on a call that needs them, so the first call at a
// size must not be inside a graph capture (CudaBackend::moe checks ready() and gives the capture up
// otherwise; the engine runs every shape eagerly before capturing it).
//
// Must not: synchronise or read device memory from the host (beyond the one-time uploads of a
// layer's pointer table), or hold TensorViews past a call.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/backend.h"

namespace baton::cuda_ops {

class MoeRunner {
 public:
  // Whether run() can go ahead without allocating for tokens * experts.top_k pairs.
  bool ready(const MoeExperts& experts, std::int64_t tokens) const;
  // Makes what ready() lacked (never inside a graph capture).
  void prepare(Backend& backend, const MoeExperts& experts, std::int64_t tokens);
  // Backend::moe on `stream`; ready() must hold.
  void run(Backend& backend, cudaStream_t stream, const TensorView& x, const TensorView& router_logits,
           const MoeExperts& experts, const MoeScratch& scratch, const TensorView& out);
  // Frees everything (before the backend that owns the memory goes).
  void clear();

 private:
  struct PointerTable {
    std::vector<const void*> host;  // the experts' gate_up weights, then their down weights
    DeviceBuffer device;
  };
  const PointerTable* table_for(const MoeExperts& experts) const;

  DeviceBuffer routing_;             // expert_of, weight_of, source, row_of and tiles for capacity_ pairs
  std::int64_t capacity_ = 0;        // pairs
  std::vector<DeviceBuffer> retired_;  // outgrown routing blocks and tables: captured graphs may use them
  std::map<const void*, PointerTable> tables_;  // by the layer's first gate_up weight
};

}  // namespace baton::cuda_ops
