// Paged attention (attention.cuh). PLACEHOLDER until the attention kernels land.
#include "kernels/cuda/attention.cuh"

namespace baton::cuda {

cudaError_t write_kv(HeadsArg, HeadsArg, const std::int32_t*, KvCacheArg, cudaStream_t) { return cudaErrorNotSupported; }
cudaError_t paged_attention(const AttentionArgs&, cudaStream_t) { return cudaErrorNotSupported; }

}  // namespace baton::cuda
