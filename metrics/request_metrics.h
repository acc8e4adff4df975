// RequestMetrics: the router's view of each finished request — time to first token, time per
// output token, inter-token latency (per streamed message), end-to-end latency (histograms) and
// requests by finish reason — labelled with the speculative method of the decode node that
// served it, role "router" and the router's address.
//
// Thread-safe (prometheus-cpp instruments); observe() is called once per request from its thread.
// Must not: time anything itself (the caller measures as the client sees it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace baton::metrics {

struct RequestObservation {
  std::string method = "none";    // the decode node's speculative method
  std::string finished_reason;    // stop, length, abort, error
  bool got_first_token = false;
  double ttft_s = 0;
  double e2e_s = 0;
  std::int64_t output_tokens = 0;
  std::vector<double> inter_token_s;  // gaps between token-carrying messages
  // The request's phases from its usage timings (negative: not known, e.g. the request failed
  // before its last message): waiting for room before the first node call, prefill (on the
  // prefill node, or locally on the decode node), the KV transfer of a disaggregated request (it
  // overlaps the prefill's last layers), and decode (first token to last message).
  double queue_s = -1;
  double prefill_s = -1;
  double kv_transfer_s = -1;
  double decode_s = -1;
};

class RequestMetrics {
 public:
  RequestMetrics(prometheus::Registry& registry, std::string node);
  void observe(const RequestObservation& r);
  // Requests the router is running (Generate calls in flight).
  prometheus::Gauge& running() { return *running_; }

 private:
  std::string node_;
  prometheus::Family<prometheus::Histogram>& ttft_;
  prometheus::Family<prometheus::Histogram>& tpot_;
  prometheus::Family<prometheus::Histogram>& itl_;
  prometheus::Family<prometheus::Histogram>& e2e_;
  prometheus::Family<prometheus::Counter>& success_;
  prometheus::Family<prometheus::Histogram>& queue_;
  prometheus::Family<prometheus::Histogram>& prefill_;
  prometheus::Family<prometheus::Histogram>& kv_transfer_;
  prometheus::Family<prometheus::Histogram>& decode_;
  prometheus::Gauge* running_;
};

}  // namespace baton::metrics
