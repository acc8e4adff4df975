#include "cli/plan.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli/plan_measure.h"
#include "cli/plan_search.h"
#include "cli/plan_sim.h"
#include "cli/plan_trace.h"
#include "cli/serve_metrics.h"
#include "common/flags.h"
#include "common/status.h"
#include "engine/model/config.h"
#include "node_common/engine_flags.h"
#include "security/api_keys.h"
#include "tokenizer/tokenizer.h"

namespace baton::cli {

namespace {

using nlohmann::json;

// The request trace's flags, shared by `plan` and `plan simulate` (bench serve's spellings).
const std::vector<FlagSpec>& trace_flags() {
  static const std::vector<FlagSpec> flags = {
      {"trace", "FILE", "JSONL: one {\"arrival_s\", \"prompt_tokens\", \"output_tokens\"} per request"},
      {"dataset", "NAME", "instead of --trace, the requests `baton bench serve` sends: humaneval (default), spec-bench, "
                          "random or jsonl"},
      {"dataset-path", "FILE", "the prompt file for jsonl (or another copy of the named set)"},
      {"field", "NAME", "jsonl: the field holding each prompt (default prompt)"},
      {"num-prompts", "N", "requests (default 100)"},
      {"random-input-len", "N", "random: prompt tokens (default 128)"},
      {"max-tokens", "N", "output tokens per request (default 128; the trace assumes --ignore-eos)"},
      {"request-rate", "R", "requests per second, Poisson arrivals as bench serve draws them (default inf)"},
      {"seed", "S", "seed of the arrivals and random prompts, as bench serve's --seed (default 0)"},
      {"model", "DIR", "the model whose tokenizer counts text prompts (default: the profile's)"},
  };
  return flags;
}

std::vector<FlagSpec> with(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

int fail(const char* command, const absl::Status& s) {
  std::fprintf(stderr, "%s: %s\n", command, std::string(s.message()).c_str());
  return 1;
}

absl::StatusOr<std::vector<int>> int_list(const ParsedFlags& f, const std::string& name, std::vector<int> fallback,
                                          int min) {
  auto v = f.get(name);
  if (!v) return fallback;
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(*v, ',', absl::SkipEmpty())) {
    int x = 0;
    if (!absl::SimpleAtoi(part, &x) || x < min) {
      return absl::InvalidArgumentError(str_cat("--", name, ": '", part, "' is not an integer >= ", min));
    }
    out.push_back(x);
  }
  if (out.empty()) return absl::InvalidArgumentError(str_cat("--", name, " is empty"));
  return out;
}

absl::StatusOr<int> positive_int(const ParsedFlags& f, const std::string& name, int fallback, int min = 1) {
  BATON_ASSIGN_OR_RETURN(auto v, f.get_int(name));
  if (!v) return fallback;
  if (*v < min || *v > (1 << 24)) return absl::InvalidArgumentError(str_cat("--", name, " must be in [", min, ", 16777216]"));
  return static_cast<int>(*v);
}

absl::StatusOr<std::vector<TraceRequest>> trace_from_flags(const ParsedFlags& f, const DeploymentProfile& profile) {
  if (auto path = f.get("trace")) {
    if (f.has("dataset")) return absl::InvalidArgumentError("give --trace or --dataset, not both");
    return read_trace_jsonl(*path);
  }
  DatasetTraceOptions o;
  o.dataset.dataset = f.get("dataset").value_or("humaneval");
  o.dataset.path = f.get("dataset-path").value_or("");
  o.dataset.field = f.get("field").value_or("prompt");
  BATON_ASSIGN_OR_RETURN(o.dataset.num_prompts, positive_int(f, "num-prompts", 100));
  BATON_ASSIGN_OR_RETURN(o.dataset.random_input_len, positive_int(f, "random-input-len", 128));
  BATON_ASSIGN_OR_RETURN(o.max_tokens, positive_int(f, "max-tokens", 128));
  BATON_ASSIGN_OR_RETURN(auto seed, f.get_int("seed"));
  if (seed) o.dataset.seed = static_cast<std::uint64_t>(*seed);
  if (auto rate = f.get("request-rate")) {
    if (*rate == "inf") {
      o.request_rate = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(*rate, &o.request_rate) || !(o.request_rate > 0)) {
      return absl::InvalidArgumentError(str_cat("--request-rate: '", *rate, "' is not a positive number or inf"));
    }
  }
  const std::string model = f.get("model").value_or(profile.model);
  BATON_ASSIGN_OR_RETURN(const ModelConfig config, ModelConfig::load(model));
  o.dataset.vocab_size = config.vocab_size;
  BATON_ASSIGN_OR_RETURN(auto tokenizer, load_tokenizer_if_present(model));
  return trace_from_dataset(o, tokenizer.get());
}

// The chart's values for a deployment (deploy/k8s/helm/baton/values.yaml).
std::string chart_values(const DeploymentProfile& p, const Candidate& c) {
  std::ostringstream out;
  out << "prefill:\n  replicas: " << c.num_prefill << "\n";
  out << "decode:\n  replicas: " << c.num_decode << "\n";
  if (c.k == 0 || p.method.empty()) {
    out << "speculativeConfig: {}\n";
  } else {
    out << "speculativeConfig:\n  method: " << p.method << "\n  num_speculative_tokens: " << c.k
        << "\n  # model: the drafter's directory in the pods, as profiled\n";
  }
  return out.str();
}

// --- baton plan profile ---------------------------------------------------------------------

const std::vector<FlagSpec>& profile_flags() {
  static const std::vector<FlagSpec> flags = with(
      engine_flags(),
      {
          {"out", "FILE", "where the profile goes (JSON; required)"},
          {"ks", "K[,K...]", "decode k values to time (default: 0 and every k up to the speculative config's)"},
          {"decode-batches", "B[,B...]", "running requests per timed decode step (default 1,2,4,8,16)"},
          {"prefill-lengths", "L[,L...]", "prompt lengths of the timed prefills (default 32,64,128,256,512,1024)"},
          {"prefill-batches", "B[,B...]", "prompts per timed prefill forward (default 1,4)"},
          {"decode-context", "N", "prompt tokens of each decoding request (default 128)"},
          {"acceptance-dataset", "NAME", "prompts acceptance is measured on: humaneval (default), spec-bench, jsonl, or "
                                         "random (--decode-context tokens each; like bench serve's random)"},
          {"acceptance-dataset-path", "FILE", "the prompt file (jsonl, or another copy of the named set)"},
          {"acceptance-prompts", "N", "how many of them (default 16)"},
          {"acceptance-tokens", "N", "output tokens per acceptance request (default 64; acceptance changes along an "
                                         "answer, so give your typical output length)"},
          {"endpoint", "HOST:PORT", "a live deployment's router: also measure its per-request and per-step overheads"},
          {"tls-ca", "FILE", "verify the router's certificate with this CA (the API key comes from BATON_API_KEY)"},
          {"kv-gbps", "X", "the KV transport's bandwidth between the real hosts in GB/s, instead of measuring it here"},
          {"help", "", "show this help"},
      });
  return flags;
}

int profile_main(int argc, char** argv) {
  constexpr const char* kCommand = "baton plan profile";
  constexpr const char* kSynopsis =
      "--out FILE [engine flags, as the nodes run] [--endpoint HOST:PORT]\n\n"
      "Measures this deployment's speeds for `baton plan`: prefill forwards by batch and length, decode\n"
      "steps by batch and k, acceptance by draft position and KV transfer bandwidth, and with --endpoint\n"
      "the live deployment's fixed overheads. Run it where a node runs, with the nodes' engine flags.";
  auto parsed = parse_flags(profile_flags(), argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n\n%s", kCommand, std::string(parsed.status().message()).c_str(),
                 usage(kCommand, kSynopsis, profile_flags()).c_str());
    return 2;
  }
  const ParsedFlags& f = *parsed;
  if (f.has("help")) {
    std::printf("%s", usage(kCommand, kSynopsis, profile_flags()).c_str());
    return 0;
  }
  auto out_path = f.get("out");
  if (!out_path) return fail(kCommand, absl::InvalidArgumentError("--out FILE is required"));
  auto config = engine_config_from_flags(f, NodeRole::kColocated);
  if (!config.ok()) return fail(kCommand, config.status());

