// The prefill line's peer: OpenBLAS sgemm on one decoder layer's GEMM shapes (fused QKV, output
// projection, fused gate/up, down) with `rows` rows, split over a pool of `threads` threads by
// output columns like the backend's own non-invariant path, on buffers laid out like the engine's.
// Its GFLOP/s next to the engine's prefill GFLOP/s, measured in the same run, say how far the
// engine's GEMMs are from a well-kept BLAS on this machine.
//
// Must not: be timed against the engine in another run (the host's speed drifts), or use
// OpenBLAS's own threads (they would fight the pool's).
#pragma once

#include "engine/model/config.h"

namespace baton::bench {

// GFLOP/s over the whole layer: the median of five repetitions.
double openblas_layer_gflops(const ModelConfig& c, int rows, int threads);

}  // namespace baton::bench
