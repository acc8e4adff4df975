#include "cli/verify_checks.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "cli/router_client.h"
#include "common/status.h"
#include "proto/grpc_status_name.h"

namespace baton::cli {
namespace {

// Extra tokens each sampled request asks for beyond the counted ones, so that the last counted
// positions are verified with drafts too (the engine never drafts past max_tokens).
constexpr int kDraftRoom = 2;

// Runs fn(0..n) on `concurrency` threads; returns once every call has returned. Reports
// progress (VerifyOptions::progress) at each tenth of n and at the end.
void for_each_parallel(int n, const VerifyOptions& o, std::string_view check, const std::function<void(int)>& fn) {
  std::atomic<int> next{0};
  std::mutex progress_mu;
  int done = 0, reported_tenths = 0;
  std::vector<std::thread> threads;
  const int workers = std::max(1, std::min(o.concurrency, n));
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        fn(i);
        if (!o.progress) continue;
        std::lock_guard lock(progress_mu);
        const int tenths = 10 * ++done / n;
        if (tenths > reported_tenths) {
          reported_tenths = tenths;
          o.progress(check, done, n);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

v1::GenerateRequest request_for(const std::string& prompt, bool speculation, int max_tokens, float temperature,
                                std::optional<std::uint64_t> seed) {
  v1::GenerateRequest r;
  r.set_text(prompt);
  v1::SamplingParams& s = *r.mutable_sampling();
  s.set_temperature(temperature);
  s.set_max_tokens(max_tokens);
  // Both sides ignore EOS so that they always produce max_tokens tokens: equal lengths to compare
  // and a fixed number of categories in the sampled check.
  s.set_ignore_eos(true);
  if (seed) s.set_seed(*seed);
  if (!speculation) s.set_max_speculative_tokens(0);
  return r;
}

void count(SpeculationSeen& seen, const RemoteResult& r, bool speculation) {
  const v1::SpeculationUsage& u = r.usage.speculation();
  if (speculation) {
    seen.drafts += u.num_drafts();
    seen.draft_tokens += u.num_draft_tokens();
    seen.accepted_tokens += u.num_accepted_tokens();
    seen.lossy_responses += u.lossy() ? 1 : 0;
  } else {
    seen.off_draft_tokens += u.num_draft_tokens();
  }
}

// A failed request, described; nullopt when it succeeded.
std::optional<std::string> failure(const RemoteResult& r) {
  if (!r.status.ok()) return str_cat(grpc_code_name(r.status.error_code()), ": ", r.status.error_message());
  if (r.finish_reason == v1::FINISH_REASON_ERROR || r.finish_reason == v1::FINISH_REASON_ABORT) {
    return str_cat("finished with ", v1::FinishReason_Name(r.finish_reason), ": ", r.error);
  }
  return std::nullopt;
}

std::optional<GreedyMismatch> compare(int prompt_index, const std::vector<std::int32_t>& on,
                                      const std::vector<std::int32_t>& off) {
  const std::size_t n = std::max(on.size(), off.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto a = i < on.size() ? std::optional<std::int32_t>(on[i]) : std::nullopt;
    const auto b = i < off.size() ? std::optional<std::int32_t>(off[i]) : std::nullopt;
    if (a != b) return GreedyMismatch{prompt_index, static_cast<int>(i), a, b};
  }
  return std::nullopt;
}

}  // namespace

void SpeculationSeen::add(const SpeculationSeen& o) {
  drafts += o.drafts;
  draft_tokens += o.draft_tokens;
  accepted_tokens += o.accepted_tokens;
  off_draft_tokens += o.off_draft_tokens;
  lossy_responses += o.lossy_responses;
}

std::vector<std::string> default_sample_prompts() {
  return {"def fibonacci(n):", "import os\n\n", "class Stack:\n    def __init__(self):\n", "x = ["};
}

GreedyReport run_greedy_check(v1::Baton::Stub& stub, const std::vector<std::string>& prompts, const VerifyOptions& o) {
  const int n = static_cast<int>(prompts.size());
  std::vector<RemoteResult> on(prompts.size()), off(prompts.size());
  // Request 2i is prompt i with speculation, 2i + 1 without; both are in flight together.
  for_each_parallel(2 * n, o, "greedy", [&](int j) {
    const bool speculation = j % 2 == 0;
    const v1::GenerateRequest r = request_for(prompts[static_cast<std::size_t>(j / 2)], speculation, o.max_tokens, 0.0f, std::nullopt);
    (speculation ? on : off)[static_cast<std::size_t>(j / 2)] = run_request(stub, r, nullptr, o.timeout);
  });
  GreedyReport rep;
  for (int i = 0; i < n; ++i) {
    const RemoteResult &a = on[static_cast<std::size_t>(i)], &b = off[static_cast<std::size_t>(i)];
    // A prompt the router refuses (e.g. longer than the model allows) is refused either way.
    if (a.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
        b.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      ++rep.prompts_skipped;
      continue;
    }
    const std::optional<std::string> fa = failure(a), fb = failure(b);
    if (fa) rep.errors.push_back(str_cat("prompt ", i, " with speculation: ", *fa));
    if (fb) rep.errors.push_back(str_cat("prompt ", i, " without speculation: ", *fb));
    if (fa || fb) continue;
    ++rep.prompts_compared;
    rep.tokens_compared += static_cast<std::int64_t>(std::min(a.ids.size(), b.ids.size()));
    count(rep.speculation, a, true);
    count(rep.speculation, b, false);
    if (std::optional<GreedyMismatch> m = compare(i, a.ids, b.ids)) {
      ++rep.mismatched_prompts;
      if (!rep.first_mismatch) rep.first_mismatch = m;
    }
  }
  return rep;
}

SampledReport run_sampled_check(v1::Baton::Stub& stub, const std::vector<std::string>& prompts, const VerifyOptions& o) {
  SampledReport rep;
  rep.prompts = static_cast<int>(prompts.size());
  rep.samples = o.samples;
  const int per_prompt = 2 * o.samples;
  std::vector<RemoteResult> results(prompts.size() * static_cast<std::size_t>(per_prompt));
  // Request j: prompt j / per_prompt, sample s = (j % per_prompt) / 2, speculation on when j is even.
  for_each_parallel(static_cast<int>(results.size()), o, "sampled", [&](int j) {
    const int s = (j % per_prompt) / 2;
    const bool speculation = j % 2 == 0;
    const std::uint64_t seed = o.seed + 2 * static_cast<std::uint64_t>(s) + (speculation ? 0 : 1);
    // Tokens past sample_tokens are not counted (see kDraftRoom).
    const v1::GenerateRequest r = request_for(prompts[static_cast<std::size_t>(j / per_prompt)], speculation,
                                              o.sample_tokens + kDraftRoom, o.temperature, seed);
    RemoteResult res = run_request(stub, r, nullptr, o.timeout);
    res.tokens.clear();
    res.text.clear();
    results[static_cast<std::size_t>(j)] = std::move(res);
  });
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    // Category: generated tokens 2..sample_tokens, jointly. The 1st comes from prefill (the same
    // code on and off), so it would only split the categories; from the 2nd on, verification decides.
    std::map<std::vector<std::int32_t>, std::pair<std::int64_t, std::int64_t>> counts;
    for (int j = 0; j < per_prompt; ++j) {
      const RemoteResult& r = results[p * static_cast<std::size_t>(per_prompt) + static_cast<std::size_t>(j)];
      const bool speculation = j % 2 == 0;
      if (std::optional<std::string> f = failure(r)) {
        rep.errors.push_back(str_cat("prompt ", p, " sample ", j / 2, speculation ? " with" : " without",
                                     " speculation: ", *f));
        continue;
      }
      count(rep.speculation, r, speculation);
      const std::ptrdiff_t end = std::min<std::ptrdiff_t>(o.sample_tokens, std::ssize(r.ids));
      const std::vector<std::int32_t> key(r.ids.begin() + std::min<std::ptrdiff_t>(1, end), r.ids.begin() + end);
      auto& c = counts[key];
      (speculation ? c.first : c.second) += 1;
    }
    std::vector<std::int64_t> a, b;
    for (const auto& [key, c] : counts) {
      a.push_back(c.first);
      b.push_back(c.second);
    }
    rep.per_prompt.push_back(chi_square_homogeneity(a, b));
  }
  rep.test = combine(rep.per_prompt);
  return rep;
}

}  // namespace baton::cli
