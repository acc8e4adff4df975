// The router's dashboard history on its own: RecentRequests (TTFT/TPOT percentiles and rates per
// time bucket, bounded memory) and SpecHistory (speculative counters sampled at each Info poll,
// differenced over a sliding window and per bucket, restarts included). Expected figures are
// worked out by hand from the inputs.
#include <cmath>

#include "gtest/gtest.h"
#include "router/recent_requests.h"
#include "router/spec_history.h"

namespace baton::router {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

WallClock::time_point at_s(double s) {
  return WallClock::time_point(std::chrono::duration_cast<WallClock::duration>(std::chrono::duration<double>(s)));
}

FinishedRequest finished(double ended_s, double ttft_s, double e2e_s, std::int64_t tokens) {
  FinishedRequest r;
  r.ended = at_s(ended_s);
  r.got_first_token = tokens > 0;
  r.ttft_s = ttft_s;
  r.e2e_s = e2e_s;
  r.output_tokens = tokens;
  return r;
}

TEST(Quantile, NearestRank) {
  std::vector<double> v;
  EXPECT_FALSE(quantile(v, 0.5).has_value());
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(*quantile(v, 0.5), 50);
  EXPECT_EQ(*quantile(v, 0.99), 99);
  EXPECT_EQ(*quantile(v, 1.0), 100);
  EXPECT_EQ(*quantile(v, 0.0), 1);
  std::vector<double> one = {7};
  EXPECT_EQ(*quantile(one, 0.99), 7);
}

TEST(FinishedRequest, TpotNeedsTwoTokens) {
  EXPECT_FALSE(finished(0, 0.1, 0.1, 1).tpot_s().has_value());
  EXPECT_FALSE(finished(0, 0, 0.5, 0).tpot_s().has_value());
  EXPECT_DOUBLE_EQ(*finished(0, 0.1, 1.1, 11).tpot_s(), 0.1);
}

TEST(RecentRequests, BucketsCountRatesAndPercentiles) {
  RecentRequests recent({seconds(5), 4, 1024});
  // Bucket [100, 105): 10 requests, TTFT 0.01..0.10 s, 5 tokens each over 0.4 s after the first.
  for (int i = 1; i <= 10; ++i) recent.record(finished(100 + 0.1 * i, 0.01 * i, 0.01 * i + 0.4, 5));
  // Bucket [110, 115): one request without tokens (counted, no percentiles).
  recent.record(finished(111, 0, 0.2, 0));
  const auto b = recent.buckets(at_s(122.5));  // now in [120, 125): buckets 105, 110, 115, 120
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].start, at_s(105));
  EXPECT_EQ(b[3].start, at_s(120));
  EXPECT_EQ(b[0].requests, 0);
  EXPECT_EQ(b[1].requests, 1);
  EXPECT_EQ(b[1].output_tokens, 0);
  EXPECT_DOUBLE_EQ(b[1].requests_per_s, 0.2);
  EXPECT_FALSE(b[1].ttft_p50_s.has_value());
  EXPECT_FALSE(b[1].tpot_p99_s.has_value());
  EXPECT_EQ(b[2].requests, 0);
  // Bucket 100 has left the 4-bucket window; look from inside it.
  const auto inside = recent.buckets(at_s(102.5));
  const RequestBucket& first = inside.back();
  EXPECT_EQ(first.start, at_s(100));
  EXPECT_EQ(first.requests, 10);
  EXPECT_EQ(first.output_tokens, 50);
  EXPECT_DOUBLE_EQ(first.output_tokens_per_s, 50 / 2.5);  // the current bucket: over the 2.5 s passed
  EXPECT_NEAR(*first.ttft_p50_s, 0.05, 1e-12);
  EXPECT_NEAR(*first.ttft_p99_s, 0.10, 1e-12);
  EXPECT_NEAR(*first.tpot_p50_s, 0.1, 1e-12);
  EXPECT_NEAR(*first.tpot_p99_s, 0.1, 1e-12);
}