  MeasureOptions o;
  o.engine = *config;
  const int largest_k = config->speculative ? config->speculative->num_speculative_tokens : 0;
  std::vector<int> all_ks;
  for (int k = 0; k <= largest_k; ++k) all_ks.push_back(k);
  auto ks = int_list(f, "ks", all_ks, 0);
  auto batches = int_list(f, "decode-batches", o.decode_batches, 1);
  auto lengths = int_list(f, "prefill-lengths", o.prefill_lengths, 1);
  auto prefill_batches = int_list(f, "prefill-batches", o.prefill_batches, 1);
  auto context = positive_int(f, "decode-context", o.decode_context);
  auto acceptance_prompts = positive_int(f, "acceptance-prompts", 16);
  auto acceptance_tokens = positive_int(f, "acceptance-tokens", o.acceptance_tokens);
  for (const absl::Status& s : {ks.status(), batches.status(), lengths.status(), prefill_batches.status(),
                                context.status(), acceptance_prompts.status(), acceptance_tokens.status()}) {
    if (!s.ok()) return fail(kCommand, s);
  }
  o.ks = *ks;
  o.decode_batches = *batches;
  o.prefill_lengths = *lengths;
  o.prefill_batches = *prefill_batches;
  o.decode_context = *context;
  o.acceptance_tokens = *acceptance_tokens;
  o.endpoint = f.get("endpoint").value_or("");
  o.tls_ca = f.get("tls-ca").value_or("");
  o.api_key = security::api_key_from_environment();
  o.progress = [](const std::string& line) { std::fprintf(stderr, "%s: %s\n", "baton plan profile", line.c_str()); };

