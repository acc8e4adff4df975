#include "cli/serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace baton::cli {

absl::StatusOr<GoodputTargets> parse_goodput(const std::string& spec) {
  GoodputTargets t;
  for (absl::string_view item : absl::StrSplit(spec, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(item, ':');
    double ms = 0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &ms) || !(ms > 0)) {
      return absl::InvalidArgumentError(str_cat("--goodput: '", item, "' is not KEY:MILLISECONDS with a positive value"));
    }
    if (kv[0] == "ttft") {
      t.ttft_ms = ms;
    } else if (kv[0] == "tpot") {
      t.tpot_ms = ms;
    } else if (kv[0] == "e2el") {
      t.e2el_ms = ms;
    } else {
      return absl::InvalidArgumentError(str_cat("--goodput: unknown metric '", kv[0], "' (ttft, tpot or e2el)"));
    }
  }
  if (!t.any()) return absl::InvalidArgumentError("--goodput: no target given (e.g. ttft:500,tpot:50)");
  return t;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

LatencyStats latency_stats(const std::vector<double>& seconds) {
  LatencyStats s;
  s.count = seconds.size();
  if (seconds.empty()) return s;
  double sum = 0;
  for (double x : seconds) sum += x;
  s.mean_ms = 1000.0 * sum / static_cast<double>(seconds.size());
  s.p50_ms = 1000.0 * percentile(seconds, 50);
  s.p90_ms = 1000.0 * percentile(seconds, 90);
  s.p99_ms = 1000.0 * percentile(seconds, 99);
  return s;
}

