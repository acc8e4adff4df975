#include "cli/verify_lossless.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "cli/bundled_files.h"
#include "cli/prompt_sets.h"
#include "cli/report.h"
#include "cli/verify_checks.h"
#include "common/flags.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/grpc_status_name.h"
#include "security/api_keys.h"
#include "security/public_api_channel.h"

namespace baton::cli {
namespace {

using nlohmann::json;

const std::vector<FlagSpec>& verify_flags() {
  static const std::vector<FlagSpec> flags = {
      {"endpoint", "HOST:PORT", "the router to check (required); an API key is read from BATON_API_KEY"},
      {"tls-ca", "FILE", "TLS, verifying the router's certificate with this CA (e.g. `baton up --tls`'s ca.pem)"},
      {"prompts", "FILE", "greedy prompts, JSON Lines (.gz too): \"prompt\", \"text\" or \"turns\" (default: "
                          "bench/data HumanEval and Spec-Bench, interleaved)"},
      {"num-prompts", "N", "greedy prompts to compare (default 32; 0: skip the greedy check)"},
      {"max-tokens", "N", "tokens per greedy completion (default 64)"},
      {"samples", "N", "sampled completions per prompt, with and without speculation each (default 1000; 0: skip)"},
      {"sample-prompts", "N", "short code prompts of the sampled check, 1-4 (default 4)"},
      {"sample-tokens", "N", "generated tokens 2..N form one category, jointly (default 3; the 1st comes from prefill)"},
      {"temperature", "T", "sampled check temperature (default 1.0)"},
      {"seed", "S", "first seed of the sampled check (default 0)"},
      {"alpha", "A", "fail when the chi-square p-value is below this (default 0.001)"},
      {"concurrency", "N", "requests in flight (default 32)"},
      {"timeout-ms", "MS", "deadline of each request (default 120000)"},
      {"json", "FILE", "also write the report as JSON to FILE ('-' for stdout)"},
      {"help", "", "show this help"},
  };
  return flags;
}

constexpr const char* kSynopsis =
    "--endpoint HOST:PORT [--prompts FILE] [--num-prompts N] [--max-tokens N] [--samples N] [--alpha A] [--json FILE]\n\n"
    "Checks that a running deployment's speculative decoding is lossless: every prompt is sent with\n"
    "speculation on and off (the request's max_speculative_tokens = 0), from the same deployment.\n"
    "Greedy: the tokens must be identical. Sampled: the joint distribution of the first tokens over\n"
    "many seeds must pass a chi-square homogeneity test at --alpha. Prints PASS or FAIL.\n"
    "Exit: 0 pass, 1 fail, 2 usage error.";

struct Settings {
  std::string endpoint;
  std::string ca_file;
  std::optional<std::string> prompts_file, json_file;
  int num_prompts = 32, sample_prompts = 4;
  double alpha = 0.001;
  VerifyOptions verify;
};

absl::Status int_flag(const ParsedFlags& f, const char* name, int lo, int hi, int* out) {
  BATON_ASSIGN_OR_RETURN(auto v, f.get_int(name));
  if (!v) return absl::OkStatus();
  if (*v < lo || *v > hi) return absl::InvalidArgumentError(str_cat("--", name, " must be in [", lo, ", ", hi, "], got ", *v));
  *out = static_cast<int>(*v);
  return absl::OkStatus();
}

absl::StatusOr<Settings> settings_from_flags(const ParsedFlags& f) {
  Settings s;
  if (!f.has("endpoint")) return absl::InvalidArgumentError("--endpoint HOST:PORT is required");
  s.endpoint = *f.get("endpoint");
  s.ca_file = f.get("tls-ca").value_or("");
  s.prompts_file = f.get("prompts");
  s.json_file = f.get("json");
  BATON_RETURN_IF_ERROR(int_flag(f, "num-prompts", 0, 100000, &s.num_prompts));
  BATON_RETURN_IF_ERROR(int_flag(f, "max-tokens", 1, 1 << 20, &s.verify.max_tokens));
  BATON_RETURN_IF_ERROR(int_flag(f, "samples", 0, 10000000, &s.verify.samples));
  BATON_RETURN_IF_ERROR(int_flag(f, "sample-prompts", 1, static_cast<int>(default_sample_prompts().size()), &s.sample_prompts));
  BATON_RETURN_IF_ERROR(int_flag(f, "sample-tokens", 2, 64, &s.verify.sample_tokens));
  BATON_RETURN_IF_ERROR(int_flag(f, "concurrency", 1, 4096, &s.verify.concurrency));
  int timeout_ms = 120000;
  BATON_RETURN_IF_ERROR(int_flag(f, "timeout-ms", 1, 1 << 30, &timeout_ms));
  s.verify.timeout = std::chrono::milliseconds(timeout_ms);
  BATON_ASSIGN_OR_RETURN(auto t, f.get_double("temperature"));
  if (t) {
    if (!(*t > 1e-5 && *t <= 100)) return absl::InvalidArgumentError(str_cat("--temperature must be in (1e-5, 100], got ", *t));
    s.verify.temperature = static_cast<float>(*t);
  }
  BATON_ASSIGN_OR_RETURN(auto a, f.get_double("alpha"));
  if (a) {
    if (!(*a > 0 && *a < 1)) return absl::InvalidArgumentError(str_cat("--alpha must be in (0, 1), got ", *a));
    s.alpha = *a;
  }
  BATON_ASSIGN_OR_RETURN(auto seed, f.get_int("seed"));
  if (seed) s.verify.seed = static_cast<std::uint64_t>(*seed);
  if (s.num_prompts == 0 && s.verify.samples == 0) {
    return absl::InvalidArgumentError("--num-prompts 0 and --samples 0 leave nothing to check");
  }
  return s;
}

json token_json(const std::optional<std::int32_t>& t) { return t ? json(*t) : json(nullptr); }

json speculation_json(const SpeculationSeen& s) {
  return {{"num_drafts", s.drafts},
          {"num_draft_tokens", s.draft_tokens},
          {"num_accepted_tokens", s.accepted_tokens},
          {"acceptance_rate", s.acceptance_rate()},
          {"draft_tokens_without_speculation", s.off_draft_tokens},
          {"lossy_responses", s.lossy_responses}};
}

json test_json(const HomogeneityTest& t) {
  return {{"statistic", t.statistic}, {"dof", t.dof}, {"p_value", t.p_value}, {"bins", t.bins}};
}

// The lossy verification rule a deployment's speculative config (ModelInfo's JSON) names, or "".
std::string lossy_rule(const std::string& speculative_config) {
  const json j = json::parse(speculative_config, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  const auto rs = j.find("rejection_sampler_config");
  if (rs == j.end() || !rs->is_object()) return "";
  const auto entropy = rs->find("enable_entropy_verify");
  if (entropy == rs->end() || !entropy->is_boolean() || !entropy->get<bool>()) return "";
  return "entropy verification (rejection_sampler_config.enable_entropy_verify)";
}

std::string token_text(const std::optional<std::int32_t>& t) { return t ? std::to_string(*t) : std::string("(end)"); }

}  // namespace

int verify_lossless_main(int argc, char** argv) {
  auto parsed = parse_flags(verify_flags(), argc, argv);
  const auto usage_error = [](const absl::Status& s) {
    std::fprintf(stderr, "baton verify-lossless: %s\n\n%s", std::string(s.message()).c_str(),
                 usage("baton verify-lossless", kSynopsis, verify_flags()).c_str());
    return 2;
  };
  if (!parsed.ok()) return usage_error(parsed.status());
  if (parsed->has("help")) {
    std::printf("%s", usage("baton verify-lossless", kSynopsis, verify_flags()).c_str());
    return 0;
  }
  auto settings = settings_from_flags(*parsed);
  if (!settings.ok()) return usage_error(settings.status());
  Settings& s = *settings;

  std::vector<std::string> prompts;
  if (s.num_prompts > 0) {
    absl::StatusOr<std::vector<std::string>> loaded = absl::InternalError("unset");
    if (s.prompts_file) {
      loaded = load_prompt_file(*s.prompts_file);
    } else if (absl::StatusOr<std::string> data = bundled_prompt_data(); data.ok()) {
      loaded = default_prompt_set(*data, s.num_prompts);
    } else {
      loaded = data.status();
    }
    if (!loaded.ok()) return usage_error(loaded.status());
    prompts = std::move(*loaded);
    if (static_cast<int>(prompts.size()) > s.num_prompts) prompts.resize(static_cast<std::size_t>(s.num_prompts));
    if (prompts.empty()) return usage_error(absl::InvalidArgumentError("the prompt file holds no prompts"));
  }

  auto channel = security::public_api_channel(s.endpoint, s.ca_file, security::api_key_from_environment());
  if (!channel.ok()) return usage_error(channel.status());
  auto stub = v1::Baton::NewStub(*channel);
  v1::ModelInfo info;
  {
    // A router that is not there is a clear error now, not a minute of failed requests and then a
    // verdict about speculation.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status reached = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
    if (!reached.ok()) {
      std::fprintf(stderr, "baton verify-lossless: %s: cannot reach the router: %s: %s\n", s.endpoint.c_str(),
                   grpc_code_name(reached.error_code()).c_str(), reached.error_message().c_str());
      return 1;
    }
  }
  std::printf("verifying %s: greedy and sampled output with speculation against without (this takes a while)\n",
              s.endpoint.c_str());
  std::fflush(stdout);
  // Progress on stderr (stdout may carry --json -): a line per tenth of each check.
  const auto started = std::chrono::steady_clock::now();
  s.verify.progress = [started](std::string_view check, int done, int total) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fprintf(stderr, "  %.*s: %d/%d requests done (%d %%), %.0f s\n", static_cast<int>(check.size()), check.data(),
                 done, total, 100 * done / total, elapsed);
  };
  std::vector<std::string> failures;  // why the verdict is FAIL
  json report = {{"endpoint", s.endpoint}};
  // A deployment configured with a lossy rule fails whatever the samples show: the statistics
  // below can miss a small bias, the configuration cannot.
  if (const std::string rule = lossy_rule(info.speculative_config()); !rule.empty()) {
    std::printf("configuration: the decode nodes verify drafts with %s, which is lossy by design\n", rule.c_str());
    failures.push_back(str_cat("the deployment is configured lossy (", rule, ")"));
  }
  SpeculationSeen seen;