  if (largest_k > 0) {
    DatasetOptions data;
    data.dataset = f.get("acceptance-dataset").value_or("humaneval");
    data.path = f.get("acceptance-dataset-path").value_or("");
    data.num_prompts = *acceptance_prompts;
    data.random_input_len = o.decode_context;  // random: prompts of --decode-context tokens
    auto model_config = ModelConfig::load(config->model_dir);
    if (!model_config.ok()) return fail(kCommand, model_config.status());
    data.vocab_size = model_config->vocab_size;
    auto prompts = load_serve_prompts(data);
    if (!prompts.ok()) return fail(kCommand, prompts.status());
    auto tokenizer = load_tokenizer_if_present(config->model_dir);
    if (!tokenizer.ok()) return fail(kCommand, tokenizer.status());
    for (const ServePrompt& p : *prompts) {
      if (!p.token_ids.empty()) {
        o.acceptance_prompts.push_back(p.token_ids);
      } else if (*tokenizer == nullptr) {
        return fail(kCommand, absl::FailedPreconditionError("the model has no tokenizer for the acceptance prompts"));
      } else {
        o.acceptance_prompts.push_back((*tokenizer)->encode(p.text, true));
      }
    }
  }

  auto profile = measure_profile(o);
  if (!profile.ok()) return fail(kCommand, profile.status());
  auto gbps = f.get_double("kv-gbps");
  if (!gbps.ok()) return fail(kCommand, gbps.status());
  if (*gbps) {
    if (!(**gbps > 0)) return fail(kCommand, absl::InvalidArgumentError("--kv-gbps must be positive"));
    profile->kv_gbps = **gbps;
  }
  std::ofstream out(*out_path);
  out << profile_to_json(*profile).dump(2) << "\n";
  if (!out) return fail(kCommand, absl::UnavailableError(str_cat("cannot write ", *out_path)));
  std::fprintf(stderr, "%s: wrote %s\n", kCommand, out_path->c_str());
  return 0;
}

// --- baton plan simulate ----------------------------------------------------------------------

const std::vector<FlagSpec>& simulate_flags() {
  static const std::vector<FlagSpec> flags = with(
      {
          {"profile", "FILE", "a profile from `baton plan profile` (required)"},
          {"prefill", "N", "prefill nodes (default 1, at most 64; 0: decode nodes prefill locally)"},
          {"decode", "M", "decode nodes (default 1, at most 64)"},
          {"k", "K", "drafts per step (default: the largest the profile measured)"},
          {"host-cores", "C", "every node on one machine with C cores (as `baton up` runs them); default 0: a "
                              "machine per node"},
          {"sim-seed", "S", "seed of the simulated acceptance (default 0)"},
          {"json", "FILE", "write the prediction as `baton bench serve --json` writes a measurement"},
          {"help", "", "show this help"},
      },
      trace_flags());
  return flags;
}

absl::StatusOr<Candidate> candidate_from_flags(const ParsedFlags& f, const DeploymentProfile& profile) {
  Candidate c;
  BATON_ASSIGN_OR_RETURN(c.num_prefill, positive_int(f, "prefill", 1, 0));
  BATON_ASSIGN_OR_RETURN(c.num_decode, positive_int(f, "decode", 1));
  // The search's bound per pool: the simulation allocates per node, and no planned deployment is
  // larger.
  for (const auto& [name, n] : {std::pair<const char*, int>{"prefill", c.num_prefill}, {"decode", c.num_decode}}) {
    if (n > kMaxPlannedNodesPerPool) {
      return absl::InvalidArgumentError(str_cat("--", name, " is ", n, "; at most ", kMaxPlannedNodesPerPool,
                                                " nodes per pool are simulated"));
    }
  }
  BATON_ASSIGN_OR_RETURN(c.k, positive_int(f, "k", profile.measured_ks().back(), 0));
  BATON_ASSIGN_OR_RETURN(c.host_cores, positive_int(f, "host-cores", 0, 0));
  BATON_ASSIGN_OR_RETURN(auto seed, f.get_int("sim-seed"));
  if (seed) c.seed = static_cast<std::uint64_t>(*seed);
  return c;
}

int simulate_main(int argc, char** argv) {
  constexpr const char* kCommand = "baton plan simulate";
  constexpr const char* kSynopsis =
      "--profile FILE [--prefill N] [--decode M] [--k K] [--host-cores C] [trace flags]\n\n"
      "Predicts what `baton bench serve` would measure for this trace on one deployment, from a profile.";
  auto parsed = parse_flags(simulate_flags(), argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n\n%s", kCommand, std::string(parsed.status().message()).c_str(),
                 usage(kCommand, kSynopsis, simulate_flags()).c_str());
    return 2;
  }
  const ParsedFlags& f = *parsed;
  if (f.has("help")) {
    std::printf("%s", usage(kCommand, kSynopsis, simulate_flags()).c_str());
    return 0;
  }
  auto path = f.get("profile");
  if (!path) return fail(kCommand, absl::InvalidArgumentError("--profile FILE is required"));
  auto profile = read_profile(*path);
  if (!profile.ok()) return fail(kCommand, profile.status());
  auto candidate = candidate_from_flags(f, *profile);
  if (!candidate.ok()) return fail(kCommand, candidate.status());
  auto trace = trace_from_flags(f, *profile);
  if (!trace.ok()) return fail(kCommand, trace.status());
  auto sim = simulate(*profile, *trace, *candidate);
  if (!sim.ok()) return fail(kCommand, sim.status());
  ServeSummary s = summarize_simulation(*sim, *trace);
  s.label = str_cat("predicted P", candidate->num_prefill, " D", candidate->num_decode, " k", candidate->k);
  // The simulation has no token messages, so inter-token latency is left out rather than shown as 0.
  std::istringstream table(summary_table(s));
  for (std::string line; std::getline(table, line);) {
    if (line.find("ITL") == std::string::npos && line.find("Inter-token") == std::string::npos) {
      std::printf("%s\n", line.c_str());
    }
  }
  if (auto out_path = f.get("json")) {
    json all = json::array({summary_json(s)});
    all[0].erase("itl");
    all[0]["prefill_nodes"] = candidate->num_prefill;
    all[0]["decode_nodes"] = candidate->num_decode;
    all[0]["k"] = candidate->k;
    std::ofstream out(*out_path);
    out << all.dump(2) << "\n";
    if (!out) return fail(kCommand, absl::UnavailableError(str_cat("cannot write ", *out_path)));
  }
  return 0;
}

