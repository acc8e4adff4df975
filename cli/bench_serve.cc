#include "cli/bench_serve.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli/serve_backend.h"
#include "cli/serve_dataset.h"
#include "cli/serve_metrics.h"
#include "cli/serve_plot.h"
#include "cli/serve_runner.h"
#include "common/flags.h"
#include "common/status.h"
#include "security/api_keys.h"

namespace baton::cli {

namespace {

const std::vector<FlagSpec>& serve_flags() {
  static const std::vector<FlagSpec> flags = {
      {"endpoint", "HOST:PORT", "a router's gRPC address (the default backend)"},
      {"base-url", "URL", "an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (backend openai)"},
      {"backend", "B", "grpc, openai (/v1/completions; chat prompts use chat) or openai-chat (default: from the address given)"},
      {"tls-ca", "FILE", "verify the server's TLS certificate with this CA (e.g. `baton up --tls`'s ca.pem); the API "
                         "key, if any, comes from BATON_API_KEY"},
      {"dataset", "NAME", "humaneval (default), spec-bench, random, or jsonl with --dataset-path"},
      {"dataset-path", "FILE", "the prompt file (.jsonl or .jsonl.gz); default: the copy in bench/data"},
      {"field", "NAME", "jsonl: the field holding each prompt (default prompt)"},
      {"num-prompts", "N", "requests to send (default 100; prompts repeat when the file has fewer)"},
      {"random-input-len", "N", "random: prompt length in tokens (default 128)"},
      {"max-tokens", "N", "output tokens per request (default 128)"},
      {"ignore-eos", "", "generate max-tokens tokens whatever the model says"},
      {"temperature", "T", "sampling temperature (default 0: greedy)"},
      {"seed", "S", "seed of the arrival times, random prompts and (when not 0) the requests' sampling (default 0)"},
      {"request-rate", "R[,R...]", "requests per second, Poisson arrivals; inf sends all at once (default inf); "
                                   "several rates run one after another"},
      {"max-concurrency", "N", "at most N requests in flight (default: no limit)"},
      {"goodput", "SPEC", "targets for goodput in ms, e.g. ttft:500,tpot:50 (keys ttft, tpot, e2el)"},
      {"label", "NAME", "a name recorded with the results"},
      {"json", "FILE", "write the results as JSON (one object per rate, in a list)"},
      {"plot", "FILE.png", "draw latency percentiles vs request rate (needs several rates; gnuplot)"},
      {"no-progress", "", "no progress bar on stderr"},
      {"help", "", "show this help"},
  };
  return flags;
}

constexpr const char* kSynopsis =
    "(--endpoint HOST:PORT | --base-url URL) [--dataset humaneval|spec-bench|random|jsonl] [--num-prompts N]\n"
    "       [--request-rate R[,R...]] [--max-concurrency N] [--max-tokens N] [--goodput ttft:MS,tpot:MS] [--json FILE]\n\n"
    "Sends the prompts to a running deployment (the router's gRPC API or the OpenAI HTTP API) at the\n"
    "given request rate and reports TTFT, TPOT, inter-token latency, end-to-end latency, throughput,\n"
    "goodput and the speculation acceptance the server reported. Start a deployment with `baton up`.";

int fail(const absl::Status& s) {
  std::fprintf(stderr, "baton bench serve: %s\n", std::string(s.message()).c_str());
  return 1;
}

absl::StatusOr<std::vector<double>> parse_rates(const std::string& spec) {
  std::vector<double> rates;
  for (absl::string_view r : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    double v = 0;
    if (r == "inf") {
      v = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(r, &v) || !(v > 0)) {
      return absl::InvalidArgumentError(str_cat("--request-rate: '", r, "' is not a positive number or inf"));
    }
    rates.push_back(v);
  }
  if (rates.empty()) return absl::InvalidArgumentError("--request-rate: no rate given");
  return rates;
}

template <typename T>
absl::Status read_positive(const ParsedFlags& f, const std::string& name, T* out) {
  BATON_ASSIGN_OR_RETURN(auto v, f.get_int(name));
  if (!v) return absl::OkStatus();
  if (*v <= 0) return absl::InvalidArgumentError(str_cat("--", name, " must be positive, got ", *v));
  *out = static_cast<T>(*v);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServeBackend>> backend_from_flags(const ParsedFlags& f) {
  const bool grpc = f.has("endpoint"), http = f.has("base-url");
  if (grpc == http) return absl::InvalidArgumentError("give exactly one of --endpoint (gRPC) and --base-url (OpenAI HTTP)");
  const std::string backend = f.get("backend").value_or(grpc ? "grpc" : "openai");
  if (backend == "grpc") {
    if (!grpc) return absl::InvalidArgumentError("--backend grpc needs --endpoint HOST:PORT");
    return make_grpc_backend(*f.get("endpoint"), f.get("tls-ca").value_or(""), security::api_key_from_environment());
  }
  if (backend == "openai" || backend == "openai-chat") {
    if (!http) return absl::InvalidArgumentError(str_cat("--backend ", backend, " needs --base-url URL"));
    return make_openai_backend(*f.get("base-url"), backend == "openai-chat", f.get("tls-ca").value_or(""),
                               security::api_key_from_environment());
  }
  return absl::InvalidArgumentError(str_cat("unknown --backend '", backend, "' (grpc, openai or openai-chat)"));
}

}  // namespace

int bench_serve_main(int argc, char** argv) {
  auto flags = parse_flags(serve_flags(), argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "baton bench serve: %s\n\n%s", std::string(flags.status().message()).c_str(),
                 usage("baton bench serve", kSynopsis, serve_flags()).c_str());
    return 2;
  }
  const ParsedFlags& f = *flags;
  if (f.has("help")) {
    std::printf("%s", usage("baton bench serve", kSynopsis, serve_flags()).c_str());
    return 0;
  }
  auto backend = backend_from_flags(f);
  if (!backend.ok()) return fail(backend.status());

