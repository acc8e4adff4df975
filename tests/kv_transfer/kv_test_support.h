// Helpers for the KV transport tests: pool memory of their own (mmap'd, so each test's regions are
// separate), random sources, patterned destinations, copy plans that mix small row slices with
// large runs, the check that a destination holds exactly the copied bytes, and a waiter for a
// transfer's done callback with a deadline.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kv_transfer/done_waiter.h"
#include "kv_transfer/transport.h"

namespace baton::kv::testing {

// One pool's memory, page-aligned and private to the test.
class TestPool {
 public:
  TestPool(std::string name, std::size_t bytes) : name_(std::move(name)), bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<std::uint8_t*>(p);
  }
  ~TestPool() { munmap(base_, bytes_); }
  TestPool(const TestPool&) = delete;
  TestPool& operator=(const TestPool&) = delete;

  MemoryRegion region() const { return MemoryRegion{name_, base_, bytes_}; }
  std::uint8_t* data() const { return base_; }
  std::size_t size() const { return bytes_; }

  void fill_random(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i + 8 <= bytes_; i += 8) {
      std::uint64_t v = rng();
      std::memcpy(base_ + i, &v, 8);
    }
  }
  // A pattern that differs from any plausible copied byte run.
  static std::uint8_t pattern(std::size_t i) { return static_cast<std::uint8_t>((i * 131 + 7) ^ 0x5a); }
  void fill_pattern() {
    for (std::size_t i = 0; i < bytes_; ++i) base_[i] = pattern(i);
  }

 private:
  std::string name_;
  std::size_t bytes_;
  std::uint8_t* base_;
};

inline std::vector<MemoryRegion> regions(const std::vector<std::unique_ptr<TestPool>>& pools) {
  std::vector<MemoryRegion> out;
  for (const auto& p : pools) out.push_back(p->region());
  return out;
}

inline std::vector<std::unique_ptr<TestPool>> make_pools(std::size_t target_bytes, std::size_t draft_bytes) {
  std::vector<std::unique_ptr<TestPool>> out;
  out.push_back(std::make_unique<TestPool>("target", target_bytes));
  out.push_back(std::make_unique<TestPool>("draft", draft_bytes));
  return out;
}

// Non-overlapping destinations: `num_large` runs of `large_bytes` at the front of the pool, then
// `num_small` slices of `small_bytes` at distinct random slots behind them. Sources are random
// (unaligned) offsets in a source pool of `src_bytes`.
inline std::vector<Copy> plan_copies(std::uint64_t seed, std::size_t src_bytes, std::size_t dst_bytes,
                                     int num_large, std::size_t large_bytes, int num_small, std::size_t small_bytes) {
  std::mt19937_64 rng(seed);
  std::vector<Copy> out;
  std::uint64_t dst = 0;
  for (int i = 0; i < num_large; ++i) {
    out.push_back(Copy{rng() % (src_bytes - large_bytes + 1), dst, large_bytes});
    dst += large_bytes + 4096;
  }
  const std::size_t slots = (dst_bytes - dst) / small_bytes;
  std::vector<std::size_t> slot_ids(slots);
  for (std::size_t i = 0; i < slots; ++i) slot_ids[i] = i;
  std::shuffle(slot_ids.begin(), slot_ids.end(), rng);
  for (int i = 0; i < num_small && static_cast<std::size_t>(i) < slots; ++i) {
    out.push_back(Copy{rng() % (src_bytes - small_bytes + 1), dst + slot_ids[i] * small_bytes, small_bytes});
  }
  return out;
}

// The destination equals the pattern except where `copies` put source bytes.
inline ::testing::AssertionResult holds_exactly(const TestPool& src, const TestPool& dst, const std::vector<Copy>& copies) {
  std::vector<std::uint8_t> expected(dst.size());
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = TestPool::pattern(i);
  for (const Copy& c : copies) std::memcpy(expected.data() + c.dst_offset, src.data() + c.src_offset, c.bytes);
  if (std::memcmp(expected.data(), dst.data(), dst.size()) == 0) return ::testing::AssertionSuccess();
  std::size_t first = 0;
  while (expected[first] == dst.data()[first]) ++first;
  return ::testing::AssertionFailure() << "destination differs first at byte " << first << ": expected "
                                       << int(expected[first]) << ", got " << int(dst.data()[first]);
}

using DoneWaiter = baton::kv::DoneWaiter;  // kv_transfer/done_waiter.h

// The status message contains `text` (absl::Status::message() is Debian's absl::string_view).
inline ::testing::AssertionResult mentions(const absl::Status& status, std::string_view text) {
  if (std::string(status.message()).find(text) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status << " does not mention \"" << text << "\"";
}

inline Deadline in(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

// Runs finish() and waits for its report by `deadline` + slack; fails the test on no report.
inline absl::Status finish_and_wait(KvTransfer& transfer, std::chrono::milliseconds deadline) {
  DoneWaiter waiter;
  transfer.finish(in(deadline), waiter.callback());
  auto status = waiter.wait_until(in(deadline + std::chrono::seconds(2)));
  if (!status) {
    ADD_FAILURE() << "finish() did not report within its deadline";
    return absl::DeadlineExceededError("no report");
  }
  return *status;
}

}  // namespace baton::kv::testing
