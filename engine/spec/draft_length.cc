#include "engine/spec/draft_length.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/status.h"

namespace baton {
namespace {

// Per verification, a request's acceptance counts decay by this (about its last ten steps).
constexpr double kRequestDecay = 0.9;
// The engine-wide counts decay slower: they are the prior for requests with little history.
constexpr double kGlobalDecay = 0.99;
// How many draft positions' worth of the engine-wide rate a request's own counts start from.
constexpr double kPriorPositions = 2.0;
constexpr double kRequestYieldWeight = 0.2;
constexpr double kGlobalYieldWeight = 0.05;
// A goodput must beat a smaller k's by this factor to win (ties go to fewer drafts).
constexpr double kTieMargin = 1e-9;
// And another length must beat the last one chosen by this factor: switching has costs no arm
// sees (a head catching up after a pause), and near-ties would flip with the noise.
constexpr double kSwitchMargin = 0.05;

}  // namespace

void DraftLengthController::Window::add(double x) {
  samples[static_cast<std::size_t>(count % kWindow)] = x;
  ++count;
  const int n = std::min(count, kWindow);
  // Insertion sort of at most kWindow values (std::sort of a short std::array trips GCC 12's
  // -Warray-bounds on its unrolled insertion step).
  std::array<double, kWindow> sorted{};
  for (int i = 0; i < n; ++i) {
    int j = i;
    for (; j > 0 && sorted[static_cast<std::size_t>(j - 1)] > samples[static_cast<std::size_t>(i)]; --j) {
      sorted[static_cast<std::size_t>(j)] = sorted[static_cast<std::size_t>(j - 1)];
    }
    sorted[static_cast<std::size_t>(j)] = samples[static_cast<std::size_t>(i)];
  }
  // The lower middle of an even count: a cost is rarely below what the step really needs.
  median = sorted[static_cast<std::size_t>((n - 1) / 2)];
}

DraftLengthController::DraftLengthController(std::int32_t max_k) : max_k_(max_k) {
  BATON_CHECK(max_k >= 1, "adaptive draft length needs num_speculative_tokens >= 1, got ", max_k);
}

int DraftLengthController::bucket_of(std::size_t batch) {
  if (batch <= 4) return static_cast<int>(batch);
  return static_cast<int>(std::bit_ceil(std::min<std::size_t>(batch, 4096)));
}

DraftLengthController::Bucket& DraftLengthController::bucket(std::size_t batch) {
  Bucket& b = buckets_[bucket_of(batch)];
  if (b.arms.empty()) b.arms.resize(static_cast<std::size_t>(max_k_) + 1);
  return b;
}

const DraftLengthController::Bucket* DraftLengthController::find_bucket(std::size_t batch) const {
  const auto it = buckets_.find(bucket_of(batch));
  return it == buckets_.end() ? nullptr : &it->second;
}

double DraftLengthController::global_acceptance() const { return (accepted_ + 1.0) / (accepted_ + rejected_ + 2.0); }

double DraftLengthController::global_yield() const { return yield_ >= 0.0 ? yield_ : 1.0; }

double DraftLengthController::acceptance(RequestKey key) const {
  const double prior = global_acceptance();
  const auto it = requests_.find(key);
  if (it == requests_.end()) return prior;
  const RequestStats& r = it->second;
  return (r.accepted + kPriorPositions * prior) / (r.accepted + r.rejected + kPriorPositions);
}

double DraftLengthController::draft_yield(RequestKey key) const {
  const auto it = requests_.find(key);
  if (it == requests_.end() || it->second.yield < 0.0) return global_yield();
  return it->second.yield;
}

double DraftLengthController::expected_tokens(RequestKey key, std::int32_t k) const {
  const double a = acceptance(key);
  double sum = 0.0, p = 1.0;
  for (std::int32_t i = 1; i <= k; ++i) {
    p *= a;
    sum += p;
  }
  return 1.0 + draft_yield(key) * sum;
}

int DraftLengthController::measurements(std::int32_t k, Window Arm::*part) const {
  int most = 0;
  for (const auto& [key, b] : buckets_) most = std::max(most, (b.arms[static_cast<std::size_t>(k)].*part).count);
  return most;
}

double DraftLengthController::estimate(int b, std::int32_t k, Window Arm::*part) const {
  const auto at = [&](const Bucket& bucket, std::int32_t j) -> const Window& {
    return bucket.arms[static_cast<std::size_t>(j)].*part;
  };
  const auto here = buckets_.find(b);
  if (here != buckets_.end() && at(here->second, k).measured()) return at(here->second, k).median;
  // The nearest batch size that measured it (ties: the smaller).
  const Bucket* from = nullptr;
  int from_key = 0;
  for (const auto& [key, bucket] : buckets_) {
    if (!at(bucket, k).measured()) continue;
    if (from == nullptr || std::abs(key - b) < std::abs(from_key - b)) {
      from = &bucket;
      from_key = key;
    }
  }
  if (from != nullptr) {
    double scale = 1.0;
    if (here != buckets_.end() && here->second.arms[0].verify.measured() && from->arms[0].verify.measured() &&
        from->arms[0].verify.median > 0.0) {
      scale = here->second.arms[0].verify.median / from->arms[0].verify.median;
    }
    return at(*from, k).median * scale;
  }
  // Measured nowhere: the nearest smaller length's estimate (costs only grow with k).
  return k == 0 ? -1.0 : estimate(b, k - 1, part);
}

double DraftLengthController::cost(std::size_t batch, std::int32_t k) const {
  if (k < 0 || k > max_k_) return -1.0;
  const int b = bucket_of(batch);
  const double verify = estimate(b, k, &Arm::verify);
  if (verify < 0.0) return -1.0;
  return verify + std::max(0.0, estimate(b, k, &Arm::draft));
}

std::int32_t DraftLengthController::choose(std::span<const RequestKey> keys) {
  if (keys.empty()) return max_k_;
  Bucket& b = bucket(keys.size());
  const std::uint64_t now = ++b.choices;
  auto pick = [&](std::int32_t k) {
    b.arms[static_cast<std::size_t>(k)].chosen_at = now;
    return k;
  };
  // First the configured length (its acceptance is what everything else is judged by), then none.
  if (measurements(max_k_, &Arm::verify) < kFirstTries) return pick(max_k_);
  if (measurements(0, &Arm::verify) < kFirstTries) return pick(0);
  if (now % kRefreshEvery == 0) {
    std::int32_t stalest = 0;
    for (std::int32_t k = 1; k <= max_k_; ++k) {
      if (b.arms[static_cast<std::size_t>(k)].chosen_at < b.arms[static_cast<std::size_t>(stalest)].chosen_at) stalest = k;
    }
    return pick(stalest);
  }
  goodput_scratch_.assign(static_cast<std::size_t>(max_k_) + 1, 0.0);
  for (std::int32_t k = 0; k <= max_k_; ++k) {
    double tokens = 0.0;
    for (const RequestKey key : keys) tokens += expected_tokens(key, k);
    goodput_scratch_[static_cast<std::size_t>(k)] = tokens / std::max(cost(keys.size(), k), 1e-12);
  }
  auto best_from = [&](std::int32_t lo) {
    std::int32_t best = lo;
    for (std::int32_t k = lo + 1; k <= max_k_; ++k) {
      if (goodput_scratch_[static_cast<std::size_t>(k)] > goodput_scratch_[static_cast<std::size_t>(best)] * (1.0 + kTieMargin)) {
        best = k;
      }
    }
    return best;
  };
  std::int32_t best = best_from(0);
  if (last_ >= 0 && best != last_ &&
      goodput_scratch_[static_cast<std::size_t>(best)] <
          goodput_scratch_[static_cast<std::size_t>(last_)] * (1.0 + kSwitchMargin)) {
    best = last_;
  }
  if (best != 0) {
    zero_streak_ = 0;
    probe_after_ = kProbeAfter;
  } else if (++zero_streak_ >= probe_after_) {
    zero_streak_ = 0;
    probe_after_ = std::min(2 * probe_after_, kMaxProbeAfter);
    best = best_from(1);
    return pick(best);  // a probe: the next choice compares against the length before it
  }
  last_ = best;
  return pick(best);
}

void DraftLengthController::record_proposal(RequestKey key, std::int32_t asked, std::int32_t drafted) {
  if (asked <= 0) return;
  const double got = drafted > 0 ? 1.0 : 0.0;
  RequestStats& r = requests_[key];
  r.yield = r.yield < 0.0 ? got : r.yield + kRequestYieldWeight * (got - r.yield);
  yield_ = yield_ < 0.0 ? got : yield_ + kGlobalYieldWeight * (got - yield_);
}

void DraftLengthController::record_verification(RequestKey key, std::int32_t drafted, std::int32_t accepted) {
  if (drafted <= 0) return;
  const double rejected = accepted < drafted ? 1.0 : 0.0;
  RequestStats& r = requests_[key];
  r.accepted = kRequestDecay * r.accepted + accepted;
  r.rejected = kRequestDecay * r.rejected + rejected;
  accepted_ = kGlobalDecay * accepted_ + accepted;
  rejected_ = kGlobalDecay * rejected_ + rejected;
}

void DraftLengthController::record_draft_seconds(std::size_t batch, std::int32_t k, double seconds) {
  if (batch == 0 || k < 0 || k > max_k_ || !(seconds >= 0.0)) return;
  bucket(batch).arms[static_cast<std::size_t>(k)].draft.add(seconds);
}

void DraftLengthController::record_verify_seconds(std::size_t batch, std::int32_t k, double seconds) {
  if (batch == 0 || k < 0 || k > max_k_ || !(seconds >= 0.0)) return;
  bucket(batch).arms[static_cast<std::size_t>(k)].verify.add(seconds);
}

void DraftLengthController::forget(RequestKey key) { requests_.erase(key); }

}  // namespace baton
