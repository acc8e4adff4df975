// The headers nearly every test translation unit includes, precompiled once (GCC builds,
// tests/CMakeLists.txt) and reused by every test target: parsing gtest, gmock, nlohmann/json and
// the standard library again in each of ~140 test files was over 40 % of a build's CPU time.
// Only well-kept third-party and standard headers belong here: a Baton header would make every
// test rebuild when it changes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
