#include "engine/spec/draft_length.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/status.h"

namespace baton {
namespace {

// A request's counts at a draft position decay by this per observation there (about its last ten).
constexpr double kRequestDecay = 0.9;
// The engine-wide counts decay slower: they are the prior for requests with little history.
constexpr double kGlobalDecay = 0.99;
// How many observations' worth of the engine-wide rate a request's own counts at a position start from.
constexpr double kPriorObservations = 2.0;
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
  global_.resize(static_cast<std::size_t>(max_k));
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

void DraftLengthController::PositionCounts::add(bool gain, double decay) {
  gained = decay * gained + (gain ? 1.0 : 0.0);
  tried = decay * tried + 1.0;
}

void DraftLengthController::global_rates(std::span<double> out) const {
  // The first position from an even prior (one gain in two tries); each later one from the
  // position before it (one try's worth), so a position no verification has reached yet is
  // assumed to go as the one before it does.
  double prior = 0.5, weight = 2.0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = (global_[i].gained + prior * weight) / (global_[i].tried + weight);
    prior = out[i];
    weight = 1.0;
  }
}

void DraftLengthController::request_rates(RequestKey key, std::span<const double> global, std::span<double> out) const {
  const auto it = requests_.find(key);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (it == requests_.end()) {
      out[i] = global[i];
    } else {
      const PositionCounts& c = it->second.positions[i];
      out[i] = (c.gained + kPriorObservations * global[i]) / (c.tried + kPriorObservations);
    }
  }
}

void DraftLengthController::add_expected_tokens(std::span<const double> rates, std::span<double> out) {
  double tokens = 1.0, reach = 1.0;
  out[0] += tokens;
  for (std::size_t i = 0; i < rates.size(); ++i) {
    reach *= rates[i];
    tokens += reach;
    out[i + 1] += tokens;
  }
}

std::vector<double> DraftLengthController::rates_of(RequestKey key) const {
  std::vector<double> global(static_cast<std::size_t>(max_k_)), rates(static_cast<std::size_t>(max_k_));
  global_rates(global);
  request_rates(key, global, rates);
  return rates;
}

double DraftLengthController::acceptance(RequestKey key, std::int32_t position) const {
  BATON_CHECK(position >= 1 && position <= max_k_, "draft position ", position, " outside [1, ", max_k_, "]");
  return rates_of(key)[static_cast<std::size_t>(position - 1)];
}

double DraftLengthController::expected_tokens(RequestKey key, std::int32_t k) const {
  BATON_CHECK(k >= 0 && k <= max_k_, "draft length ", k, " outside [0, ", max_k_, "]");
  std::vector<double> tokens(static_cast<std::size_t>(max_k_) + 1, 0.0);
  add_expected_tokens(rates_of(key), tokens);
  return tokens[static_cast<std::size_t>(k)];
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
  const auto positions = static_cast<std::size_t>(max_k_);
  global_scratch_.resize(positions);
  rates_scratch_.resize(positions);
  tokens_scratch_.assign(positions + 1, 0.0);
  global_rates(global_scratch_);
  for (const RequestKey key : keys) {
    request_rates(key, global_scratch_, rates_scratch_);
    add_expected_tokens(rates_scratch_, tokens_scratch_);
  }
  goodput_scratch_.assign(positions + 1, 0.0);
  for (std::int32_t k = 0; k <= max_k_; ++k) {
    goodput_scratch_[static_cast<std::size_t>(k)] =
        tokens_scratch_[static_cast<std::size_t>(k)] / std::max(cost(keys.size(), k), 1e-12);
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

DraftLengthController::RequestStats& DraftLengthController::request(RequestKey key) {
  RequestStats& r = requests_[key];
  if (r.positions.empty()) r.positions.resize(static_cast<std::size_t>(max_k_));
  return r;
}

void DraftLengthController::observe(RequestStats& r, std::int32_t index, bool gain) {
  r.positions[static_cast<std::size_t>(index)].add(gain, kRequestDecay);
  global_[static_cast<std::size_t>(index)].add(gain, kGlobalDecay);
}

void DraftLengthController::record_proposal(RequestKey key, std::int32_t asked, std::int32_t drafted) {
  if (asked <= 0) return;
  RequestStats& r = request(key);
  if (drafted <= 0) {
    // Asked for a first draft and got none (no n-gram match): nothing to verify, no token gained.
    observe(r, 0, false);
    r.asked = -1;
  } else {
    r.asked = asked;
  }
}

void DraftLengthController::record_verification(RequestKey key, std::int32_t drafted, std::int32_t accepted) {
  if (drafted <= 0) return;
  RequestStats& r = request(key);
  const std::int32_t asked = std::max(r.asked, drafted);
  r.asked = -1;
  // Positions 1 .. accepted gained a token; the next one, if it was asked for, was tried and gained
  // none (its draft was rejected, or the proposer stopped short of it); later ones were not reached.
  const std::int32_t reached = std::min({asked, accepted + 1, max_k_});
  for (std::int32_t i = 0; i < reached; ++i) observe(r, i, i < accepted);
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
