// linear() (gemm.cuh). PLACEHOLDER until the GEMM kernels land.
#include "kernels/cuda/gemm.cuh"

namespace baton::cuda {

struct GemmContext {};
GemmContext* gemm_create(cudaStream_t, std::string*) { return new GemmContext(); }
void gemm_destroy(GemmContext* context) { delete context; }
cudaError_t linear(GemmContext*, const LinearArgs&, bool, cudaStream_t) { return cudaErrorNotSupported; }

}  // namespace baton::cuda