TEST(RecentRequests, SlotReuseForgetsTheOldBucketAndIgnoresLateOnes) {
  RecentRequests recent({seconds(5), 2, 1024});
  recent.record(finished(1, 0.1, 0.2, 2));
  recent.record(finished(11, 0.1, 0.2, 2));  // same slot (2 buckets), 10 s later
  recent.record(finished(2, 0.1, 0.2, 2));   // older than what the slot holds now: dropped
  const auto b = recent.buckets(at_s(12));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].requests, 0);  // bucket [5, 10)
  EXPECT_EQ(b[1].requests, 1);  // bucket [10, 15)
}

TEST(RecentRequests, ReservoirBoundsSamplesButCountsAll) {
  RecentRequests recent({seconds(5), 1, 64});
  for (int i = 0; i < 10000; ++i) recent.record(finished(1, 1.0, 2.0, 3));
  for (int i = 0; i < 100; ++i) recent.record(finished(1, 100.0, 200.0, 3));  // 1 % outliers
  const auto b = recent.buckets(at_s(5 - 1e-3));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].requests, 10100);
  EXPECT_EQ(b[0].output_tokens, 30300);
  EXPECT_EQ(*b[0].ttft_p50_s, 1.0);
}

baton::node::v1::NodeInfo spec_info(std::uint64_t instance, std::int64_t drafts, std::int64_t draft_tokens,
                                    std::int64_t accepted, std::vector<std::int64_t> per_position,
                                    const std::string& method = "eagle3") {
  baton::node::v1::NodeInfo info;
  info.set_speculative_method(method);
  info.set_num_speculative_tokens(static_cast<int>(per_position.size()));
  info.set_instance_id(instance);
  auto* spec = info.mutable_load()->mutable_counters()->mutable_spec();
  spec->set_num_drafts(drafts);
  spec->set_num_draft_tokens(draft_tokens);
  spec->set_num_accepted_tokens(accepted);
  for (std::int64_t p : per_position) spec->add_accepted_per_position(p);
  return info;
}

TEST(SpecCounts, Rates) {
  SpecCounts c;
  EXPECT_FALSE(c.acceptance_rate().has_value());
  EXPECT_FALSE(c.mean_acceptance_length().has_value());
  EXPECT_TRUE(c.per_position_rates().empty());
  c.num_drafts = 10;
  c.num_draft_tokens = 40;
  c.num_accepted_tokens = 15;
  c.accepted_per_position = {8, 5, 2, 0};
  EXPECT_DOUBLE_EQ(*c.acceptance_rate(), 15.0 / 40);
  EXPECT_DOUBLE_EQ(*c.mean_acceptance_length(), 2.5);
  EXPECT_EQ(c.per_position_rates(), (std::vector<double>{0.8, 0.5, 0.2, 0.0}));
}

TEST(SpecHistory, WindowIsTheDifferenceOverTheSpanOnly) {
  SpecHistory h;
  h.record("d1", spec_info(1, 100, 400, 200, {90, 60, 40, 10}), at_s(0));   // before the window
  h.record("d1", spec_info(1, 110, 440, 230, {100, 70, 45, 15}), at_s(30));  // before the window
  h.record("d1", spec_info(1, 120, 480, 250, {108, 76, 50, 16}), at_s(95));
  h.record("d1", spec_info(1, 130, 520, 260, {114, 79, 51, 16}), at_s(100));
  baton::node::v1::NodeInfo plain;  // no speculation: not recorded
  h.record("d2", plain, at_s(100));
  const auto nodes = h.nodes(at_s(100), seconds(60));
  ASSERT_EQ(nodes.size(), 1u);
  const SpecCounts& w = nodes[0].window;  // samples at 95 and 100 minus the one at 30
  EXPECT_EQ(w.num_drafts, 20);
  EXPECT_EQ(w.num_draft_tokens, 80);
  EXPECT_EQ(w.num_accepted_tokens, 30);
  EXPECT_EQ(w.accepted_per_position, (std::vector<std::int64_t>{14, 9, 6, 1}));
  EXPECT_DOUBLE_EQ(*w.acceptance_rate(), 30.0 / 80);
  EXPECT_DOUBLE_EQ(*w.mean_acceptance_length(), 2.5);
  EXPECT_EQ(nodes[0].since_start.num_drafts, 130);
  EXPECT_EQ(nodes[0].method, "eagle3");
  EXPECT_EQ(nodes[0].num_speculative_tokens, 4);
}

