// The CPU kernels compiled for the portable tier (instruction-set flags are set in kernels/CMakeLists.txt).
// System headers come first so the includes inside the tier namespace add only our own code.
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
namespace tier_portable {
namespace {
#include "kernels/cpu/simd16_portable.h"
#include "kernels/cpu/kernels_impl.h"
}  // namespace
}  // namespace tier_portable

const KernelTable& portable_kernel_table() { return tier_portable::make_table("portable"); }

}  // namespace baton::cpu
