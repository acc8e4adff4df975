#include "cli/plan_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "common/status.h"

namespace baton::cli {

using nlohmann::json;

namespace {

// y at x on the polyline through (xs, ys) (xs ascending), extended linearly past both ends from
// the outermost two points (a single point: constant), never below zero.
double interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.empty()) return 0;
  if (xs.size() == 1) return ys[0];
  std::size_t hi = 1;
  while (hi + 1 < xs.size() && xs[hi] < x) ++hi;
  const std::size_t lo = hi - 1;
  const double t = (x - xs[lo]) / (xs[hi] - xs[lo]);
  return std::max(0.0, ys[lo] + t * (ys[hi] - ys[lo]));
}

}  // namespace

double DeploymentProfile::prefill_seconds(int batch, int tokens_per_seq) const {
  // Per measured batch size: seconds over tokens per sequence.
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> rows;
  for (const PrefillPoint& p : prefill) {
    rows[p.batch].first.push_back(p.tokens_per_seq);
    rows[p.batch].second.push_back(p.seconds);
  }
  if (rows.empty()) return 0;
  std::vector<double> batches, seconds;
  for (auto& [b, row] : rows) {
    // Points were written in ascending length order per batch; sort defensively.
    std::vector<std::size_t> order(row.first.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t c) { return row.first[a] < row.first[c]; });
    std::vector<double> xs, ys;
    for (std::size_t i : order) {
      xs.push_back(row.first[i]);
      ys.push_back(row.second[i]);
    }
    batches.push_back(b);
    seconds.push_back(interpolate(xs, ys, tokens_per_seq));
  }
  const int largest = static_cast<int>(batches.back());
  if (batch > largest) {
    // Past the largest batch measured: as many forwards of that batch as it takes, by tokens.
    return seconds.back() * static_cast<double>(batch) / largest;
  }
  return interpolate(batches, seconds, batch);
}

absl::StatusOr<double> DeploymentProfile::decode_step_seconds(int k, int batch) const {
  std::vector<std::pair<double, double>> row;
  for (const DecodePoint& p : decode) {
    if (p.k == k) row.emplace_back(p.batch, p.step_seconds);
  }
  if (row.empty()) return absl::NotFoundError(str_cat("the profile has no decode steps measured at k = ", k));
  std::sort(row.begin(), row.end());
  std::vector<double> xs, ys;
  for (auto [b, s] : row) {
    xs.push_back(b);
    ys.push_back(s);
  }
  return interpolate(xs, ys, batch) + step_overhead_s;
}

double DeploymentProfile::expected_tokens_per_step(int k) const {
  double tokens = 1;
  for (int i = 0; i < k && i < static_cast<int>(acceptance.size()); ++i) tokens += acceptance[static_cast<std::size_t>(i)];
  return tokens;
}

std::vector<int> DeploymentProfile::measured_ks() const {
  std::set<int> ks;
  for (const DecodePoint& p : decode) ks.insert(p.k);
  return {ks.begin(), ks.end()};
}

json profile_to_json(const DeploymentProfile& p) {
  json j = {{"model", p.model},
            {"method", p.method},
            {"device", p.device},
            {"threads", p.threads},
            {"host_cores", p.host_cores},
            {"num_layers", p.num_layers},
            {"max_num_seqs", p.max_num_seqs},
            {"max_num_batched_tokens", p.max_num_batched_tokens},
            {"acceptance", p.acceptance},
            {"kv_bytes_per_token", p.kv_bytes_per_token},
            {"kv_gbps", p.kv_gbps},
            {"kv_latency_s", p.kv_latency_s},
            {"request_overhead_s", p.request_overhead_s},
            {"step_overhead_s", p.step_overhead_s},
            {"serving_cpu_per_token_s", p.serving_cpu_per_token_s}};
  j["prefill"] = json::array();
  for (const PrefillPoint& x : p.prefill) {
    j["prefill"].push_back({{"batch", x.batch}, {"tokens_per_seq", x.tokens_per_seq}, {"seconds", x.seconds}});
  }
  j["decode"] = json::array();
  for (const DecodePoint& x : p.decode) {
    j["decode"].push_back({{"k", x.k}, {"batch", x.batch}, {"step_seconds", x.step_seconds}});
  }
  return j;
}