TEST(SpecHistory, RestartCountsTheNewCountersNotANegativeDifference) {
  SpecHistory h;
  h.record("d1", spec_info(1, 100, 400, 200, {90, 60, 40, 10}), at_s(10));
  h.record("d1", spec_info(2, 5, 20, 12, {5, 4, 2, 1}), at_s(11));  // another instance
  h.record("d1", spec_info(2, 6, 24, 12, {5, 4, 2, 1}), at_s(12));
  const auto nodes = h.nodes(at_s(12), seconds(60));
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].window.num_drafts, 6);
  EXPECT_EQ(nodes[0].window.num_accepted_tokens, 12);
  // The same instance with counters that went down (a reset we cannot see otherwise).
  SpecHistory g;
  g.record("d1", spec_info(1, 100, 400, 200, {90, 60, 40, 10}), at_s(10));
  g.record("d1", spec_info(1, 3, 12, 2, {2, 0, 0, 0}), at_s(11));
  EXPECT_EQ(g.nodes(at_s(12), seconds(60))[0].window.num_draft_tokens, 12);
}

TEST(SpecHistory, ByMethodSumsNodesPerBucket) {
  SpecHistory h;
  h.record("d1", spec_info(1, 0, 0, 0, {0, 0}, "ngram"), at_s(100));
  h.record("d2", spec_info(7, 0, 0, 0, {0, 0}, "ngram"), at_s(100));
  h.record("d1", spec_info(1, 10, 20, 10, {6, 4}, "ngram"), at_s(104));   // bucket [100, 105)
  h.record("d2", spec_info(7, 10, 20, 2, {2, 0}, "ngram"), at_s(106));    // bucket [105, 110)
  h.record("d3", spec_info(3, 0, 0, 0, {0, 0, 0}, "suffix"), at_s(101));
  h.record("d3", spec_info(3, 4, 12, 12, {4, 4, 4}, "suffix"), at_s(108));
  const auto series = h.by_method(at_s(109), seconds(60), seconds(5), 3);
  ASSERT_EQ(series.starts.size(), 3u);
  EXPECT_EQ(series.starts.front(), at_s(95));
  EXPECT_EQ(series.starts.back(), at_s(105));
  ASSERT_EQ(series.methods.size(), 2u);
  const auto& ngram = series.methods[0];
  EXPECT_EQ(ngram.method, "ngram");
  EXPECT_EQ(ngram.num_speculative_tokens, 2);
  EXPECT_FALSE(ngram.buckets[0].acceptance_rate().has_value());
  EXPECT_DOUBLE_EQ(*ngram.buckets[1].acceptance_rate(), 0.5);
  EXPECT_DOUBLE_EQ(*ngram.buckets[2].acceptance_rate(), 0.1);
  EXPECT_DOUBLE_EQ(*ngram.window.acceptance_rate(), 12.0 / 40);
  EXPECT_EQ(ngram.window.per_position_rates(), (std::vector<double>{0.4, 0.2}));
  const auto& suffix = series.methods[1];
  EXPECT_EQ(suffix.method, "suffix");
  EXPECT_DOUBLE_EQ(*suffix.buckets[2].acceptance_rate(), 1.0);
  EXPECT_DOUBLE_EQ(*suffix.window.mean_acceptance_length(), 4.0);
}

TEST(SpecHistory, KeepsAtMostTheConfiguredSamples) {
  SpecHistory h({3});
  for (int i = 0; i <= 10; ++i) h.record("d1", spec_info(1, i, 2 * i, i, {i, 0}), at_s(i));
  // Only the last 3 samples remain: two steps of one draft each.
  EXPECT_EQ(h.nodes(at_s(10), seconds(600))[0].window.num_drafts, 2);
}

}  // namespace
}  // namespace baton::router
