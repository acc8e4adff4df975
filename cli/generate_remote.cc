#include "cli/generate_remote.h"
#include "cli/report.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "baton/v1/api.grpc.pb.h"
#include "cli/generate_batch.h"
#include "cli/router_client.h"
#include "common/status.h"
#include "engine/sample/stop_checker.h"
#include "grpcpp/grpcpp.h"
#include "node_common/convert.h"
#include "nlohmann/json.hpp"
#include "security/api_keys.h"
#include "security/public_api_channel.h"

namespace baton::cli {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* reason_name(v1::FinishReason r) { return finish_reason_name(finish_reason_from_proto(r)); }

json spec_json(const v1::Usage& u, const std::string& method) {
  const v1::SpeculationUsage& s = u.speculation();
  if (method.empty()) return nullptr;
  const double drafts = static_cast<double>(s.num_drafts()), tokens = static_cast<double>(s.num_draft_tokens());
  return {{"method", method},
          {"num_drafts", s.num_drafts()},
          {"num_draft_tokens", s.num_draft_tokens()},
          {"num_accepted_tokens", s.num_accepted_tokens()},
          // null, not 0, when there was nothing to measure
          {"acceptance_rate", tokens > 0 ? json(static_cast<double>(s.num_accepted_tokens()) / tokens) : json(nullptr)},
          {"mean_acceptance_length",
           drafts > 0 ? json(1.0 + static_cast<double>(s.num_accepted_tokens()) / drafts) : json(nullptr)},
          {"accepted_per_position", std::vector<std::int64_t>(s.accepted_per_position().begin(), s.accepted_per_position().end())},
          {"proposals_by_length", std::vector<std::int64_t>(s.proposals_by_length().begin(), s.proposals_by_length().end())},
          {"lossy", s.lossy()}};
}

// Adds `from` to `into` element by element (the longer decides the length).
void add_counts(google::protobuf::RepeatedField<std::int64_t>& into, const google::protobuf::RepeatedField<std::int64_t>& from) {
  while (into.size() < from.size()) into.Add(0);
  for (int i = 0; i < from.size(); ++i) into.Set(i, into.Get(i) + from.Get(i));
}

json result_json(const RemoteResult& r, bool with_text, bool logprobs) {
  const double decode_s = r.total_s - r.ttft_s;
  json j;
  j["prompt_tokens"] = r.usage.prompt_tokens();
  j["cached_prompt_tokens"] = r.usage.cached_prompt_tokens();
  j["generated_tokens"] = r.ids.size();
  j["token_ids"] = r.ids;
  if (with_text) j["text"] = r.text;
  j["finish_reason"] = reason_name(r.finish_reason);
  if (!r.error.empty()) j["error"] = r.error;
  j["prefill_tokens_per_s"] = r.ttft_s > 0 ? r.usage.prompt_tokens() / r.ttft_s : 0.0;
  j["decode_tokens_per_s"] = r.ids.size() > 1 && decode_s > 0 ? static_cast<double>(r.ids.size() - 1) / decode_s : 0.0;
  j["time_to_first_token_s"] = r.ttft_s;
  j["total_s"] = r.total_s;
  j["prefill_node"] = r.usage.local_prefill() ? std::string("local") : r.usage.prefill_node();
  j["decode_node"] = r.usage.decode_node();
  if (!r.hidden_states_path.empty()) j["kv_transfer_params"] = {{"hidden_states_path", r.hidden_states_path}};
  if (logprobs) j["logprobs"] = json::array();
  if (logprobs) {
    for (const TokenOutput& t : r.tokens) {
      json top = json::array();
      for (const TokenLogprob& x : t.top_logprobs) top.push_back({{"token_id", x.token}, {"logprob", x.logprob}});
      j["logprobs"].push_back({{"token_id", t.token}, {"logprob", t.logprob}, {"top_logprobs", top}});
    }
  }
  return j;
}

void print_json(const json& j) { std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl; }

int fail(const std::string& endpoint, const std::string& message) {
  std::fprintf(stderr, "baton generate: %s: %s\n", endpoint.c_str(), message.c_str());
  return 1;
}

absl::StatusOr<v1::GenerateRequest> single_request(const ParsedFlags& f, const SamplingParams& sampling) {
  v1::GenerateRequest request;
  *request.mutable_sampling() = sampling_to_proto(sampling);
  if (auto text = f.get("prompt")) {
    request.set_text(*text);
  } else if (auto chat = f.get("chat")) {
    const json messages = json::parse(*chat, nullptr, /*allow_exceptions=*/false);
    if (messages.is_discarded() || !messages.is_array()) {
      return absl::InvalidArgumentError("--chat must be a JSON array of {\"role\", \"content\"} messages");
    }
    for (const json& m : messages) {
      if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
          !m["content"].is_string()) {
        return absl::InvalidArgumentError("--chat: every message needs string \"role\" and \"content\"");
      }
      v1::ChatMessage* c = request.mutable_chat()->add_messages();
      c->set_role(m["role"].get<std::string>());
      c->set_content(m["content"].get<std::string>());
    }
  } else {
    const std::string s = *f.get("prompt-tokens");
    std::size_t pos = 0;
    while (pos <= s.size()) {
      const std::size_t comma = std::min(s.find(',', pos), s.size());
      int v = 0;
      if (!absl::SimpleAtoi(s.substr(pos, comma - pos), &v)) {
        return absl::InvalidArgumentError(str_cat("--prompt-tokens: '", s.substr(pos, comma - pos), "' is not a token id"));
      }
      request.mutable_token_ids()->add_ids(v);
      pos = comma + 1;
    }
  }
  return request;
}

