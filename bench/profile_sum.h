// ProfileSum: sums kernels/step_profile.h's per-class times over the engine steps a benchmark
// times, and writes them as JSON (seconds per step or per unit of work, and shares of the wall
// time). Benchmarks only; it reads the profile, it never turns it on or off.
#pragma once

#include <array>
#include <string>

#include "kernels/step_profile.h"
#include "nlohmann/json.hpp"

namespace baton::bench {

struct ProfileSum {
  std::array<double, static_cast<int>(ProfileClass::kCount)> seconds{};
  double step_seconds = 0;  // wall time of the summed steps
  int steps = 0;
  double units = 0;         // what per-unit figures divide by (tokens, for example); 0: steps

  void add(const std::array<double, static_cast<int>(ProfileClass::kCount)>& t, double step_s, double unit_count = 0) {
    for (std::size_t i = 0; i < seconds.size(); ++i) seconds[i] += t[i];
    step_seconds += step_s;
    units += unit_count;
    ++steps;
  }

  // "<class>_s" per step (or per unit when units were added), "<class>_share" of the wall time,
  // the rest as "overhead", and "step_s_mean" (or "unit_s_mean").
  nlohmann::json to_json() const {
    nlohmann::json j;
    if (steps == 0 || step_seconds <= 0) return j;
    const double per = units > 0 ? units : steps;
    double accounted = 0;
    for (int i = 0; i < static_cast<int>(ProfileClass::kCount); ++i) {
      const std::string name(profile_class_name(static_cast<ProfileClass>(i)));
      j[name + "_s"] = seconds[static_cast<std::size_t>(i)] / per;
      j[name + "_share"] = seconds[static_cast<std::size_t>(i)] / step_seconds;
      accounted += seconds[static_cast<std::size_t>(i)];
    }
    j["overhead_s"] = (step_seconds - accounted) / per;
    j["overhead_share"] = (step_seconds - accounted) / step_seconds;
    j[units > 0 ? "unit_s_mean" : "step_s_mean"] = step_seconds / per;
    return j;
  }
};

}  // namespace baton::bench
