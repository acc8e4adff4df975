// Lossless in law through the whole engine: with probabilistic drafts (a draft model and an EAGLE
// head sample their drafts from q, and q enters verification), and with one-hot drafts on a hybrid
// target (Qwen3-Next: its recurrent state follows the accepted draft; the random fixture, and the
// bundled trained hybrid with its own MTP drafts), the joint law of a request's first three output
// tokens is the target's — at temperature 1, with top-p, and with a logit bias — under token-wise
// and block verification. 100k requests per case (30k on the bundled model), each with its own
// seed, through Engine::step() with continuous batching; the law they must follow is computed
// exactly from the same model and the same logits processing (Sampler::target_probs over the
// forward's logits), and compared by a chi-square goodness-of-fit test. The plain engine passes the same test (so the exact law is
// right), and a negative control — a proposer reporting a q other than the one it sampled from,
// a classic bug — must fail it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/forwarding_proposer.h"
#include "tests/engine/model_harness.h"
#include "tests/support/chi_square.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::ModelHarness;
using testing::TestSequence;

constexpr int kRequests = 100000;
constexpr double kSignificance = 1e-4;
constexpr double kMinExpected = 5.0;
constexpr int kK = 2;  // the first verification decides tokens 2 and 3

using Triple = std::array<std::int32_t, 3>;

SamplingParams params_for(bool top_p, bool logit_bias) {
  SamplingParams p;
  p.temperature = 1.0f;
  if (top_p) p.top_p = 0.95f;
  // Biases that move the law far from the model's: verification must apply them to the target's
  // rows, or the output follows the unbiased law.
  if (logit_bias) p.logit_bias = {{3, 2.0f}, {10, -1.5f}, {25, 2.5f}, {40, 1.0f}};
  p.max_tokens = 4;  // room for kK drafts after the first token; the law of the first three is the same
  p.ignore_eos = true;
  return p;
}

// The target's processed next-token distribution after `tokens` (the engine's own processing).
class ExactLaw {
 public:
  explicit ExactLaw(const SamplingParams& params, const std::string& target = "llama-f32")
      : params_(params), h_(ModelHarness::load(fixture_path(target))) {}

  std::vector<float> next(const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& output) {
    TestSequence seq;
    seq.tokens = prompt;
    seq.tokens.insert(seq.tokens.end(), output.begin(), output.end());
    ForwardBatch batch;
    batch.sequences.push_back(seq.chunk(*h_.pool, static_cast<std::int32_t>(seq.tokens.size())));
    const std::vector<std::vector<float>> rows = h_.forward(batch);
    seq.table.release_all(*h_.pool);
    std::vector<float> probs(rows.back().size());
    sampler_.target_probs(rows.back(), params_, TokenHistory{prompt, output}, h_.model->config().eos_token_ids, probs);
    return probs;
  }

  // Probabilities of every first-three-tokens triple likely enough to matter at n requests (the
  // rest is pooled by the caller).
  std::map<Triple, double> triples(const std::vector<std::int32_t>& prompt, int n) {
    const double floor = kMinExpected / n;
    std::map<Triple, double> out;
    const std::vector<float> p1 = next(prompt, {});
    for (std::size_t a = 0; a < p1.size(); ++a) {
      if (p1[a] < floor) continue;
      const auto ta = static_cast<std::int32_t>(a);
      const std::vector<float> p2 = next(prompt, {ta});
      for (std::size_t b = 0; b < p2.size(); ++b) {
        const double pab = static_cast<double>(p1[a]) * p2[b];
        if (pab < floor) continue;
        const auto tb = static_cast<std::int32_t>(b);
        const std::vector<float> p3 = next(prompt, {ta, tb});
        for (std::size_t c = 0; c < p3.size(); ++c) {
          const double pabc = pab * p3[c];
          if (pabc >= floor) out[{ta, tb, static_cast<std::int32_t>(c)}] = pabc;
        }
      }
    }
    return out;
  }

