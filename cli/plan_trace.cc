#include "cli/plan_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "cli/serve_runner.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace baton::cli {

using nlohmann::json;

absl::StatusOr<std::vector<TraceRequest>> read_trace_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(str_cat(path, ": cannot open the trace"));
  std::vector<TraceRequest> trace;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str_cat(path, ":", number, ": ");
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(where + "not a JSON object");
    for (const auto& [key, value] : j.items()) {
      if (key != "arrival_s" && key != "prompt_tokens" && key != "output_tokens") {
        return absl::InvalidArgumentError(
            str_cat(where, "unknown key `", key, "` (known: arrival_s, prompt_tokens, output_tokens)"));
      }
    }
    if (!j.contains("arrival_s") || !j["arrival_s"].is_number() || !std::isfinite(j["arrival_s"].get<double>()) ||
        j["arrival_s"].get<double>() < 0) {
      return absl::InvalidArgumentError(where + "`arrival_s` must be a non-negative number of seconds");
    }
    for (const char* key : {"prompt_tokens", "output_tokens"}) {
      if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<std::int64_t>() < 1 ||
          j[key].get<std::int64_t>() > (1 << 24)) {
        return absl::InvalidArgumentError(str_cat(where, "`", key, "` must be an integer in [1, 16777216]"));
      }
    }
    trace.push_back({j["arrival_s"].get<double>(), j["prompt_tokens"].get<std::int32_t>(),
                     j["output_tokens"].get<std::int32_t>()});
  }
  if (trace.empty()) return absl::InvalidArgumentError(str_cat(path, ": the trace holds no requests"));
  std::stable_sort(trace.begin(), trace.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  return trace;
}

absl::StatusOr<std::vector<TraceRequest>> trace_from_dataset(const DatasetTraceOptions& options,
                                                             const Tokenizer* tokenizer) {
  if (options.max_tokens < 1) return absl::InvalidArgumentError("--max-tokens must be at least 1");
  BATON_ASSIGN_OR_RETURN(const std::vector<ServePrompt> prompts, load_serve_prompts(options.dataset));
  // As bench serve: an infinite (or no) rate sends everything at once.
  const double rate = options.request_rate > 0 ? options.request_rate : std::numeric_limits<double>::infinity();
  const std::vector<double> arrivals = poisson_arrivals(prompts.size(), rate, options.dataset.seed);
  std::vector<TraceRequest> trace;
  trace.reserve(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    std::size_t tokens = prompts[i].token_ids.size();
    if (prompts[i].token_ids.empty()) {
      if (tokenizer == nullptr) {
        return absl::FailedPreconditionError("the model has no tokenizer to count the dataset's text prompts with");
      }
      tokens = tokenizer->encode(prompts[i].text, /*add_special_tokens=*/true).size();
    }
    trace.push_back({arrivals[i], static_cast<std::int32_t>(std::max<std::size_t>(tokens, 1)), options.max_tokens});
  }
  return trace;
}

}  // namespace baton::cli
