// Tests parameterized by (fixture, device): every fixture architecture on every backend this build
// has — the CPU, and CUDA where its backend is built (those instances skip on a machine without a
// GPU, and the GPU check runs them by their `_cuda` suffix).
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/engine/fixtures.h"

namespace baton::testing {

class FixtureOnDevice : public ::testing::TestWithParam<std::tuple<std::string, Device>> {
 protected:
  void SetUp() override {
    if (device().type == DeviceType::kCuda && available_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  }
  const std::string& name() const { return std::get<0>(GetParam()); }
  Device device() const { return std::get<1>(GetParam()); }
};

inline std::vector<Device> fixture_devices() {
  std::vector<Device> d = {Device{DeviceType::kCpu, 0}};
  if (cuda_backend_built()) d.push_back(Device{DeviceType::kCuda, 0});
  return d;
}

// Every fixture on every device, named "<fixture>" on the CPU and "<fixture>_cuda" on CUDA.
inline auto every_fixture_on_every_device() {
  return ::testing::Combine(::testing::ValuesIn(fixture_names()), ::testing::ValuesIn(fixture_devices()));
}
inline std::string fixture_on_device_name(const ::testing::TestParamInfo<std::tuple<std::string, Device>>& p) {
  return test_name_for(std::get<0>(p.param)) + (std::get<1>(p.param).type == DeviceType::kCuda ? "_cuda" : "");
}

}  // namespace baton::testing
