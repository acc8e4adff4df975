#include "cli/generate_batch.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/report.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace baton::cli {

using nlohmann::json;

absl::StatusOr<std::vector<BatchPrompt>> read_prompts_file(const BatchOptions& o, const Tokenizer* tokenizer,
                                                           bool keep_text) {
  std::ifstream in(o.path);
  if (!in) return absl::NotFoundError(str_cat(o.path, ": cannot open the prompts file"));
  std::vector<BatchPrompt> prompts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str_cat(o.path, ":", number, ": ");
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(where + "not a JSON object");
    for (const auto& [key, value] : j.items()) {
      if (key != "prompt" && key != "prompt_tokens" && key != "seed" && key != "max_tokens" && key != "temperature") {
        return absl::InvalidArgumentError(
            str_cat(where, "unknown key `", key, "` (known: prompt, prompt_tokens, seed, max_tokens, temperature)"));
      }
    }
    BatchPrompt p;
    p.params = o.defaults;
    if (j.contains("prompt") == j.contains("prompt_tokens")) {
      return absl::InvalidArgumentError(where + "give exactly one of `prompt` and `prompt_tokens`");
    }
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string()) return absl::InvalidArgumentError(where + "`prompt` must be a string");
      if (keep_text) {
        p.text = j["prompt"].get<std::string>();
      } else if (tokenizer == nullptr) {
        return absl::FailedPreconditionError(where + "`prompt` is text but the model has no tokenizer; use `prompt_tokens`");
      } else {
        p.tokens = tokenizer->encode(j["prompt"].get<std::string>(), /*add_special_tokens=*/true);
      }
    } else {
      const json& ids = j["prompt_tokens"];
      if (!ids.is_array()) return absl::InvalidArgumentError(where + "`prompt_tokens` must be a list of token ids");
      for (const json& id : ids) {
        if (!id.is_number_integer()) return absl::InvalidArgumentError(where + "`prompt_tokens` holds a non-integer");
        p.tokens.push_back(id.get<std::int32_t>());
      }
    }
    if (j.contains("seed")) {
      if (!j["seed"].is_number_unsigned()) return absl::InvalidArgumentError(where + "`seed` must be a non-negative integer");
      p.params.seed = j["seed"].get<std::uint64_t>();
    }
    if (j.contains("max_tokens")) {
      if (!j["max_tokens"].is_number_integer()) return absl::InvalidArgumentError(where + "`max_tokens` must be an integer");
      p.params.max_tokens = j["max_tokens"].get<std::int32_t>();
    }
    if (j.contains("temperature")) {
      if (!j["temperature"].is_number()) return absl::InvalidArgumentError(where + "`temperature` must be a number");
      p.params.temperature = j["temperature"].get<float>();
    }
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(str_cat(o.path, ": no prompts"));
  return prompts;
}

