// The CPU kernels compiled for the avx512 tier (instruction-set flags are set in kernels/CMakeLists.txt).
// System headers come first so the includes inside the tier namespace add only our own code.
#include <immintrin.h>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/dtype.h"

namespace baton::cpu {
namespace tier_avx512 {
namespace {
#include "kernels/cpu/simd16_avx512.h"
#include "kernels/cpu/kernels_impl.h"
}  // namespace
}  // namespace tier_avx512

const KernelTable& avx512_kernel_table() { return tier_avx512::make_table("avx512"); }

}  // namespace baton::cpu