  // Of a few random prompts, the one whose first token is most uncertain (more cells, more power).
  std::vector<std::int32_t> uncertain_prompt() {
    std::mt19937 rng(1);
    std::vector<std::int32_t> best;
    double best_entropy = -1;
    for (int i = 0; i < 40; ++i) {
      std::vector<std::int32_t> prompt(4);
      for (auto& t : prompt) t = static_cast<std::int32_t>(3 + rng() % 353);
      double entropy = 0;
      for (float p : next(prompt, {})) entropy -= p > 0 ? p * std::log(p) : 0.0;
      if (entropy > best_entropy) {
        best_entropy = entropy;
        best = prompt;
      }
    }
    return best;
  }

 private:
  SamplingParams params_;
  ModelHarness h_;
  Sampler sampler_;
};

// A proposer that samples its drafts from q but reports q sharpened (q^2, renormalized): the
// verification then tests against the wrong q. Must fail the same test.
class WrongQProposer final : public testing::ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  absl::Status propose(std::span<ProposalRequest> batch) override {
    BATON_RETURN_IF_ERROR(real().propose(batch));
    for (ProposalRequest& p : batch) {
      if (p.draft_probs == nullptr || p.drafts->empty()) continue;
      const std::size_t vocab = p.draft_probs->size() / p.drafts->size();
      for (std::size_t i = 0; i < p.drafts->size(); ++i) {
        std::span<float> q(p.draft_probs->data() + i * vocab, vocab);
        double z = 0;
        for (float& x : q) z += (x = x * x);
        for (float& x : q) x = static_cast<float>(x / z);
      }
    }
    return absl::OkStatus();
  }
};

// One-hot drafts the target likes: after the first output token t, its most probable next token
// and the most probable one after that (from the exact law), so verification accepts often and
// rejects often. Used on the hybrid target, where the accepted draft decides which recurrent state
// slot the request goes on from.
class LikelyDraftsProposer final : public testing::ForwardingProposer {
 public:
  LikelyDraftsProposer(std::unique_ptr<Proposer> real, ExactLaw& law) : ForwardingProposer(std::move(real)), law_(law) {}
  absl::Status propose(std::span<ProposalRequest> batch) override {
    for (ProposalRequest& p : batch) {
      p.drafts->clear();
      const std::vector<std::int32_t> prompt(p.tokens.begin(), p.tokens.begin() + p.prompt_len);
      std::vector<std::int32_t> output(p.tokens.begin() + p.prompt_len, p.tokens.end());
      auto& cached = drafts_[output];
      if (cached.empty()) {
        for (int i = 0; i < kK; ++i) {
          const std::vector<float> q = law_.next(prompt, output);
          const auto best = static_cast<std::int32_t>(std::max_element(q.begin(), q.end()) - q.begin());
          cached.push_back(best);
          output.push_back(best);
        }
      }
      p.drafts->assign(cached.begin(), cached.begin() + std::min<std::ptrdiff_t>(p.max_drafts, kK));
    }
    return absl::OkStatus();
  }

 private:
  ExactLaw& law_;
  std::map<std::vector<std::int32_t>, std::vector<std::int32_t>> drafts_;  // by the output so far
};

struct Case {
  std::string label;
  std::string method;  // "" (no speculation), "draft_model", "eagle", "medusa", "dflash", or "likely" (LikelyDraftsProposer)
  std::string rejection;  // "standard" or "block"
  bool top_p = false;
  bool wrong_q = false;  // the negative control
  bool logit_bias = false;
  std::string target = "llama-f32";
  int requests = kRequests;  // fewer for the bundled hybrid, a larger model