namespace {

double seconds(EngineClock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Result {
  std::vector<std::int32_t> ids;
  std::vector<TokenOutput> tokens;
  std::string text;
  RequestOutput last;
};

// `method`: the engine's speculative method ("" without speculation).
json result_json(std::size_t index, const Result& r, bool with_text, std::int32_t logprobs, const std::string& method) {
  const RequestOutput& o = r.last;
  const double ttft = seconds(o.first_token_time - o.arrival_time);
  const double decode = seconds(o.finish_time - o.first_token_time);
  json j;
  j["index"] = index;
  j["prompt_tokens"] = o.num_prompt_tokens;
  j["cached_prompt_tokens"] = o.num_cached_prompt_tokens;
  j["generated_tokens"] = r.ids.size();
  j["token_ids"] = r.ids;
  if (with_text) j["text"] = r.text;
  j["finish_reason"] = finish_reason_name(o.finish_reason);
  if (!o.error.empty()) j["error"] = o.error;
  j["prefill_tokens_per_s"] = ttft > 0 ? o.num_prompt_tokens / ttft : 0.0;
  j["decode_tokens_per_s"] = r.ids.size() > 1 && decode > 0 ? static_cast<double>(r.ids.size() - 1) / decode : 0.0;
  j["time_to_first_token_s"] = ttft;
  j["total_s"] = seconds(o.finish_time - o.arrival_time);
  if (logprobs >= 0) j["logprobs"] = logprobs_report(r.tokens);
  if (!method.empty()) j["spec"] = request_spec_report(method, o.spec);
  if (!o.hidden_states_path.empty()) j["kv_transfer_params"] = {{"hidden_states_path", o.hidden_states_path}};
  return j;
}

void print_json(const json& j) {
  // Text is valid UTF-8 by construction; replace rather than abort if it ever is not.
  std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
}

}  // namespace

int run_prompts_file(Engine& engine, const Tokenizer* tokenizer, const BatchOptions& o) {
  absl::StatusOr<std::vector<BatchPrompt>> prompts = read_prompts_file(o, tokenizer, /*keep_text=*/false);
  if (!prompts.ok()) {
    std::fprintf(stderr, "baton generate: %s\n", std::string(prompts.status().message()).c_str());
    return 1;
  }
  const auto start = EngineClock::now();
  for (std::size_t i = 0; i < prompts->size(); ++i) {
    BatchPrompt& p = (*prompts)[i];
    if (absl::Status s = engine.add_request(std::to_string(i), std::move(p.tokens), p.params); !s.ok()) {
      std::fprintf(stderr, "baton generate: %s:%s\n", o.path.c_str(), std::string(s.message()).c_str());
      return 1;
    }
  }
  std::map<std::size_t, Result> results;
  std::int64_t prompt_tokens = 0, generated = 0;
  int failed = 0;
  bool lossy = false;  // some request's sampled drafts were verified with entropy verification
  const bool with_text = tokenizer != nullptr && !o.token_ids;
  const std::string method =
      engine.speculative_config() ? std::string(spec_method_name(engine.speculative_config()->method)) : std::string();
  while (engine.has_unfinished()) {
    auto outs = engine.step();
    if (!outs.ok()) {
      std::fprintf(stderr, "baton generate: %s\n", std::string(outs.status().message()).c_str());
      return 1;
    }
    for (RequestOutput& out : *outs) {
      const std::size_t index = std::stoul(out.request_id);
      Result& r = results[index];
      for (TokenOutput& t : out.new_tokens) {
        r.ids.push_back(t.token);
        r.tokens.push_back(std::move(t));
      }
      r.text += out.new_text;
      if (!out.finished) continue;
      r.last = std::move(out);
      prompt_tokens += r.last.num_prompt_tokens;
      generated += static_cast<std::int64_t>(r.ids.size());
      failed += r.last.finish_reason == FinishReason::kError;
      lossy = lossy || r.last.spec.lossy;
      if (o.json) print_json(result_json(index, r, with_text, (*prompts)[index].params.logprobs, method));
    }
  }
  const double wall = seconds(EngineClock::now() - start);
  if (o.json) {
    json s;
    s["summary"] = true;
    s["model"] = o.model_dir;
    s["requests"] = prompts->size();
    s["failed_requests"] = failed;
    s["prompt_tokens"] = prompt_tokens;
    s["generated_tokens"] = generated;
    s["total_tokens"] = prompt_tokens + generated;
    s["wall_s"] = wall;
    s["output_tokens_per_s"] = wall > 0 ? static_cast<double>(generated) / wall : 0.0;
    s["total_tokens_per_s"] = wall > 0 ? static_cast<double>(prompt_tokens + generated) / wall : 0.0;
    s["requests_per_s"] = wall > 0 ? static_cast<double>(prompts->size()) / wall : 0.0;
    s["preemptions"] = engine.stats().preemptions;
    s["backend"] = engine.describe();
    if (engine.spec_stats() != nullptr) s["spec"] = spec_report(engine);
    print_json(s);
  } else {
    for (const auto& [index, r] : results) {
      std::cout << "=== " << index << " ===\n";
      if (with_text) {
        std::cout << r.text << "\n";
      } else {
        for (std::size_t i = 0; i < r.ids.size(); ++i) std::cout << (i ? "," : "") << r.ids[i];
        std::cout << "\n";
      }
    }
    std::cout << std::flush;
  }
  std::fprintf(stderr, "%zu prompts: %lld prompt tokens, %lld generated in %.2f s (%.1f output tokens/s)%s\n",
               prompts->size(), static_cast<long long>(prompt_tokens), static_cast<long long>(generated), wall,
               wall > 0 ? static_cast<double>(generated) / wall : 0.0,
               failed > 0 ? str_cat("; ", failed, " failed").c_str() : "");
  if (const SpecDecodeStats* st = engine.spec_stats()) {
    std::fputs(spec_line(std::string(spec_method_name(engine.speculative_config()->method)), st->num_drafts,
                         st->num_draft_tokens, st->num_accepted_tokens, lossy)
                   .c_str(),
               stderr);
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace baton::cli
