// Which vector instruction sets this CPU (and its OS) supports, for choosing a kernel tier.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace baton::cpu {

// kAvx512Bf16 is an opt-in numerics mode, never chosen by "auto": GEMMs over BF16 weights round
// the activations to BF16 and use the AVX512-BF16 dot-product instruction (as llama.cpp and oneDNN
// do). Faster for BF16 prefill, but its results differ from the exact-f32 tiers.
enum class CpuIsa { kPortable, kAvx2, kAvx512, kAvx512Bf16 };

struct CpuFeatures {
  bool avx2 = false;         // with FMA and F16C
  bool avx512 = false;       // F, BW, VL, DQ
  bool avx512_bf16 = false;  // reported for the record; the exact-f32 kernels do not need it
  bool amx_bf16 = false;

  static CpuFeatures detect();
  CpuIsa best() const;
  bool supports(CpuIsa isa) const;
  std::string describe() const;  // "avx2 avx512 avx512_bf16 amx_bf16"
};

std::string_view isa_name(CpuIsa isa);
// "auto" resolves to the best supported tier; an unsupported or unknown name is an error.
absl::StatusOr<CpuIsa> resolve_isa(std::string_view name, const CpuFeatures& features);

}  // namespace baton::cpu
