#include "cli/plan_measure.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "cli/plan_measure_transfer.h"
#include "common/status.h"
#include "engine/spec/config.h"

namespace baton::cli {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Distinct random prompts (no prefix-cache hits between them), ids in [1, vocab).
class PromptMaker {
 public:
  explicit PromptMaker(std::int32_t vocab) : ids_(1, std::max(1, vocab - 1)) {}
  std::vector<std::int32_t> make(int length) {
    std::vector<std::int32_t> p(static_cast<std::size_t>(length));
    for (auto& id : p) id = ids_(rng_);
    return p;
  }

 private:
  std::mt19937_64 rng_{20261206};
  std::uniform_int_distribution<std::int32_t> ids_;
};

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.seed = 0;
  return p;
}

// An engine with `k` drafts (0: the speculative config dropped).
absl::StatusOr<std::unique_ptr<Engine>> engine_at(const EngineConfig& base, int k) {
  EngineConfig config = base;
  if (k == 0) {
    config.speculative.reset();
  } else if (config.speculative) {
    config.speculative->num_speculative_tokens = k;
  }
  config.role = NodeRole::kColocated;
  return Engine::create(config);
}

// Steps until every request added so far has finished; returns the wall time.
absl::StatusOr<double> run_to_end(Engine& engine) {
  const auto start = Clock::now();
  while (engine.has_unfinished()) {
    BATON_ASSIGN_OR_RETURN(auto outputs, engine.step());
    for (const RequestOutput& o : outputs) {
      if (o.finished && o.finish_reason == FinishReason::kError) {
        return absl::InternalError(str_cat("request ", o.request_id, " failed while profiling: ", o.error));
      }
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status measure_prefill(const MeasureOptions& o, DeploymentProfile& p) {
  // As a prefill node runs: the speculative method at k = 1 (its drafter's prefill included).
  BATON_ASSIGN_OR_RETURN(auto engine, engine_at(o.engine, o.engine.speculative ? 1 : 0));
  PromptMaker prompts(engine->model_config().vocab_size);
  int id = 0;
  // One untimed forward first: buffers and caches are allocated on the first call at a size.
  BATON_RETURN_IF_ERROR(engine->add_request(str_cat("warm", id++), prompts.make(o.prefill_lengths.front()), greedy(1)));
  BATON_RETURN_IF_ERROR(run_to_end(*engine).status());
  for (int batch : o.prefill_batches) {
    for (int length : o.prefill_lengths) {
      if (length + 1 > engine->max_model_len()) continue;
      std::vector<double> seconds;
      for (int rep = 0; rep < o.repetitions; ++rep) {
        for (int b = 0; b < batch; ++b) {
          BATON_RETURN_IF_ERROR(engine->add_request(str_cat("p", id++), prompts.make(length), greedy(1)));
        }
        BATON_ASSIGN_OR_RETURN(double s, run_to_end(*engine));
        seconds.push_back(s);
      }
      p.prefill.push_back({batch, length, median(seconds)});
    }
  }
  if (p.prefill.empty()) return absl::InvalidArgumentError("no prefill length fits the model's max_model_len");
  return absl::OkStatus();
}

absl::Status measure_decode(const MeasureOptions& o, int k, DeploymentProfile& p) {
  BATON_ASSIGN_OR_RETURN(auto engine, engine_at(o.engine, k));
  PromptMaker prompts(engine->model_config().vocab_size);
  int id = 0;
  for (int batch : o.decode_batches) {
    if (batch > engine->max_num_seqs()) continue;
    // Enough tokens that nobody finishes inside the timed steps, whatever is accepted.
    const int max_tokens = (o.timed_steps + 4) * (k + 1) + 8;
    for (int b = 0; b < batch; ++b) {
      BATON_RETURN_IF_ERROR(engine->add_request(str_cat("d", id++), prompts.make(o.decode_context), greedy(max_tokens)));
    }
    // Untimed: the prompts' prefill (every request has its first token), then two decode steps
    // at this batch (first calls at a size allocate).
    std::set<std::string> started;
    int decoding_steps = 0;
    while (decoding_steps < 2) {
      const bool all_started = static_cast<int>(started.size()) == batch;
      BATON_ASSIGN_OR_RETURN(auto outputs, engine->step());
      for (const RequestOutput& out : outputs) {
        if (!out.new_tokens.empty()) started.insert(out.request_id);
      }
      if (all_started) ++decoding_steps;
    }
    std::vector<double> steps;
    for (int s = 0; s < o.timed_steps; ++s) {
      const auto start = Clock::now();
      BATON_ASSIGN_OR_RETURN(auto outputs, engine->step());
      steps.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      for (const RequestOutput& out : outputs) {
        if (out.finished) return absl::InternalError("a profiling request finished inside the timed steps");
      }
    }
    p.decode.push_back({k, batch, median(steps)});
    for (int b = id - batch; b < id; ++b) engine->abort(str_cat("d", b));
    BATON_RETURN_IF_ERROR(run_to_end(*engine).status());
  }
  return absl::OkStatus();
}

absl::Status measure_acceptance(const MeasureOptions& o, int k, DeploymentProfile& p) {
  p.acceptance.assign(static_cast<std::size_t>(k), 0.0);
  if (k == 0) return absl::OkStatus();
  if (o.acceptance_prompts.empty()) return absl::InvalidArgumentError("acceptance needs prompts");
  BATON_ASSIGN_OR_RETURN(auto engine, engine_at(o.engine, k));
  int id = 0;
  for (const auto& prompt : o.acceptance_prompts) {
    std::vector<std::int32_t> ids = prompt;
    const int room = engine->max_model_len() - o.acceptance_tokens - k - 1;
    if (room < 1) return absl::InvalidArgumentError("--acceptance-tokens does not fit the model's max_model_len");
    if (static_cast<int>(ids.size()) > room) ids.resize(static_cast<std::size_t>(room));
    BATON_RETURN_IF_ERROR(engine->add_request(str_cat("a", id++), std::move(ids), greedy(o.acceptance_tokens)));
  }
  BATON_RETURN_IF_ERROR(run_to_end(*engine).status());
  const SpecDecodeStats* stats = engine->spec_stats();
  if (stats == nullptr || stats->num_drafts == 0) return absl::InternalError("the engine proposed no drafts");
  for (int i = 0; i < k && i < static_cast<int>(stats->accepted_per_position.size()); ++i) {
    p.acceptance[static_cast<std::size_t>(i)] =
        static_cast<double>(stats->accepted_per_position[static_cast<std::size_t>(i)]) / static_cast<double>(stats->num_drafts);
  }
  // Prefix probabilities cannot grow with the position; counting noise aside they do not.
  for (std::size_t i = 1; i < p.acceptance.size(); ++i) p.acceptance[i] = std::min(p.acceptance[i], p.acceptance[i - 1]);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeploymentProfile> measure_profile(const MeasureOptions& o) {
  auto say = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };
  const int largest_k = o.engine.speculative ? o.engine.speculative->num_speculative_tokens : 0;
  if (o.ks.empty()) return absl::InvalidArgumentError("no k to measure");
  for (int k : o.ks) {
    if (k < 0 || k > largest_k) {
      return absl::InvalidArgumentError(
          str_cat("k = ", k, " cannot be measured: the speculative config drafts at most ", largest_k));
    }
  }
  DeploymentProfile p;
  p.model = o.engine.model_dir;
  p.method = o.engine.speculative ? std::string(spec_method_name(o.engine.speculative->method)) : "";
  p.threads = o.engine.backend.num_threads > 0 ? o.engine.backend.num_threads
                                               : static_cast<int>(std::thread::hardware_concurrency());
  p.host_cores = static_cast<int>(std::thread::hardware_concurrency());
  p.max_num_seqs = o.engine.scheduler.max_num_seqs;
  p.max_num_batched_tokens = o.engine.scheduler.max_num_batched_tokens;

  say("prefill forwards");
  BATON_RETURN_IF_ERROR(measure_prefill(o, p));
  for (int k : std::set<int>(o.ks.begin(), o.ks.end())) {
    say(str_cat("decode steps at k = ", k));
    BATON_RETURN_IF_ERROR(measure_decode(o, k, p));
  }
  say("acceptance by position");
  BATON_RETURN_IF_ERROR(measure_acceptance(o, largest_k, p));

  say("KV transfer");
  {
    BATON_ASSIGN_OR_RETURN(auto engine, engine_at(o.engine, o.engine.speculative ? 1 : 0));
    p.num_layers = engine->model_config().num_layers;
    p.kv_bytes_per_token = 0;
    for (const KvPoolInfo& pool : engine->kv_pools()) {
      if (pool.name == "state") continue;  // per request, not per token
      p.kv_bytes_per_token += static_cast<double>(pool.geometry.num_layers) * static_cast<double>(pool.geometry.unit_bytes) /
                              static_cast<double>(o.engine.block_size);
    }
  }
  BATON_ASSIGN_OR_RETURN(const TransferSpeed transfer, measure_kv_transfer());
  p.kv_gbps = transfer.gbps;
  p.kv_latency_s = transfer.latency_s;

  if (!o.endpoint.empty()) {
    say(str_cat("overheads of the deployment at ", o.endpoint));
    BATON_ASSIGN_OR_RETURN(const DeploymentOverheads overheads,
                           measure_overheads(o.endpoint, o.tls_ca, o.api_key, o.decode_context, p, largest_k));
    p.request_overhead_s = overheads.request_s;
    p.step_overhead_s = overheads.step_s;
    p.serving_cpu_per_token_s = overheads.serving_cpu_per_token_s;
  }
  return p;
}

}  // namespace baton::cli