  if (!prompts.empty()) {
    const GreedyReport g = run_greedy_check(*stub, prompts, s.verify);
    seen.add(g.speculation);
    std::printf("greedy: %d prompts compared (%d skipped: refused by the router), %lld tokens each way, max %d tokens; "
                "%d differ\n",
                g.prompts_compared, g.prompts_skipped, static_cast<long long>(g.tokens_compared), s.verify.max_tokens,
                g.mismatched_prompts);
    json gj = {{"prompts_compared", g.prompts_compared}, {"prompts_skipped", g.prompts_skipped},
               {"tokens_compared", g.tokens_compared},   {"max_tokens", s.verify.max_tokens},
               {"mismatched_prompts", g.mismatched_prompts}, {"errors", g.errors},
               {"first_mismatch", nullptr}};
    if (g.first_mismatch) {
      const GreedyMismatch& m = *g.first_mismatch;
      std::printf("  first mismatch: prompt %d, generated token %d: %s with speculation, %s without\n", m.prompt_index,
                  m.position, token_text(m.with_spec).c_str(), token_text(m.without_spec).c_str());
      gj["first_mismatch"] = {{"prompt_index", m.prompt_index}, {"position", m.position},
                              {"with_speculation", token_json(m.with_spec)},
                              {"without_speculation", token_json(m.without_spec)}};
      failures.push_back(str_cat("greedy output differs on ", g.mismatched_prompts, " of ", g.prompts_compared, " prompts"));
    }
    for (const std::string& e : g.errors) std::printf("  error: %s\n", e.c_str());
    if (!g.errors.empty()) failures.push_back(str_cat(g.errors.size(), " greedy requests failed"));
    if (g.prompts_compared == 0 && g.errors.empty()) failures.push_back("no greedy prompt could be compared");
    report["greedy"] = gj;
  }

