// Measures this machine's F32 fused-multiply-add peak with the pool's threads: every thread runs
// independent FMA chains in registers (no memory traffic), with the widest vectors the CPU has
// (AVX-512, else AVX2). The result is the compute ceiling of the exact-F32 kernels: a step's
// GEMM flops divided by it is the least time the step can take, however good the kernel.
// measure_bf16_dot_peak does the same with VDPBF16PS (two BF16 products and their sums per lane):
// the ceiling of the opt-in avx512bf16 tier's GEMMs over BF16 weights.
#pragma once

#include "kernels/cpu/thread_pool.h"

namespace baton::bench {

struct ComputePeak {
  double flops_per_second = 0;       // median over repetitions
  double best_flops_per_second = 0;  // the fastest repetition: floors use this
};

ComputePeak measure_fma_peak(cpu::ThreadPool& pool, int repetitions);
// Zero when the CPU lacks AVX512_BF16.
ComputePeak measure_bf16_dot_peak(cpu::ThreadPool& pool, int repetitions);

}  // namespace baton::bench
