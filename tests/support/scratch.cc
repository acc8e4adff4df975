#include "tests/support/scratch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <vector>

namespace baton::testing {
namespace {

// Removes the registered paths when the whole program passed (and BATON_KEEP_LOGS is unset);
// gtest owns (and deletes) it.
class ScratchCleanup : public ::testing::EmptyTestEventListener {
 public:
  void add(std::filesystem::path p) {
    const std::lock_guard<std::mutex> lock(mu_);
    paths_.push_back(std::move(p));
  }

  void OnTestProgramEnd(const ::testing::UnitTest& unit_test) override {
    const std::lock_guard<std::mutex> lock(mu_);
    for (const auto& p : paths_) {
      std::error_code ec;
      if (!std::filesystem::exists(p, ec)) continue;
      if (unit_test.Passed() && std::getenv("BATON_KEEP_LOGS") == nullptr) {
        std::filesystem::remove_all(p, ec);
      } else {
        std::fprintf(stderr, "kept: %s\n", p.c_str());
      }
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::filesystem::path> paths_;
};

ScratchCleanup& cleanup() {
  static ScratchCleanup* const listener = [] {
    auto* l = new ScratchCleanup;
    ::testing::UnitTest::GetInstance()->listeners().Append(l);
    return l;
  }();
  return *listener;
}

}  // namespace

std::filesystem::path scratch_path(const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  cleanup().add(p);
  return p;
}

}  // namespace baton::testing
