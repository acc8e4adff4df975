#include "kernels/cpu/cpu_features.h"

#include <vector>

#include "absl/strings/str_join.h"
#include "common/status.h"

namespace baton::cpu {

CpuFeatures CpuFeatures::detect() {
  __builtin_cpu_init();
  CpuFeatures f;
  // __builtin_cpu_supports also checks that the OS saves the wider register state (XGETBV).
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#if defined(__GNUC__) && __GNUC__ >= 12
  f.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
  return f;
}

CpuIsa CpuFeatures::best() const {
  if (avx512) return CpuIsa::kAvx512;
  if (avx2) return CpuIsa::kAvx2;
  return CpuIsa::kPortable;
}

bool CpuFeatures::supports(CpuIsa isa) const {
  switch (isa) {
    case CpuIsa::kPortable: return true;
    case CpuIsa::kAvx2: return avx2;
    case CpuIsa::kAvx512: return avx512;
    case CpuIsa::kAvx512Bf16: return avx512_bf16;
  }
  return false;
}

std::string CpuFeatures::describe() const {
  std::vector<std::string> names;
  if (avx2) names.emplace_back("avx2");
  if (avx512) names.emplace_back("avx512");
  if (avx512_bf16) names.emplace_back("avx512_bf16");
  if (amx_bf16) names.emplace_back("amx_bf16");
  return names.empty() ? std::string("none") : absl::StrJoin(names, " ");
}

std::string_view isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable: return "portable";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

absl::StatusOr<CpuIsa> resolve_isa(std::string_view name, const CpuFeatures& features) {
  if (name == "auto" || name.empty()) return features.best();
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (name != isa_name(isa)) continue;
    if (!features.supports(isa)) {
      return absl::FailedPreconditionError(str_cat("cpu_isa '", name, "' is not supported by this CPU (it has: ",
                                                        features.describe(), ")"));
    }
    return isa;
  }
  return absl::InvalidArgumentError(
      str_cat("unknown cpu_isa '", name, "' (use auto, portable, avx2, avx512 or avx512bf16)"));
}

}  // namespace baton::cpu