namespace {

template <typename T>
absl::Status take(const json& j, const char* key, T* out, const std::string& where, bool required = true) {
  if (!j.contains(key)) {
    return required ? absl::InvalidArgumentError(str_cat(where, ": missing `", key, "`")) : absl::OkStatus();
  }
  try {
    *out = j.at(key).get<T>();
  } catch (const json::exception&) {
    return absl::InvalidArgumentError(str_cat(where, ": `", key, "` has the wrong type"));
  }
  return absl::OkStatus();
}

absl::Status positive(double v, const char* key, const std::string& where, bool allow_zero = false) {
  if (!std::isfinite(v) || v < 0 || (!allow_zero && v == 0)) {
    return absl::InvalidArgumentError(str_cat(where, ": `", key, "` must be ", allow_zero ? "non-negative" : "positive",
                                              ", got ", v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeploymentProfile> profile_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return absl::InvalidArgumentError(where + ": a profile is a JSON object");
  DeploymentProfile p;
  BATON_RETURN_IF_ERROR(take(j, "model", &p.model, where));
  BATON_RETURN_IF_ERROR(take(j, "method", &p.method, where));
  BATON_RETURN_IF_ERROR(take(j, "device", &p.device, where, false));
  BATON_RETURN_IF_ERROR(take(j, "threads", &p.threads, where));
  BATON_RETURN_IF_ERROR(take(j, "host_cores", &p.host_cores, where));
  BATON_RETURN_IF_ERROR(take(j, "num_layers", &p.num_layers, where));
  BATON_RETURN_IF_ERROR(take(j, "max_num_seqs", &p.max_num_seqs, where));
  BATON_RETURN_IF_ERROR(take(j, "max_num_batched_tokens", &p.max_num_batched_tokens, where));
  BATON_RETURN_IF_ERROR(take(j, "acceptance", &p.acceptance, where));
  BATON_RETURN_IF_ERROR(take(j, "kv_bytes_per_token", &p.kv_bytes_per_token, where));
  BATON_RETURN_IF_ERROR(take(j, "kv_gbps", &p.kv_gbps, where));
  BATON_RETURN_IF_ERROR(take(j, "kv_latency_s", &p.kv_latency_s, where));
  BATON_RETURN_IF_ERROR(take(j, "request_overhead_s", &p.request_overhead_s, where, false));
  BATON_RETURN_IF_ERROR(take(j, "step_overhead_s", &p.step_overhead_s, where, false));
  BATON_RETURN_IF_ERROR(take(j, "serving_cpu_per_token_s", &p.serving_cpu_per_token_s, where, false));
  if (p.num_layers <= 0 || p.max_num_seqs <= 0 || p.max_num_batched_tokens <= 0) {
    return absl::InvalidArgumentError(where + ": `num_layers`, `max_num_seqs` and `max_num_batched_tokens` must be positive");
  }
  BATON_RETURN_IF_ERROR(positive(p.kv_bytes_per_token, "kv_bytes_per_token", where));
  BATON_RETURN_IF_ERROR(positive(p.kv_gbps, "kv_gbps", where));
  BATON_RETURN_IF_ERROR(positive(p.kv_latency_s, "kv_latency_s", where, true));
  BATON_RETURN_IF_ERROR(positive(p.request_overhead_s, "request_overhead_s", where, true));
  BATON_RETURN_IF_ERROR(positive(p.step_overhead_s, "step_overhead_s", where, true));
  BATON_RETURN_IF_ERROR(positive(p.serving_cpu_per_token_s, "serving_cpu_per_token_s", where, true));
  for (double a : p.acceptance) {
    if (!(a >= 0 && a <= 1)) return absl::InvalidArgumentError(str_cat(where, ": `acceptance` holds ", a, ", not in [0, 1]"));
  }
  if (!j.contains("prefill") || !j["prefill"].is_array() || j["prefill"].empty()) {
    return absl::InvalidArgumentError(where + ": `prefill` must be a non-empty list");
  }
  for (std::size_t i = 0; i < j["prefill"].size(); ++i) {
    const std::string at = str_cat(where, ": prefill[", i, "]");
    PrefillPoint x;
    BATON_RETURN_IF_ERROR(take(j["prefill"][i], "batch", &x.batch, at));
    BATON_RETURN_IF_ERROR(take(j["prefill"][i], "tokens_per_seq", &x.tokens_per_seq, at));
    BATON_RETURN_IF_ERROR(take(j["prefill"][i], "seconds", &x.seconds, at));
    if (x.batch <= 0 || x.tokens_per_seq <= 0) return absl::InvalidArgumentError(at + ": batch and tokens_per_seq must be positive");
    BATON_RETURN_IF_ERROR(positive(x.seconds, "seconds", at));
    p.prefill.push_back(x);
  }
  if (!j.contains("decode") || !j["decode"].is_array() || j["decode"].empty()) {
    return absl::InvalidArgumentError(where + ": `decode` must be a non-empty list");
  }
  for (std::size_t i = 0; i < j["decode"].size(); ++i) {
    const std::string at = str_cat(where, ": decode[", i, "]");
    DecodePoint x;
    BATON_RETURN_IF_ERROR(take(j["decode"][i], "k", &x.k, at));
    BATON_RETURN_IF_ERROR(take(j["decode"][i], "batch", &x.batch, at));
    BATON_RETURN_IF_ERROR(take(j["decode"][i], "step_seconds", &x.step_seconds, at));
    if (x.k < 0 || x.batch <= 0) return absl::InvalidArgumentError(at + ": k must be >= 0 and batch positive");
    if (x.k > static_cast<int>(p.acceptance.size())) {
      return absl::InvalidArgumentError(str_cat(at, ": k = ", x.k, " but `acceptance` has only ", p.acceptance.size(),
                                                " positions"));
    }
    BATON_RETURN_IF_ERROR(positive(x.step_seconds, "step_seconds", at));
    p.decode.push_back(x);
  }
  return p;
}

absl::StatusOr<DeploymentProfile> read_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(str_cat(path, ": cannot open the profile"));
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(str_cat(path, ": not JSON"));
  return profile_from_json(j, path);
}

}  // namespace baton::cli
