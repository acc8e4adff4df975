// DraftLengthController: Baton's adaptive draft length (speculative_config "adaptive_draft_length").
//
// Before each proposal it picks one draft length k in [0, num_speculative_tokens] for the requests
// about to be drafted: the k with the most expected tokens per second of decoding, from what it has
// measured so far (the goodput rule of SmartSpec, Liu et al. 2024):
//
//   tokens(k)  = sum over the requests of 1 + c1 + c1 c2 + ... + c1 c2 ... ck
//   seconds(k) = drafting k tokens for the batch + the step that verifies them
//
// per request and draft position i: c_i, the chance that asking for an i-th draft gains a token
// once the drafts before it were accepted (the proposer makes it and the target accepts it; a
// proposer that drafts nothing, or stops short of what was asked, gains nothing there). Position
// by position, because acceptance is not one rate: once an n-gram's first draft is right, its
// continuation usually is too (on the bundled family, n-gram 0.70 at the first position, then
// 0.86-0.90; suffix 0.66, then 0.74-0.83). One rate fitted to what short drafts show would
// undervalue long drafts, and a controller that had moved to short drafts would never see again
// that long ones pay. A position's counts move only when a verification reaches it, so what the
// last long drafts showed stands while shorter ones run; they decay per observation, lean on the
// engine-wide rate at that position while a request has few, and a position that no request has
// reached takes the rate of the position before it.
//
// Per batch size (bucketed) and k: both costs, each the median of its last kWindow measurements
// (a step disturbed by the machine, a first touch of new KV pages or a long catch-up moves a
// median little, and a mean a lot). A cost not measured at a batch size is borrowed from the nearest batch size that measured
// it, scaled by the two sizes' plain steps (k = 0) where both measured one; one measured nowhere is
// assumed to be what the nearest measured smaller k costs (costs only grow with k), so that k is
// tried once wherever it could win. The very first choices try k, then 0, kFirstTries steps each
// (one step's time alone could be a cold cache's, and would stand until a refresh). Another
// length must beat the last one chosen by 5% to replace it (switching has costs no measurement
// sees, and near-ties would flip with the noise). Two kinds of probe keep the figures current,
// each costing a step at a length that does not look best:
//   - when k = 0 has won a number of times in a row, the best k above 0 runs once, so that
//     acceptance keeps being measured after the content changes. The number starts at
//     kProbeAfter and doubles, up to kMaxProbeAfter, while the probes do not make a k above 0 win;
//   - every kRefreshEvery choices at a batch size, the k measured longest ago runs once, so that
//     no cost stays at a value from another time (the context grows; the machine's speed moves).
//
// It changes only how many drafts are asked for, and verification is exact for any number, so the
// output is the same whatever it picks: timing noise costs speed, never tokens. It reads no clock:
// the caller passes durations (tests drive it with made-up costs). Not thread-safe (the engine's
// step thread owns it).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/spec/proposer.h"

namespace baton {

class DraftLengthController {
 public:
  // After this many steps in a row at k = 0, one step drafts (see above), doubling to the max.
  static constexpr int kProbeAfter = 16;
  static constexpr int kMaxProbeAfter = 256;
  // Every this many choices at one batch size, the stalest length runs once.
  static constexpr int kRefreshEvery = 64;
  // Measurements per cost median.
  static constexpr int kWindow = 8;
  // Steps the first lengths (k, then 0) run before costs decide.
  static constexpr int kFirstTries = 3;

  explicit DraftLengthController(std::int32_t max_k);

  std::int32_t max_k() const { return max_k_; }

  // The draft length for a proposal to these requests (its batch size is keys.size()).
  std::int32_t choose(std::span<const RequestKey> keys);

  // What one request got from the proposer: asked for `asked` drafts (after its own caps), got
  // `drafted`. Requests asked for none are not counted.
  void record_proposal(RequestKey key, std::int32_t asked, std::int32_t drafted);
  // One verification: `accepted` of `drafted` (>= 1) drafts, asked for by the request's last
  // record_proposal (without one, `drafted` were asked for).
  void record_verification(RequestKey key, std::int32_t drafted, std::int32_t accepted);
  // Seconds the proposer took to draft k for `batch` requests.
  void record_draft_seconds(std::size_t batch, std::int32_t k, double seconds);
  // Seconds of a step that verified `batch` decoding requests' drafts, asked for with length k.
  void record_verify_seconds(std::size_t batch, std::int32_t k, double seconds);
  void forget(RequestKey key);

  // Introspection for tests and metrics.
  double acceptance(RequestKey key, std::int32_t position) const;  // c_position, position in [1, max_k]
  // seconds(k) at this batch size as choose() sees it, or < 0 when nothing is measured there.
  double cost(std::size_t batch, std::int32_t k) const;
  double expected_tokens(RequestKey key, std::int32_t k) const;

 private:
  // The last kWindow measurements of one cost and their median.
  struct Window {
    std::array<double, kWindow> samples{};
    int count = 0;  // measurements so far (the ring holds the last kWindow)
    double median = 0.0;
    bool measured() const { return count > 0; }
    void add(double x);
  };
  struct Arm {
    Window draft, verify;
    std::uint64_t chosen_at = 0;  // the bucket's choice count when this length was last chosen
  };
  struct Bucket {
    std::vector<Arm> arms;  // by k
    std::uint64_t choices = 0;
  };
  // Decayed counts of one draft position's observations: asked for once the drafts before it were
  // accepted (tried), and a token gained there (gained).
  struct PositionCounts {
    double gained = 0.0, tried = 0.0;
    void add(bool gain, double decay);
  };
  struct RequestStats {
    std::vector<PositionCounts> positions;  // by draft position - 1; max_k of them
    std::int32_t asked = -1;                // the last proposal's, until its verification; < 0: none
  };

  static int bucket_of(std::size_t batch);
  Bucket& bucket(std::size_t batch);
  const Bucket* find_bucket(std::size_t batch) const;
  // One part of a cost (Arm::draft or Arm::verify) at bucket b and length k, as the header says;
  // < 0 when nothing gives an estimate.
  double estimate(int b, std::int32_t k, Window Arm::*part) const;
  // The most measurements of this part at length k that one batch size holds.
  int measurements(std::int32_t k, Window Arm::*part) const;
  RequestStats& request(RequestKey key);
  // One observation of draft position `index` + 1 for request r, and engine-wide.
  void observe(RequestStats& r, std::int32_t index, bool gain);
  // c_1 .. c_max_k engine-wide, then for one request (given the engine-wide ones), into out.
  void global_rates(std::span<double> out) const;
  void request_rates(RequestKey key, std::span<const double> global, std::span<double> out) const;
  // The same for the introspection calls (allocates; choose() uses its scratch instead).
  std::vector<double> rates_of(RequestKey key) const;
  // out[k] += that request's tokens(k) for k in [0, max_k], from its rates.
  static void add_expected_tokens(std::span<const double> rates, std::span<double> out);

  std::int32_t max_k_;
  std::map<int, Bucket> buckets_;  // by batch size, bucketed
  std::unordered_map<RequestKey, RequestStats> requests_;
  std::vector<PositionCounts> global_;  // engine-wide, by draft position - 1
  int zero_streak_ = 0;
  int probe_after_ = kProbeAfter;
  std::int32_t last_ = -1;  // the last length chosen on merit (not a probe or a first try)
  std::vector<double> goodput_scratch_, tokens_scratch_, global_scratch_, rates_scratch_;
};

}  // namespace baton