  // Probabilistic drafts from the fixture draft model or EAGLE head, k = kK.
  std::optional<SpeculativeConfig> config() const {
    if (method.empty()) return std::nullopt;
    if (method == "mtp") {  // the bundled hybrid's trained MTP module, from its own checkpoint
      auto c = SpeculativeConfig::parse(R"({"method": "mtp", "num_speculative_tokens": )" + std::to_string(kK) +
                                            R"(, "rejection_sample_method": ")" + rejection + "\"}",
                                        NodeRole::kColocated);
      BATON_CHECK(c.ok(), c.status().ToString());
      return *c;
    }
    if (method == "likely") {  // n-gram's plumbing; the proposer is replaced
      auto c = SpeculativeConfig::parse(R"({"method": "ngram", "num_speculative_tokens": )" + std::to_string(kK) +
                                            R"(, "rejection_sample_method": ")" + rejection + "\"}",
                                        NodeRole::kColocated);
      BATON_CHECK(c.ok(), c.status().ToString());
      return *c;
    }
    // The near draft model overlaps the target (accepts and corrections both common); the EAGLE,
    // Medusa and DFlash fixture heads are random (mostly corrections) but run the heads'
    // probabilistic paths (Medusa's: a truncated vocabulary and a logit scale; DFlash's: k rows of
    // one non-causal block, none depending on another's draw).
    const std::string dir = fixture_path(method == "eagle"    ? "spec/eagle-llama-f32"
                                         : method == "medusa" ? "spec/medusa-trunc-llama-f32"
                                         : method == "dflash" ? "spec/dflash-llama-f32"
                                                              : "spec/draft-near-llama-f32");
    auto c = SpeculativeConfig::parse(
        "{\"method\": \"" + method + "\", \"model\": \"" + dir + "\", \"num_speculative_tokens\": " + std::to_string(kK) +
            ", \"draft_sample_method\": \"probabilistic\", \"rejection_sample_method\": \"" + rejection + "\"}",
        NodeRole::kColocated);
    BATON_CHECK(c.ok(), c.status().ToString());
    return *c;
  }
};

struct Samples {
  std::map<Triple, int> counts;
  double acceptance_rate = 0;
  std::int64_t draft_tokens = 0;
};

Samples sample_engine(const Case& c, const std::vector<std::int32_t>& prompt, ExactLaw& law) {
  EngineConfig cfg;
  cfg.model_dir = fixture_path(c.target);
  cfg.backend.num_threads = 2;
  // The bundled hybrid's recurrent state (3 slots for each of 128 sequences) needs more room.
  cfg.kv_cache_bytes = c.target == testing::kBundledHybrid ? 512 << 20 : 16 << 20;
  cfg.scheduler.max_num_batched_tokens = 1024;
  cfg.scheduler.max_num_seqs = 128;
  cfg.speculative = c.config();
  EngineHooks hooks;
  if (c.wrong_q) {
    hooks.wrap_proposer = [](std::unique_ptr<Proposer> real) {
      return std::unique_ptr<Proposer>(std::make_unique<WrongQProposer>(std::move(real)));
    };
  }
  if (c.method == "likely") {
    hooks.wrap_proposer = [&law](std::unique_ptr<Proposer> real) {
      return std::unique_ptr<Proposer>(std::make_unique<LikelyDraftsProposer>(std::move(real), law));
    };
  }
  auto engine = Engine::create(cfg, hooks);
  BATON_CHECK(engine.ok(), engine.status().ToString());
  Engine& e = **engine;
  SamplingParams params = params_for(c.top_p, c.logit_bias);
  std::map<std::string, std::vector<std::int32_t>> pending;
  Samples run;
  constexpr int kWave = 2048;
  for (int first = 0; first < c.requests; first += kWave) {
    for (int i = first; i < std::min(first + kWave, c.requests); ++i) {
      params.seed = 7'000'000 + static_cast<std::uint64_t>(i);
      const absl::Status s = e.add_request(std::to_string(i), prompt, params);
      BATON_CHECK(s.ok(), s.ToString());
    }
    while (e.has_unfinished()) {
      auto outs = e.step();
      BATON_CHECK(outs.ok(), outs.status().ToString());
      for (const RequestOutput& o : *outs) {
        std::vector<std::int32_t>& t = pending[o.request_id];
        for (const TokenOutput& x : o.new_tokens) t.push_back(x.token);
        if (o.finished) {
          BATON_CHECK(t.size() == 4, o.request_id, " finished with ", t.size(), " tokens");
          ++run.counts[{t[0], t[1], t[2]}];
          pending.erase(o.request_id);
        }
      }
    }
  }
  if (const SpecDecodeStats* st = e.spec_stats()) {
    run.acceptance_rate = st->acceptance_rate();
    run.draft_tokens = st->num_draft_tokens;
  }
  return run;
}

