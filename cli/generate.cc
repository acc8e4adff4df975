#include "cli/generate.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "absl/strings/numbers.h"
#include "cli/generate_batch.h"
#include "cli/generate_remote.h"
#include "cli/report.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/engine.h"
#include "engine/model/config.h"
#include "node_common/engine_flags.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template_arg.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_text_decoder.h"

namespace baton::cli {
namespace {

std::vector<FlagSpec> generate_flags() {
  std::vector<FlagSpec> f = {
      {"endpoint", "HOST:PORT", "send the prompt to a Baton router (e.g. from `baton up`) instead of running the model here; "
                                "an API key is read from BATON_API_KEY"},
      {"tls-ca", "FILE", "with --endpoint: TLS, verifying the router's certificate with this CA (e.g. the ca.pem "
                         "`baton up --tls` prints)"},
      {"prompt", "TEXT", "prompt text (needs tokenizer files in the model directory)"},
      {"prompt-tokens", "IDS", "prompt as comma-separated token ids, e.g. 1,2,3"},
      {"prompts-file", "FILE", "JSONL, one {\"prompt\" or \"prompt_tokens\", optional \"seed\", \"max_tokens\", \"temperature\"} "
                               "a line: run all through one engine (continuous batching)"},
      {"chat", "JSON", "messages, e.g. '[{\"role\":\"user\",\"content\":\"hi\"}]', rendered with the model's chat template"},
      {"chat-template", "FILE|TEMPLATE", "a Jinja chat template (a file, or the template itself) instead of the "
                                         "model's tokenizer_config.json one"},
      {"stop", "TEXT", "stop when the output contains TEXT (not included in the output)"},
      {"max-tokens", "N", "tokens to generate at most (default 64)"},
      {"temperature", "T", "0 = greedy (default 0)"},
      {"top-k", "K", "keep the K most likely tokens (0 = off)"},
      {"top-p", "P", "nucleus sampling threshold (1 = off)"},
      {"min-p", "P", "drop tokens below P x the top probability (0 = off)"},
      {"repetition-penalty", "R", "HF-style repetition penalty (1 = off)"},
      {"presence-penalty", "X", "OpenAI-style presence penalty (0 = off)"},
      {"frequency-penalty", "X", "OpenAI-style frequency penalty (0 = off)"},
      {"seed", "S", "seed of this request's sampling"},
      {"ignore-eos", "", "keep generating after EOS"},
      {"logprobs", "N", "report the sampled token's logprob and the top N (with --json)"},
      {"output", "FORMAT", "text or token-ids (default: text when a tokenizer exists)"},
      {"json", "", "print one JSON object on stdout"},
  };
  const std::vector<FlagSpec>& engine = engine_flags();
  f.insert(f.end(), engine.begin(), engine.end());
  f.push_back({"log-level", "LEVEL", "trace, debug, info, warn, error (default warn)"});
  f.push_back({"help", "", "show this help"});
  return f;
}

const std::vector<FlagSpec> kFlags = generate_flags();

constexpr const char* kSynopsis =
    "(--model DIR | --endpoint HOST:PORT) (--prompt TEXT | --chat JSON | --prompt-tokens 1,2,3 | --prompts-file FILE.jsonl) [flags]";

absl::StatusOr<std::vector<std::int32_t>> parse_ids(const std::string& s) {
  std::vector<std::int32_t> ids;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    int v = 0;
    if (!absl::SimpleAtoi(item, &v)) {
      return absl::InvalidArgumentError(str_cat("--prompt-tokens: '", item, "' is not a token id"));
    }
    ids.push_back(v);
    pos = comma + 1;
  }
  return ids;
}

absl::Status apply_float(const ParsedFlags& f, const std::string& name, float* out) {
  BATON_ASSIGN_OR_RETURN(auto v, f.get_double(name));
  if (v) *out = static_cast<float>(*v);
  return absl::OkStatus();
}

absl::StatusOr<SamplingParams> sampling_from_flags(const ParsedFlags& f) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 64;
  BATON_RETURN_IF_ERROR(apply_float(f, "temperature", &p.temperature));
  BATON_RETURN_IF_ERROR(apply_float(f, "top-p", &p.top_p));
  BATON_RETURN_IF_ERROR(apply_float(f, "min-p", &p.min_p));
  BATON_RETURN_IF_ERROR(apply_float(f, "repetition-penalty", &p.repetition_penalty));
  BATON_RETURN_IF_ERROR(apply_float(f, "presence-penalty", &p.presence_penalty));
  BATON_RETURN_IF_ERROR(apply_float(f, "frequency-penalty", &p.frequency_penalty));
  BATON_ASSIGN_OR_RETURN(auto top_k, f.get_int("top-k"));
  if (top_k) p.top_k = static_cast<std::int32_t>(*top_k);
  BATON_ASSIGN_OR_RETURN(auto max_tokens, f.get_int("max-tokens"));
  if (max_tokens) p.max_tokens = static_cast<std::int32_t>(*max_tokens);
  BATON_ASSIGN_OR_RETURN(auto seed, f.get_int("seed"));
  if (seed) p.seed = static_cast<std::uint64_t>(*seed);
  BATON_ASSIGN_OR_RETURN(auto logprobs, f.get_int("logprobs"));
  if (logprobs) p.logprobs = static_cast<std::int32_t>(*logprobs);
  p.ignore_eos = f.has("ignore-eos");
  if (auto stop = f.get("stop")) p.stop = {*stop};
  return p;
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "baton generate: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int generate_main(int argc, char** argv) {
  auto flags = parse_flags(kFlags, argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "baton generate: %s\n\n%s", std::string(flags.status().message()).c_str(),
                 usage("baton generate", kSynopsis, kFlags).c_str());
    return 2;
  }
  const ParsedFlags& f = *flags;
  if (f.has("help")) {
    std::printf("%s", usage("baton generate", kSynopsis, kFlags).c_str());
    return 0;
  }
  const int prompt_sources = (f.has("prompt") ? 1 : 0) + (f.has("prompt-tokens") ? 1 : 0) + (f.has("chat") ? 1 : 0) +
                             (f.has("prompts-file") ? 1 : 0);
  if ((!f.has("model") && !f.has("endpoint")) || prompt_sources != 1) {
    std::fprintf(stderr,
                 "baton generate: give --model (or --endpoint) and exactly one of --prompt / --chat / --prompt-tokens / "
                 "--prompts-file\n\n%s",
                 usage("baton generate", kSynopsis, kFlags).c_str());
    return 2;
  }
  if (auto s = init_logging(f.get("log-level").value_or("warn")); !s.ok()) return fail(s);
  auto sampling = sampling_from_flags(f);
  if (!sampling.ok()) return fail(sampling.status());
  if (f.has("endpoint")) {
    // The engine belongs to the cluster's nodes: an engine flag here would be silently ignored.
    if (f.has("model")) {
      std::fprintf(stderr, "baton generate: --model and --endpoint exclude each other: the router's nodes have "
                           "their model\n");
      return 2;
    }
    if (f.has("chat-template")) {
      std::fprintf(stderr, "baton generate: --chat-template renders chats where the tokenizer is: with --endpoint "
                           "that is the router (baton-router --chat-template, or baton up --chat-template)\n");
      return 2;
    }
    for (const FlagSpec& e : engine_flags()) {
      if (f.has(e.name)) {
        std::fprintf(stderr, "baton generate: --%s configures a local engine; with --endpoint the cluster's nodes "
                             "take it (baton up, or the node's own flags)\n", e.name.c_str());
        return 2;
      }
    }
    return generate_remote(f, *sampling);
  }
  auto config = engine_config_from_flags(f, NodeRole::kColocated);
  if (!config.ok()) return fail(config.status());

  // The model directory first, whatever the prompt flag: a missing or unreadable one must be the
  // error, not the tokenizer files it cannot have. (Engine::create reads config.json again; it is
  // small.)
  if (auto model = ModelConfig::load(config->model_dir); !model.ok()) return fail(model.status());
  std::unique_ptr<Tokenizer> tokenizer;
  if (Tokenizer::has_tokenizer_files(config->model_dir)) {
    auto t = Tokenizer::load(config->model_dir);
    if (!t.ok()) return fail(t.status());
    tokenizer = std::move(*t);
    if (auto arg = f.get("chat-template")) {
      auto source = chat_template_from_arg(*arg);
      if (!source.ok()) return fail(source.status());
      if (auto s = tokenizer->set_chat_template(*source, "--chat-template"); !s.ok()) return fail(s);
    }
  } else if (f.has("chat-template")) {
    return fail(absl::InvalidArgumentError(str_cat("--chat-template: ", config->model_dir,
                                                   " has no tokenizer files to render chats with")));
  }
  const std::string output_format = f.get("output").value_or(tokenizer ? "text" : "token-ids");
  if (output_format != "text" && output_format != "token-ids") {
    return fail(absl::InvalidArgumentError("--output must be text or token-ids"));
  }
  if (f.has("prompts-file")) {
    auto engine = Engine::create(*config);
    if (!engine.ok()) return fail(engine.status());
    if (tokenizer) {
      attach_tokenizer(**engine, *tokenizer);
    }
    BatchOptions bo;
    bo.path = *f.get("prompts-file");
    bo.model_dir = config->model_dir;
    bo.defaults = *sampling;
    bo.json = f.has("json");
    bo.token_ids = output_format == "token-ids";
    return run_prompts_file(**engine, tokenizer.get(), bo);
  }
  if (!tokenizer && (f.has("prompt") || f.has("chat") || output_format == "text" || f.has("stop"))) {
    return fail(absl::FailedPreconditionError(str_cat(config->model_dir, " has no tokenizer.json/tokenizer_config.json: ",
                                                      "use --prompt-tokens and --output token-ids")));
  }
  std::vector<std::int32_t> prompt;
  if (f.has("prompt")) {
    prompt = tokenizer->encode(*f.get("prompt"), /*add_special_tokens=*/true);
  } else if (f.has("chat")) {
    const auto messages = nlohmann::json::parse(*f.get("chat"), nullptr, /*allow_exceptions=*/false);
    if (messages.is_discarded() || !messages.is_array()) {
      return fail(absl::InvalidArgumentError("--chat must be a JSON array of {\"role\", \"content\"} messages"));
    }
    auto rendered = tokenizer->apply_chat_template(messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return fail(rendered.status());
    // The template writes BOS and other special tokens itself.
    prompt = tokenizer->encode(*rendered, /*add_special_tokens=*/false);
  } else {
    auto ids = parse_ids(*f.get("prompt-tokens"));
    if (!ids.ok()) return fail(ids.status());
    prompt = std::move(*ids);
  }

  if (!f.has("kv-cache-memory")) {
    // One request: a KV cache for it (and a speculative step's drafts beyond it), not the default
    // gigabyte, which is committed up front and costs seconds of a one-shot run.
    constexpr std::int64_t kDraftRoom = 64;
    config->kv_cache_tokens = static_cast<std::int64_t>(prompt.size()) + sampling->max_tokens + kDraftRoom;
  }
  // One request runs: a hybrid model's recurrent state is kept for it alone.
  if (!f.has("max-num-seqs")) config->scheduler.max_num_seqs = 1;
  auto engine = Engine::create(*config);
  if (!engine.ok()) return fail(engine.status());
  if (tokenizer) {
    attach_tokenizer(**engine, *tokenizer);
  }
  const std::size_t prompt_len = prompt.size();
  if (auto s = (*engine)->add_request("generate-0", std::move(prompt), *sampling); !s.ok()) return fail(s);
  const bool stream_text = output_format == "text" && !f.has("json");

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  Clock::time_point first_token{};
  std::vector<std::int32_t> ids;
  std::vector<TokenOutput> tokens;
  FinishReason reason = FinishReason::kNone;
  std::int32_t cached = 0;
  std::string hidden_states_path;
  std::string text;
  while ((*engine)->has_unfinished()) {
    auto outs = (*engine)->step();
    if (!outs.ok()) return fail(outs.status());
    for (RequestOutput& o : *outs) {
      for (TokenOutput& t : o.new_tokens) {
        if (ids.empty()) first_token = Clock::now();
        ids.push_back(t.token);
        tokens.push_back(std::move(t));
      }
      if (o.finished) reason = o.finish_reason;
      cached = o.num_cached_prompt_tokens;
      if (!o.hidden_states_path.empty()) hidden_states_path = o.hidden_states_path;
      text += o.new_text;
      if (stream_text && !o.new_text.empty()) {
        std::fwrite(o.new_text.data(), 1, o.new_text.size(), stdout);
        std::fflush(stdout);
      }
    }
  }
  const auto end = Clock::now();
  const double ttft = std::chrono::duration<double>(first_token - start).count();
  const double decode_s = std::chrono::duration<double>(end - first_token).count();
  const double prefill_tps = ttft > 0 ? static_cast<double>(prompt_len) / ttft : 0.0;
  const double decode_tps = ids.size() > 1 && decode_s > 0 ? static_cast<double>(ids.size() - 1) / decode_s : 0.0;

  if (f.has("json")) {
    nlohmann::json j;
    j["model"] = config->model_dir;
    j["prompt_tokens"] = prompt_len;
    j["cached_prompt_tokens"] = cached;
    j["generated_tokens"] = ids.size();
    j["token_ids"] = ids;
    if (tokenizer) j["text"] = text;
    j["finish_reason"] = finish_reason_name(reason);
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["time_to_first_token_s"] = ttft;
    j["total_s"] = std::chrono::duration<double>(end - start).count();
    j["backend"] = (*engine)->describe();
    if ((*engine)->spec_stats() != nullptr) j["spec"] = spec_report(**engine);
    if (sampling->logprobs >= 0) j["logprobs"] = logprobs_report(tokens);
    if (!hidden_states_path.empty()) j["kv_transfer_params"] = {{"hidden_states_path", hidden_states_path}};
    // Text is valid UTF-8 by construction; replace rather than abort if it ever is not.
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else if (stream_text) {
    std::cout << std::endl;
  } else {
    for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << std::endl;
  }
  std::fprintf(stderr, "prompt: %zu tokens, prefill %.1f tokens/s | generated: %zu tokens, decode %.1f tokens/s | finish: %s\n",
               prompt_len, prefill_tps, ids.size(), decode_tps, finish_reason_name(reason));
  if (const SpecDecodeStats* st = (*engine)->spec_stats()) {
    std::fputs(spec_line(std::string(spec_method_name(config->speculative->method)), st->num_drafts,
                         st->num_draft_tokens, st->num_accepted_tokens,
                         !config->speculative->lossless() && !sampling->greedy())
                   .c_str(),
               stderr);
  }
  return 0;
}

}  // namespace baton::cli