  DatasetOptions data;
  data.dataset = f.get("dataset").value_or("humaneval");
  data.path = f.get("dataset-path").value_or("");
  data.field = f.get("field").value_or("prompt");
  ServeSampling sampling;
  LoadOptions load;
  std::vector<double> rates = {std::numeric_limits<double>::infinity()};
  GoodputTargets targets;
  {
    absl::Status s = read_positive(f, "num-prompts", &data.num_prompts);
    if (s.ok()) s = read_positive(f, "random-input-len", &data.random_input_len);
    if (s.ok()) s = read_positive(f, "max-tokens", &sampling.max_tokens);
    if (s.ok()) s = read_positive(f, "max-concurrency", &load.max_concurrency);
    if (!s.ok()) return fail(s);
    auto seed = f.get_int("seed");
    if (!seed.ok()) return fail(seed.status());
    if (*seed) data.seed = load.seed = sampling.seed = static_cast<std::uint64_t>(**seed);
    auto temperature = f.get_double("temperature");
    if (!temperature.ok()) return fail(temperature.status());
    if (*temperature) {
      if (**temperature < 0) return fail(absl::InvalidArgumentError("--temperature must be >= 0"));
      sampling.temperature = static_cast<float>(**temperature);
    }
    sampling.ignore_eos = f.has("ignore-eos");
    load.progress = !f.has("no-progress");
    if (auto r = f.get("request-rate")) {
      auto parsed = parse_rates(*r);
      if (!parsed.ok()) return fail(parsed.status());
      rates = *parsed;
    }
    if (auto g = f.get("goodput")) {
      auto parsed = parse_goodput(*g);
      if (!parsed.ok()) return fail(parsed.status());
      targets = *parsed;
    }
    if (f.has("plot") && rates.size() < 2) {
      return fail(absl::InvalidArgumentError("--plot needs several --request-rate values (e.g. 1,2,4,inf)"));
    }
  }

  auto info = (*backend)->model_info();
  if (!info.ok()) return fail(info.status());
  data.vocab_size = info->vocab_size;
  auto prompts = load_serve_prompts(data);
  if (!prompts.ok()) return fail(prompts.status());

  // One request first, as a check that the deployment answers (not counted).
  ServeResult probe = (*backend)->send((*prompts)[0], sampling);
  if (!probe.ok) return fail(absl::UnavailableError(str_cat("the test request failed: ", probe.error)));
  std::fprintf(stderr, "baton bench serve: model %s, %zu prompts (%s), %d output tokens max\n", info->model.c_str(),
               prompts->size(), data.dataset.c_str(), sampling.max_tokens);

  std::vector<ServeSummary> summaries;
  bool any_failed = false;
  for (double rate : rates) {
    load.request_rate = rate;
    LoadRun run = run_load(**backend, *prompts, sampling, load);
    ServeSummary s = summarize(run.results, run.duration_s, targets);
    s.label = f.get("label").value_or("");
    s.request_rate = rate;
    s.max_concurrency = load.max_concurrency;
    any_failed = any_failed || s.failed > 0;
    std::printf("%s", summary_table(s).c_str());
    std::fflush(stdout);
    summaries.push_back(std::move(s));
  }

  if (auto path = f.get("json")) {
    nlohmann::json all = nlohmann::json::array();
    for (const ServeSummary& s : summaries) all.push_back(summary_json(s));
    std::ofstream out(*path);
    out << all.dump(2) << "\n";
    if (!out) return fail(absl::UnavailableError(str_cat("cannot write ", *path)));
    std::fprintf(stderr, "baton bench serve: results in %s\n", path->c_str());
  }
  if (auto png = f.get("plot")) {
    if (absl::Status s = plot_latency_vs_rate(summaries, *png); !s.ok()) return fail(s);
    std::fprintf(stderr, "baton bench serve: plot in %s\n", png->c_str());
  }
  return any_failed ? 1 : 0;
}

int bench_main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) return bench_serve_main(argc - 1, argv + 1);
  std::fprintf(stderr,
               "usage: baton bench serve [flags]   (load-test a running deployment; --help for its flags)\n");
  return argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) ? 0 : 2;
}

}  // namespace baton::cli
