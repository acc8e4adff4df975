#include "cli/serve_dataset.h"

#include <random>

#include "cli/bundled_files.h"
#include "cli/prompt_sets.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::cli {

namespace {

absl::StatusOr<std::string> default_path(const std::string& dataset) {
  BATON_ASSIGN_OR_RETURN(const std::string data, bundled_prompt_data());
  return data + (dataset == "humaneval" ? "/HumanEval.jsonl.gz" : "/spec_bench_question.jsonl");
}

}  // namespace

absl::StatusOr<std::vector<ServePrompt>> load_serve_prompts(const DatasetOptions& o) {
  if (o.num_prompts <= 0) return absl::InvalidArgumentError("--num-prompts must be positive");
  std::vector<ServePrompt> pool;
  if (o.dataset == "random") {
    if (o.vocab_size <= 0) return absl::InvalidArgumentError("random prompts need the model's vocabulary size");
    if (o.random_input_len <= 0) return absl::InvalidArgumentError("--random-input-len must be positive");
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<std::int32_t> id(0, o.vocab_size - 1);
    for (int i = 0; i < o.num_prompts; ++i) {
      ServePrompt p;
      for (int t = 0; t < o.random_input_len; ++t) p.token_ids.push_back(id(rng));
      pool.push_back(std::move(p));
    }
    return pool;
  }
  if (o.dataset != "humaneval" && o.dataset != "spec-bench" && o.dataset != "jsonl") {
    return absl::InvalidArgumentError(
        str_cat("unknown --dataset '", o.dataset, "' (humaneval, spec-bench, random or jsonl)"));
  }
  if (o.dataset == "jsonl" && o.path.empty()) return absl::InvalidArgumentError("--dataset jsonl needs --dataset-path");
  std::string path = o.path;
  if (path.empty()) {
    BATON_ASSIGN_OR_RETURN(path, default_path(o.dataset));
  }
  BATON_ASSIGN_OR_RETURN(auto lines, read_lines(path));
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str_cat(path, ":", i + 1);
    auto j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(str_cat(where, ": not a JSON object"));
    ServePrompt p;
    if (o.dataset == "spec-bench") {
      auto turns = j.find("turns");
      if (turns == j.end() || !turns->is_array() || turns->empty() || !(*turns)[0].is_string()) {
        return absl::InvalidArgumentError(str_cat(where, ": no \"turns\" list of strings"));
      }
      p.text = (*turns)[0].get<std::string>();
      p.chat = true;
    } else {
      auto f = j.find(o.field);
      if (f == j.end() || !f->is_string()) {
        return absl::InvalidArgumentError(str_cat(where, ": no string field \"", o.field, "\""));
      }
      p.text = f->get<std::string>();
    }
    pool.push_back(std::move(p));
  }
  if (pool.empty()) return absl::InvalidArgumentError(str_cat(path, ": no prompts"));
  std::vector<ServePrompt> out;
  for (int i = 0; i < o.num_prompts; ++i) out.push_back(pool[static_cast<std::size_t>(i) % pool.size()]);
  return out;
}

}  // namespace baton::cli