  if (s.verify.samples > 0) {
    std::vector<std::string> sp = default_sample_prompts();
    sp.resize(static_cast<std::size_t>(s.sample_prompts));
    const SampledReport r = run_sampled_check(*stub, sp, s.verify);
    seen.add(r.speculation);
    std::printf("sampled: %d prompts x %d samples each way, temperature %g, tokens 2..%d jointly: chi-square %.3f, "
                "dof %d, p-value %.4g (alpha %g)\n",
                r.prompts, r.samples, static_cast<double>(s.verify.temperature), s.verify.sample_tokens,
                r.test.statistic, r.test.dof, r.test.p_value, s.alpha);
    json per = json::array();
    for (const HomogeneityTest& t : r.per_prompt) per.push_back(test_json(t));
    json sj = test_json(r.test);
    sj.update({{"prompts", r.prompts}, {"samples", r.samples}, {"temperature", s.verify.temperature},
               {"sample_tokens", s.verify.sample_tokens}, {"alpha", s.alpha}, {"per_prompt", per},
               {"errors", r.errors}});
    for (const std::string& e : r.errors) std::printf("  error: %s\n", e.c_str());
    if (!r.errors.empty()) failures.push_back(str_cat(r.errors.size(), " sampled requests failed"));
    if (r.test.dof == 0 && r.errors.empty()) {
      std::printf("  note: every sample fell into one category; nothing to compare (raise --temperature?)\n");
    }
    if (r.test.p_value < s.alpha) {
      failures.push_back(str_cat("sampled distributions differ: p-value ", r.test.p_value, " < alpha ", s.alpha));
    }
    report["sampled"] = sj;
  }

