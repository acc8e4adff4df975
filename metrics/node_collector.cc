#include "metrics/node_collector.h"

#include <string>

#include "metrics/names.h"

namespace baton::metrics {

using prometheus::MetricType;

LabelPairs node_labels(const node::v1::NodeInfo& info) {
  return {{"method", info.speculative_method().empty() ? "none" : info.speculative_method()},
          {"role", info.role()},
          {"node", info.address()}};
}

std::vector<prometheus::MetricFamily> node_families(const node::v1::NodeInfo& info) {
  const LabelPairs base = node_labels(info);
  const node::v1::NodeLoad& load = info.load();
  const node::v1::NodeCounters& c = load.counters();
  std::vector<prometheus::MetricFamily> out;
  auto gauge = [&](const char* name, const char* help, double v) {
    out.push_back(FamilyBuilder(name, help, MetricType::Gauge).add(base, v).build());
  };
  auto counter = [&](const char* name, const char* help, double v) {
    out.push_back(FamilyBuilder(name, help, MetricType::Counter).add(base, v).build());
  };
  gauge(kRequestsRunning, "Requests in the engine's running batch.", load.num_running());
  gauge(kRequestsWaiting, "Requests waiting to be scheduled (the queue depth).", load.num_waiting());
  gauge(kQueuedPrefillTokens, "Prompt tokens accepted and not yet prefilled.", static_cast<double>(load.queued_prefill_tokens()));

  FamilyBuilder blocks(kKvBlocks,
                       "KV cache blocks by pool and state (used includes reserved and quarantined; free includes cached).",
                       MetricType::Gauge);
  FamilyBuilder usage(kKvUsage, "Fraction of a KV pool's blocks in use (0-1).", MetricType::Gauge);
  for (const node::v1::KvPoolUsage& p : load.pools()) {
    blocks.add(base, p.num_blocks(), {{"pool", p.name()}, {"state", "total"}})
        .add(base, p.used(), {{"pool", p.name()}, {"state", "used"}})
        .add(base, p.free(), {{"pool", p.name()}, {"state", "free"}})
        .add(base, p.reserved(), {{"pool", p.name()}, {"state", "reserved"}});
    if (info.role() != "prefill") blocks.add(base, p.quarantined(), {{"pool", p.name()}, {"state", "quarantined"}});
    usage.add(base, p.num_blocks() > 0 ? static_cast<double>(p.used()) / p.num_blocks() : 0.0, {{"pool", p.name()}});
  }
  out.push_back(blocks.build());
  out.push_back(usage.build());

  counter(kPromptTokens, "Prompt tokens computed (prefix-cache hits excluded).", static_cast<double>(c.prompt_tokens()));
  counter(kGenerationTokens, "Tokens generated.", static_cast<double>(c.generation_tokens()));
  counter(kPreemptions, "Requests preempted for KV space.", static_cast<double>(c.preemptions()));
  counter(kLeaseExpiries, "Hand-off reservations or parked prefills reclaimed when their lease expired.",
          static_cast<double>(c.lease_expiries()));
  counter(kRequestFaults, "Requests the engine finished with an error.", static_cast<double>(c.request_faults()));
  counter(kPrefixCacheQueries, "Prefix-cache lookups.", static_cast<double>(c.prefix_cache_queries()));
  counter(kPrefixCacheHits, "Prefix-cache hits in blocks.", static_cast<double>(c.prefix_cache_hits()));
  if (info.role() != "prefill") {
    counter(kLocalPrefills, "Requests this decode node prefilled itself (short prompt, no usable prefill node, forced).",
            static_cast<double>(load.local_prefills()));
    counter(kWriteQuarantines,
            "Reservations that ended (released, aborted, expired) while their prefill node could still write them; "
            "their blocks were kept out of use until it was done or gone.",
            static_cast<double>(c.write_quarantines()));
    counter(kWriteQuarantinesExpired,
            "Quarantined reservations reclaimed at --write-quarantine-ms without word from their prefill node.",
            static_cast<double>(c.write_quarantines_expired()));
    counter(kGraphReplays, "Target forwards (decode and verification steps) replayed from a captured graph.",
            static_cast<double>(c.graph_replays()));
  }
  if (info.role() == "prefill") {
    counter(kKvTransferBytes, "KV cache bytes posted to decode nodes (any outcome).",
            static_cast<double>(load.kv_bytes_sent()));
  }
  if (load.has_proposer_sidecar()) {
    const node::v1::ProposerSidecarStats& ps = load.proposer_sidecar();
    // A summary without quantiles: the round trips' count and total time (the node keeps no
    // buckets), so rate(sum) / rate(count) is the mean round trip.
    prometheus::MetricFamily rtt;
    rtt.name = kProposerRoundTrip;
    rtt.help = "Round trips to the proposer sidecar that answered within the budget, in seconds.";
    rtt.type = MetricType::Summary;
    prometheus::ClientMetric m;
    for (const auto& [k, v] : base) m.label.push_back({k, v});
    m.summary.sample_count = static_cast<std::uint64_t>(ps.rtt_count());
    m.summary.sample_sum = ps.rtt_mean_us() * 1e-6 * static_cast<double>(ps.rtt_count());
    rtt.metric.push_back(std::move(m));
    out.push_back(std::move(rtt));
    counter(kProposerBudgetMisses, "Steps whose sidecar reply did not come within the latency budget.",
            static_cast<double>(ps.budget_misses()));
    counter(kProposerFallbackSteps, "Steps drafted locally because the sidecar missed its budget or was unreachable.",
            static_cast<double>(ps.fallback_steps()));
    counter(kProposerReconnects, "Connections to the sidecar made after the first.", static_cast<double>(ps.reconnects()));
    gauge(kProposerConnected, "1 while the decode node's stream to the sidecar is up.", ps.connected() ? 1.0 : 0.0);
  }
  if (!info.speculative_method().empty() && info.num_speculative_tokens() > 0) {
    const node::v1::SpecDecodeCounters& s = c.spec();
    // How drafts are verified, and whether that keeps the target's distribution (entropy
    // verification does not): a lossy deployment is visible on every acceptance series.
    LabelPairs spec = base;
    const std::string verification = info.verification().empty() ? "standard" : info.verification();
    spec.emplace_back("verification", verification);
    spec.emplace_back("lossless", verification.find("entropy") == std::string::npos ? "true" : "false");
    auto spec_counter = [&](const char* name, const char* help, double v) {
      out.push_back(FamilyBuilder(name, help, MetricType::Counter).add(spec, v).build());
    };
    spec_counter(kSpecDrafts, "Verification steps that checked at least one draft token (one per request per step).",
                 static_cast<double>(s.num_drafts()));
    spec_counter(kSpecDraftTokens, "Draft tokens proposed and verified.", static_cast<double>(s.num_draft_tokens()));
    spec_counter(kSpecAcceptedTokens, "Draft tokens accepted.", static_cast<double>(s.num_accepted_tokens()));
    FamilyBuilder per_pos(kSpecAcceptedPerPos, "Draft tokens accepted at each draft position (0-based).",
                          MetricType::Counter);
    for (int i = 0; i < s.accepted_per_position_size(); ++i) {
      per_pos.add(spec, static_cast<double>(s.accepted_per_position(i)), {{"position", std::to_string(i)}});
    }
    out.push_back(per_pos.build());
    FamilyBuilder by_length(kSpecProposalsByLength,
                            "Proposals (one per engine step that drafted) by the draft length they asked for.",
                            MetricType::Counter);
    for (int i = 0; i < s.proposals_by_length_size(); ++i) {
      by_length.add(spec, static_cast<double>(s.proposals_by_length(i)), {{"length", std::to_string(i)}});
    }
    out.push_back(by_length.build());
  }
  return out;
}

std::vector<prometheus::MetricFamily> NodeCollector::Collect() const {
  std::optional<node::v1::NodeInfo> info = snapshot_();
  const auto now = std::chrono::steady_clock::now();
  double age = 0.0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (info) {
      last_ = info;
      last_time_ = now;
    } else if (last_) {
      info = last_;
      age = std::chrono::duration<double>(now - last_time_).count();
    }
  }
  if (!info) return {};
  std::vector<prometheus::MetricFamily> out = node_families(*info);
  out.push_back(FamilyBuilder(kNodeSnapshotAge,
                              "Age of the engine snapshot these series come from: 0 when fresh, more when a scrape "
                              "found the engine busy and exported the last one.",
                              MetricType::Gauge)
                    .add(node_labels(*info), age)
                    .build());
  return out;
}

}  // namespace baton::metrics