namespace {

std::optional<double> tpot_of(const ServeResult& r) {
  if (r.output_tokens < 2) return std::nullopt;
  return (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}

}  // namespace

ServeSummary summarize(const std::vector<ServeResult>& results, double duration_s, const GoodputTargets& targets) {
  ServeSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  std::size_t good = 0;
  for (const ServeResult& r : results) {
    if (!r.ok) {
      ++s.failed;
      if (s.errors.size() < 5) s.errors.push_back(r.error);
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2el.push_back(r.e2e_s);
    const auto t = tpot_of(r);
    if (t) tpot.push_back(*t);
    for (std::size_t i = 1; i < r.chunk_times.size(); ++i) itl.push_back(r.chunk_times[i] - r.chunk_times[i - 1]);
    s.num_drafts += r.num_drafts;
    s.num_draft_tokens += r.num_draft_tokens;
    s.num_accepted_tokens += r.num_accepted_tokens;
    if (targets.any()) {
      bool ok = true;
      if (targets.ttft_ms && 1000.0 * r.ttft_s > *targets.ttft_ms) ok = false;
      if (targets.tpot_ms && t && 1000.0 * *t > *targets.tpot_ms) ok = false;
      if (targets.e2el_ms && 1000.0 * r.e2e_s > *targets.e2el_ms) ok = false;
      if (ok) ++good;
    }
  }
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput = static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    if (targets.any()) s.goodput = static_cast<double>(good) / duration_s;
  }
  s.ttft = latency_stats(ttft);
  s.tpot = latency_stats(tpot);
  s.itl = latency_stats(itl);
  s.e2el = latency_stats(e2el);
  if (s.num_draft_tokens > 0) {
    s.acceptance_rate = static_cast<double>(s.num_accepted_tokens) / static_cast<double>(s.num_draft_tokens);
  }
  if (s.num_drafts > 0) {
    s.mean_acceptance_length = 1.0 + static_cast<double>(s.num_accepted_tokens) / static_cast<double>(s.num_drafts);
  }
  return s;
}

namespace {

nlohmann::json stats_json(const LatencyStats& l) {
  return {{"count", l.count}, {"mean_ms", l.mean_ms}, {"p50_ms", l.p50_ms}, {"p90_ms", l.p90_ms}, {"p99_ms", l.p99_ms}};
}

}  // namespace

nlohmann::json summary_json(const ServeSummary& s) {
  nlohmann::json j = {
      {"label", s.label},
      // JSON has no infinity: an unlimited rate is written as null.
      {"request_rate", std::isinf(s.request_rate) ? nlohmann::json(nullptr) : nlohmann::json(s.request_rate)},
      {"max_concurrency", s.max_concurrency},
      {"completed", s.completed},
      {"failed", s.failed},
      {"duration_s", s.duration_s},
      {"total_input_tokens", s.total_input_tokens},
      {"total_output_tokens", s.total_output_tokens},
      {"request_throughput", s.request_throughput},
      {"output_throughput", s.output_throughput},
      {"total_token_throughput", s.total_token_throughput},
      {"ttft", stats_json(s.ttft)},
      {"tpot", stats_json(s.tpot)},
      {"itl", stats_json(s.itl)},
      {"e2el", stats_json(s.e2el)},
      {"num_drafts", s.num_drafts},
      {"num_draft_tokens", s.num_draft_tokens},
      {"num_accepted_tokens", s.num_accepted_tokens},
      {"errors", s.errors},
  };
  j["goodput"] = s.goodput ? nlohmann::json(*s.goodput) : nlohmann::json(nullptr);
  j["acceptance_rate"] = s.acceptance_rate ? nlohmann::json(*s.acceptance_rate) : nlohmann::json(nullptr);
  j["mean_acceptance_length"] =
      s.mean_acceptance_length ? nlohmann::json(*s.mean_acceptance_length) : nlohmann::json(nullptr);
  return j;
}

std::string summary_table(const ServeSummary& s) {
  std::string out;
  auto line = [&out](const char* name, const std::string& value) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%-40s %s\n", name, value.c_str());
    out += buf;
  };
  auto num = [](double v, int digits = 2) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return std::string(buf);
  };
  out += "============ Serving Benchmark Result ============\n";
  if (!s.label.empty()) line("Label:", s.label);
  line("Request rate (req/s):", std::isinf(s.request_rate) ? "inf" : num(s.request_rate));
  line("Max concurrency:", s.max_concurrency > 0 ? std::to_string(s.max_concurrency) : "unlimited");
  line("Successful requests:", std::to_string(s.completed));
  line("Failed requests:", std::to_string(s.failed));
  line("Benchmark duration (s):", num(s.duration_s));
  line("Total input tokens:", std::to_string(s.total_input_tokens));
  line("Total generated tokens:", std::to_string(s.total_output_tokens));
  line("Request throughput (req/s):", num(s.request_throughput));
  if (s.goodput) line("Request goodput (req/s):", num(*s.goodput));
  line("Output token throughput (tok/s):", num(s.output_throughput));
  line("Total token throughput (tok/s):", num(s.total_token_throughput));
  auto section = [&](const char* title, const char* key, const LatencyStats& l) {
    out += std::string("---------------") + title + "---------------\n";
    line((std::string("Mean ") + key + " (ms):").c_str(), num(l.mean_ms));
    line((std::string("Median ") + key + " (ms):").c_str(), num(l.p50_ms));
    line((std::string("P90 ") + key + " (ms):").c_str(), num(l.p90_ms));
    line((std::string("P99 ") + key + " (ms):").c_str(), num(l.p99_ms));
  };
  section("Time to First Token", "TTFT", s.ttft);
  section("Time per Output Token (excl. 1st token)", "TPOT", s.tpot);
  section("Inter-token Latency", "ITL", s.itl);
  section("End-to-end Latency", "E2EL", s.e2el);
  if (s.num_drafts > 0) {
    out += "---------------Speculative Decoding---------------\n";
    line("Acceptance rate (%):", num(100.0 * s.acceptance_rate.value_or(0)));
    line("Mean acceptance length:", num(s.mean_acceptance_length.value_or(0)));
    line("Drafts:", std::to_string(s.num_drafts));
    line("Draft tokens:", std::to_string(s.num_draft_tokens));
    line("Accepted tokens:", std::to_string(s.num_accepted_tokens));
  }
  for (const std::string& e : s.errors) line("Error:", e);
  out += "==================================================\n";
  return out;
}

}  // namespace baton::cli