// --- baton plan -------------------------------------------------------------------------------

const std::vector<FlagSpec>& plan_flags() {
  static const std::vector<FlagSpec> flags = with(
      {
          {"profile", "FILE", "a profile from `baton plan profile` (required)"},
          {"ttft-ms", "MS", "TTFT target (required)"},
          {"tpot-ms", "MS", "TPOT target (required)"},
          {"percentile", "P", "which statistic must meet the targets: mean, 50, 90 or 99 (default 90)"},
          {"max-prefill", "N", "largest prefill pool tried (default 8, at most 64; 0 is always tried: colocated)"},
          {"max-decode", "M", "largest decode pool tried (default 8, at most 64)"},
          {"ks", "K[,K...]", "k values tried (default: every k the profile measured)"},
          {"host-cores", "C", "every node on one machine with C cores (default 0: a machine per node)"},
          {"json", "FILE", "write every candidate's prediction as JSON"},
          {"help", "", "show this help"},
      },
      trace_flags());
  return flags;
}

int plan_search_main(int argc, char** argv) {
  constexpr const char* kCommand = "baton plan";
  constexpr const char* kSynopsis =
      "--profile FILE --ttft-ms MS --tpot-ms MS [--percentile 90] [trace flags]\n"
      "       baton plan profile --out FILE [engine flags] [--endpoint HOST:PORT]\n"
      "       baton plan simulate --profile FILE [--prefill N] [--decode M] [--k K] [trace flags]\n\n"
      "Simulates the trace through every P:D ratio and k up to the limits with the profile's measured\n"
      "speeds, prints each candidate's predicted TTFT and TPOT, and the cheapest (fewest nodes, then\n"
      "lowest TPOT) that meets both targets, as values for the Helm chart.";
  auto parsed = parse_flags(plan_flags(), argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n\n%s", kCommand, std::string(parsed.status().message()).c_str(),
                 usage(kCommand, kSynopsis, plan_flags()).c_str());
    return 2;
  }
  const ParsedFlags& f = *parsed;
  if (f.has("help")) {
    std::printf("%s", usage(kCommand, kSynopsis, plan_flags()).c_str());
    return 0;
  }
  auto path = f.get("profile");
  auto ttft = f.get_double("ttft-ms");
  auto tpot = f.get_double("tpot-ms");
  if (!path || !ttft.ok() || !tpot.ok() || !*ttft || !*tpot || !(**ttft > 0) || !(**tpot > 0)) {
    return fail(kCommand, absl::InvalidArgumentError("--profile FILE, --ttft-ms MS and --tpot-ms MS (positive) are required"));
  }
  int percentile = 90;
  if (auto p = f.get("percentile")) {
    if (*p == "mean") {
      percentile = 0;
    } else if (!absl::SimpleAtoi(*p, &percentile) || (percentile != 50 && percentile != 90 && percentile != 99)) {
      return fail(kCommand, absl::InvalidArgumentError("--percentile must be mean, 50, 90 or 99"));
    }
  }
  auto profile = read_profile(*path);
  if (!profile.ok()) return fail(kCommand, profile.status());
  auto max_prefill = positive_int(f, "max-prefill", 8, 0);
  auto max_decode = positive_int(f, "max-decode", 8);
  auto ks = int_list(f, "ks", profile->measured_ks(), 0);
  auto host_cores = positive_int(f, "host-cores", 0, 0);
  for (const absl::Status& s : {max_prefill.status(), max_decode.status(), ks.status(), host_cores.status()}) {
    if (!s.ok()) return fail(kCommand, s);
  }
  auto trace = trace_from_flags(f, *profile);
  if (!trace.ok()) return fail(kCommand, trace.status());

  SearchTargets targets{**ttft, **tpot, percentile};
  SearchLimits limits{*max_prefill, *max_decode, *ks, *host_cores};
  auto search = search_deployments(*profile, *trace, targets, limits);
  if (!search.ok()) return fail(kCommand, search.status());

  const std::string stat = percentile == 0 ? "mean" : str_cat("p", percentile);
  std::printf("%-8s %-8s %-4s %14s %14s %10s\n", "prefill", "decode", "k", str_cat("ttft ", stat, " ms").c_str(),
              str_cat("tpot ", stat, " ms").c_str(), "meets");
  json all = json::array();
  for (const CandidateOutcome& o : search->tried) {
    std::printf("%-8d %-8d %-4d %14.1f %14.2f %10s\n", o.candidate.num_prefill, o.candidate.num_decode, o.candidate.k,
                o.ttft_ms, o.tpot_ms, o.meets ? "yes" : "no");
    json j = summary_json(o.summary);
    j.erase("itl");
    j["prefill_nodes"] = o.candidate.num_prefill;
    j["decode_nodes"] = o.candidate.num_decode;
    j["k"] = o.candidate.k;
    j["meets_targets"] = o.meets;
    all.push_back(j);
  }
  std::optional<Candidate> best;
  if (search->best) best = search->tried[*search->best].candidate;
  if (auto out_path = f.get("json")) {
    std::ofstream out(*out_path);
    out << all.dump(2) << "\n";
    if (!out) return fail(kCommand, absl::UnavailableError(str_cat("cannot write ", *out_path)));
  }
  if (!best) {
    std::printf("\nno candidate up to %d prefill and %d decode nodes meets TTFT %s <= %g ms and TPOT %s <= %g ms\n",
                *max_prefill, *max_decode, stat.c_str(), **ttft, stat.c_str(), **tpot);
    return 3;
  }
  std::printf("\ncheapest: %d prefill + %d decode node(s), k = %d\n\n# values for deploy/k8s/helm/baton\n%s",
              best->num_prefill, best->num_decode, best->k, chart_values(*profile, *best).c_str());
  return 0;
}

}  // namespace

int plan_main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "profile") return profile_main(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "simulate") return simulate_main(argc - 1, argv + 1);
  return plan_search_main(argc, argv);
}

}  // namespace baton::cli
