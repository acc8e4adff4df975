#include "kernels/step_profile.h"

#include <mutex>

namespace baton {
namespace {

std::mutex g_mu;
std::array<double, static_cast<int>(ProfileClass::kCount)> g_totals{};

}  // namespace

std::atomic<bool> StepProfile::enabled_{false};
thread_local int ProfileScope::depth_ = 0;

std::string_view profile_class_name(ProfileClass c) {
  switch (c) {
    case ProfileClass::kGemm: return "gemm";
    case ProfileClass::kAttention: return "attention";
    case ProfileClass::kNormRopeAct: return "norm_rope_act";
    case ProfileClass::kSampling: return "sampling_verification";
    case ProfileClass::kProposer: return "proposer";
    case ProfileClass::kCount: break;
  }
  return "?";
}

std::array<double, static_cast<int>(ProfileClass::kCount)> StepProfile::totals() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_totals;
}

void StepProfile::reset() {
  std::lock_guard<std::mutex> l(g_mu);
  g_totals.fill(0.0);
}

void ProfileScope::add(ProfileClass c, double seconds) {
  std::lock_guard<std::mutex> l(g_mu);
  g_totals[static_cast<std::size_t>(c)] += seconds;
}

}  // namespace baton
