// OpenBLAS path for large F32 GEMMs when batch invariance is explicitly turned off. OpenBLAS runs
// single-threaded inside each of our pool's chunks, so there is still one thread pool.
#include <cblas.h>

#include "kernels/cpu/cpu_backend.h"

namespace baton::cpu {

void blas_init_single_threaded() { openblas_set_num_threads(1); }

void blas_gemm_f32(const GemmArgs& a, std::int64_t n_begin, std::int64_t n_end) {
  const auto* w = static_cast<const float*>(a.w) + n_begin * a.ldw;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(a.rows),
              static_cast<blasint>(n_end - n_begin), static_cast<blasint>(a.k), 1.0f, a.x,
              static_cast<blasint>(a.ldx), w, static_cast<blasint>(a.ldw), 0.0f, a.y + n_begin,
              static_cast<blasint>(a.ldy));
  if (a.bias != nullptr) {
    for (std::int64_t m = 0; m < a.rows; ++m) {
      float* y = a.y + m * a.ldy;
      for (std::int64_t n = n_begin; n < n_end; ++n) y[n] += a.bias[n];
    }
  }
}

}  // namespace baton::cpu
