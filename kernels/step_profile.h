// StepProfile: an opt-in, compiled-in timer that splits an engine step's wall time into classes
// (GEMM, attention, norm/rope/activation, sampling/verification, proposer; the rest is overhead).
//
// Off by default; when off a ProfileScope costs one relaxed atomic load and a branch. When on,
// the outermost scope on the calling thread owns the time: a backend op called from inside a
// proposer scope counts as proposer time, so the classes never overlap and sum to at most the
// step. Meant for benchmarks (bench/decode_bench.cc); it must not be used to make decisions.
// Scopes must be opened on the thread that drives the engine (the backend's worker threads
// never open one); totals are process-wide.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace baton {

enum class ProfileClass : int { kGemm, kAttention, kNormRopeAct, kSampling, kProposer, kCount };

std::string_view profile_class_name(ProfileClass c);

class StepProfile {
 public:
  static void enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  static bool enabled() { return enabled_.load(std::memory_order_relaxed); }
  // Seconds per class since the last reset().
  static std::array<double, static_cast<int>(ProfileClass::kCount)> totals();
  static void reset();

 private:
  friend class ProfileScope;
  static std::atomic<bool> enabled_;
};

class ProfileScope {
 public:
  explicit ProfileScope(ProfileClass c) {
    if (!StepProfile::enabled()) return;
    counted_ = true;
    if (depth_++ == 0) {
      active_ = true;
      cls_ = c;
      start_ = std::chrono::steady_clock::now();
    }
  }
  ~ProfileScope() {
    if (!counted_) return;
    --depth_;
    if (active_) add(cls_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  static void add(ProfileClass c, double seconds);

  bool counted_ = false;  // this scope raised depth_
  bool active_ = false;   // the outermost: it owns the time
  ProfileClass cls_ = ProfileClass::kGemm;
  std::chrono::steady_clock::time_point start_;
  static thread_local int depth_;
};

}  // namespace baton