// Chi-square goodness of fit over the enumerated cells plus one pooled "everything else" cell.
double p_value(const Samples& run, const std::map<Triple, double>& law, int requests) {
  double chi2 = 0, mass = 0;
  int df = 0, counted = 0;
  for (const auto& [t, p] : law) {
    const double expected = p * requests;
    const auto it = run.counts.find(t);
    const int n = it == run.counts.end() ? 0 : it->second;
    chi2 += (n - expected) * (n - expected) / expected;
    mass += p;
    counted += n;
    ++df;
  }
  const double rest = (1.0 - mass) * requests;
  const int n_rest = requests - counted;
  if (rest >= kMinExpected) {
    chi2 += (n_rest - rest) * (n_rest - rest) / rest;
  } else {
    --df;  // the pooled cell is too small to test; fold it away
  }
  return testing::chi_square_p_value(chi2, df);
}

class EngineDistribution : public ::testing::TestWithParam<Case> {};

TEST_P(EngineDistribution, FirstThreeTokensFollowTheTargetsLaw) {
  const Case& c = GetParam();
  ExactLaw exact(params_for(c.top_p, c.logit_bias), c.target);
  const std::vector<std::int32_t> prompt = exact.uncertain_prompt();
  const std::map<Triple, double> law = exact.triples(prompt, c.requests);
  ASSERT_GT(law.size(), 50u) << "too few cells for a test with power";
  const Samples run = sample_engine(c, prompt, exact);
  const double p = p_value(run, law, c.requests);
  std::printf("[ chi2     ] %-34s cells %zu  acceptance %.3f  p %.3g\n", c.label.c_str(), law.size(),
              run.acceptance_rate, p);
  if (!c.method.empty()) {
    EXPECT_GT(run.draft_tokens, c.requests) << "the engine hardly speculated";
  }
  if (c.wrong_q) {
    EXPECT_LT(p, kSignificance) << c.label << ": the negative control passed: the test has no power";
  } else {
    EXPECT_GT(p, kSignificance) << c.label;
  }
}

INSTANTIATE_TEST_SUITE_P(ProbabilisticDrafts, EngineDistribution,
                         ::testing::Values(Case{"plain", "", "", false, false},                        //
                                           Case{"draft_model_standard", "draft_model", "standard"},    //
                                           Case{"draft_model_block", "draft_model", "block"},          //
                                           Case{"eagle_standard", "eagle", "standard"},                //
                                           Case{"eagle_block", "eagle", "block"},                      //
                                           Case{"medusa_standard", "medusa", "standard"},              //
                                           Case{"medusa_block_top_p", "medusa", "block", true},
                                           Case{"dflash_standard", "dflash", "standard"},              //
                                           Case{"dflash_block_top_p", "dflash", "block", true},
                                           Case{"draft_model_standard_top_p", "draft_model", "standard", true},
                                           Case{"eagle_block_top_p", "eagle", "block", true},
                                           Case{"draft_model_standard_logit_bias", "draft_model", "standard", false, false, true},
                                           Case{"control_wrong_q", "draft_model", "standard", false, true},
                                           // A hybrid target: the recurrent state goes on from the
                                           // slot of the last accepted draft.
                                           Case{"hybrid_plain", "", "", false, false, false, "qwen3-next-f32"},
                                           Case{"hybrid_likely_standard", "likely", "standard", false, false, false,
                                                "qwen3-next-f32"},
                                           Case{"hybrid_likely_block_top_p", "likely", "block", true, false, false,
                                                "qwen3-next-f32"},
                                           // The bundled trained hybrid with its own MTP module.
                                           Case{"hybrid_bundled_mtp_standard", "mtp", "standard", false, false, false,
                                                testing::kBundledHybrid, 30000}),
                         [](const auto& p) { return p.param.label; });

}  // namespace
}  // namespace baton