int run_batch(v1::Baton::Stub& stub, const ParsedFlags& f, const SamplingParams& sampling, const v1::ModelInfo& info,
              const std::string& endpoint, bool token_ids, const std::string& method) {
  BatchOptions o;
  o.path = *f.get("prompts-file");
  o.defaults = sampling;
  auto prompts = read_prompts_file(o, nullptr, /*keep_text=*/true);
  if (!prompts.ok()) return fail(o.path, std::string(prompts.status().message()));
  const bool as_json = f.has("json");
  const bool with_text = info.has_tokenizer() && !token_ids;
  std::vector<RemoteResult> results(prompts->size());
  std::mutex print_mu;
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < prompts->size(); ++i) {
    threads.emplace_back([&, i] {
      const BatchPrompt& p = (*prompts)[i];
      v1::GenerateRequest request;
      if (p.text) request.set_text(*p.text);
      else request.mutable_token_ids()->mutable_ids()->Add(p.tokens.begin(), p.tokens.end());
      *request.mutable_sampling() = sampling_to_proto(p.params);
      results[i] = run_request(stub, request, nullptr);
      if (as_json) {
        json j = result_json(results[i], with_text, p.params.logprobs >= 0);
        j["index"] = i;
        j["spec"] = spec_json(results[i].usage, method);
        if (!results[i].status.ok()) j["error"] = results[i].status.error_message();
        std::lock_guard<std::mutex> lock(print_mu);
        print_json(j);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::int64_t prompt_tokens = 0, generated = 0;
  int failed = 0;
  v1::Usage spec_total;
  for (const RemoteResult& r : results) {
    prompt_tokens += r.usage.prompt_tokens();
    generated += static_cast<std::int64_t>(r.ids.size());
    failed += !r.status.ok() || r.finish_reason == v1::FINISH_REASON_ERROR;
    auto* s = spec_total.mutable_speculation();
    s->set_num_drafts(s->num_drafts() + r.usage.speculation().num_drafts());
    s->set_num_draft_tokens(s->num_draft_tokens() + r.usage.speculation().num_draft_tokens());
    s->set_num_accepted_tokens(s->num_accepted_tokens() + r.usage.speculation().num_accepted_tokens());
    add_counts(*s->mutable_accepted_per_position(), r.usage.speculation().accepted_per_position());
    add_counts(*s->mutable_proposals_by_length(), r.usage.speculation().proposals_by_length());
    s->set_lossy(s->lossy() || r.usage.speculation().lossy());
  }
  if (as_json) {
    json s;
    s["summary"] = true;
    s["model"] = info.model();
    s["endpoint"] = endpoint;
    s["requests"] = results.size();
    s["failed_requests"] = failed;
    s["prompt_tokens"] = prompt_tokens;
    s["generated_tokens"] = generated;
    s["total_tokens"] = prompt_tokens + generated;
    s["wall_s"] = wall;
    s["output_tokens_per_s"] = wall > 0 ? static_cast<double>(generated) / wall : 0.0;
    s["total_tokens_per_s"] = wall > 0 ? static_cast<double>(prompt_tokens + generated) / wall : 0.0;
    s["requests_per_s"] = wall > 0 ? static_cast<double>(results.size()) / wall : 0.0;
    s["spec"] = spec_json(spec_total, method);
    s["backend"] = info.backend();
    print_json(s);
  } else {
    for (std::size_t i = 0; i < results.size(); ++i) {
      std::cout << "=== " << i << " ===\n";
      if (!results[i].status.ok()) {
        std::cout << "error: " << results[i].status.error_message() << "\n";
      } else if (with_text) {
        std::cout << results[i].text << "\n";
      } else {
        for (std::size_t k = 0; k < results[i].ids.size(); ++k) std::cout << (k ? "," : "") << results[i].ids[k];
        std::cout << "\n";
      }
    }
    std::cout << std::flush;
  }
  std::fprintf(stderr, "%zu prompts: %lld prompt tokens, %lld generated in %.2f s (%.1f output tokens/s)%s\n",
               results.size(), static_cast<long long>(prompt_tokens), static_cast<long long>(generated), wall,
               wall > 0 ? static_cast<double>(generated) / wall : 0.0,
               failed > 0 ? str_cat("; ", failed, " failed").c_str() : "");
  if (!method.empty()) {
    const v1::SpeculationUsage& sp = spec_total.speculation();
    std::fputs(spec_line(method, sp.num_drafts(), sp.num_draft_tokens(), sp.num_accepted_tokens(), sp.lossy()).c_str(), stderr);
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace

int generate_remote(const ParsedFlags& f, const SamplingParams& sampling) {
  const std::string endpoint = *f.get("endpoint");
  auto channel = security::public_api_channel(endpoint, f.get("tls-ca").value_or(""), security::api_key_from_environment());
  if (!channel.ok()) return fail(endpoint, std::string(channel.status().message()));
  auto stub = v1::Baton::NewStub(*channel);
  v1::ModelInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.set_wait_for_ready(false);  // a router that does not answer is an error now, not in 10 s
    const grpc::Status s = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
    if (!s.ok()) {
    // Nothing listens there: TLS is not the question.
    const bool refused = s.error_message().find("Connection refused") != std::string::npos;
    const bool no_tls = !f.has("tls-ca") && !refused &&
                        (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
    return fail(endpoint, str_cat("cannot reach the router: ", s.error_message(),
                                  no_tls ? " (if it serves TLS, give --tls-ca FILE)" : ""));
  }
  }
  std::string method;
  if (!info.speculative_config().empty()) {
    const json j = json::parse(info.speculative_config(), nullptr, false);
    if (j.is_object() && j.contains("method") && j["method"].is_string()) method = j["method"].get<std::string>();
  }
  const std::string output_format = f.get("output").value_or(info.has_tokenizer() ? "text" : "token-ids");
  if (output_format != "text" && output_format != "token-ids") return fail(endpoint, "--output must be text or token-ids");
  if (f.has("prompts-file")) return run_batch(*stub, f, sampling, info, endpoint, output_format == "token-ids", method);

  auto request = single_request(f, sampling);
  if (!request.ok()) return fail(endpoint, std::string(request.status().message()));
  const bool stream_text = output_format == "text" && !f.has("json");
  const RemoteResult r = run_request(*stub, *request, [&](const std::string& text) {
    if (!stream_text) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (!r.status.ok()) {
    if (stream_text && !r.text.empty()) std::cout << std::endl;
    return fail(endpoint, r.status.error_message());
  }
  const double decode_s = r.total_s - r.ttft_s;
  const double prefill_tps = r.ttft_s > 0 ? r.usage.prompt_tokens() / r.ttft_s : 0.0;
  const double decode_tps = r.ids.size() > 1 && decode_s > 0 ? static_cast<double>(r.ids.size() - 1) / decode_s : 0.0;
  if (f.has("json")) {
    json j = result_json(r, info.has_tokenizer(), sampling.logprobs >= 0);
    j["model"] = info.model();
    j["endpoint"] = endpoint;
    j["spec"] = spec_json(r.usage, method);
    j["backend"] = info.backend();
    print_json(j);
  } else if (stream_text) {
    std::cout << std::endl;
  } else {
    for (std::size_t i = 0; i < r.ids.size(); ++i) std::cout << (i ? "," : "") << r.ids[i];
    std::cout << std::endl;
  }
  std::fprintf(stderr, "prompt: %d tokens, prefill %.1f tokens/s | generated: %zu tokens, decode %.1f tokens/s | finish: %s\n",
               r.usage.prompt_tokens(), prefill_tps, r.ids.size(), decode_tps, reason_name(r.finish_reason));
  if (!method.empty()) {
    const v1::SpeculationUsage& sp = r.usage.speculation();
    std::fputs(spec_line(method, sp.num_drafts(), sp.num_draft_tokens(), sp.num_accepted_tokens(), sp.lossy()).c_str(), stderr);
  }
  // A router without --expose-topology names no node.
  const auto node = [](const std::string& address) { return address.empty() ? std::string("(hidden)") : address; };
  std::fprintf(stderr, "served by %s: prefill on %s, decode on %s, time to first token %.1f ms\n", endpoint.c_str(),
               r.usage.local_prefill() ? "the decode node" : node(r.usage.prefill_node()).c_str(),
               node(r.usage.decode_node()).c_str(), r.ttft_s * 1000.0);
  return r.finish_reason == v1::FINISH_REASON_ERROR ? 1 : 0;
}

}  // namespace baton::cli