  std::printf("speculation seen: %lld draft tokens, %lld accepted (acceptance rate %s)\n",
              static_cast<long long>(seen.draft_tokens), static_cast<long long>(seen.accepted_tokens),
              percent_text(seen.acceptance_rate()).c_str());
  if (seen.off_draft_tokens > 0) {
    failures.push_back(str_cat("requests with max_speculative_tokens = 0 still drafted ", seen.off_draft_tokens,
                               " tokens: the deployment ignores the cap, so on and off were not compared"));
  }
  if (seen.lossy_responses > 0) {
    failures.push_back(str_cat(seen.lossy_responses, " responses with speculation were marked lossy (entropy verification)"));
  }
  if (seen.draft_tokens == 0) {
    std::printf("  note: the deployment verified no draft tokens (no speculation configured?): the check is vacuous\n");
  }
  report["speculation"] = speculation_json(seen);
  report["verdict"] = failures.empty() ? "PASS" : "FAIL";
  report["failures"] = failures;
  if (failures.empty()) {
    std::printf("PASS: speculative decoding at %s is lossless on this check\n", s.endpoint.c_str());
  } else {
    std::printf("FAIL:");
    for (std::size_t i = 0; i < failures.size(); ++i) std::printf("%s %s", i ? ";" : "", failures[i].c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
  if (s.json_file) {
    const std::string text = report.dump(2) + "\n";
    if (*s.json_file == "-") {
      std::cout << text << std::flush;
    } else {
      std::ofstream out(*s.json_file);
      out << text;
      if (!out) {
        std::fprintf(stderr, "baton verify-lossless: cannot write %s\n", s.json_file->c_str());
        return 1;
      }
    }
  }
  return failures.empty() ? 0 : 1;
}

}  // namespace baton::cli
