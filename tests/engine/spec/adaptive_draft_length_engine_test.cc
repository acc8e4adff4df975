// adaptive_draft_length in the Engine: output does not depend on the draft lengths the controller
// picks (every method), and drafts that are never accepted stop being asked for.
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/forwarding_proposer.h"
#include "tests/engine/spec/spec_engine_support.h"
#include "tests/engine/spec_methods.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::jobs_for;
using testing::Job;
using testing::make_engine;
using testing::method_cases;
using testing::MethodCase;
using testing::run;

// adaptive_draft_length: whatever lengths the controller picks from its timings (k first, then none,
// then what the measured costs and acceptance favour), every method's greedy tokens, and seeded
// sampled tokens where drafts are one-hot, are the plain engine's, and every block returns.
TEST(SpecEngine, AdaptiveDraftLengthKeepsEveryMethodLossless) {
  for (const MethodCase& m : method_cases()) {
    auto spec = SpeculativeConfig::parse(m.json + R"(, "num_speculative_tokens": 3, "adaptive_draft_length": true})",
                                         NodeRole::kColocated);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto plain = make_engine(m.target, std::nullopt);
    auto engine = make_engine(m.target, *spec);
    const auto jobs = jobs_for(plain->model_config().vocab_size, /*include_sampled=*/true);
    const auto expected = run(*plain, jobs);
    const auto got = run(*engine, jobs);
    for (const Job& j : jobs) {
      if (j.params.greedy() || !m.probabilistic) {
        EXPECT_EQ(got.at(j.id), expected.at(j.id)) << m.label << " " << j.id;
      }
    }
    const std::vector<std::int64_t>& by_length = engine->spec_stats()->proposals_by_length;
    ASSERT_EQ(by_length.size(), 4u) << m.label;
    EXPECT_GT(by_length[3], 0) << m.label << ": never drafted the configured length";
    EXPECT_GT(by_length[0], 0) << m.label << ": never tried drafting nothing";
    EXPECT_EQ(engine->block_pool().num_in_use(), 0) << m.label << ": blocks leaked";
  }
}

// Step costs a test sets, so that the controller's choices do not depend on how busy the machine
// is: every reading of the step clock is 1 ms after the last, and a proposal also costs 2 ms per
// draft asked for (the draft model runs once per draft position).
struct ScriptedStepCosts {
  std::shared_ptr<std::chrono::steady_clock::time_point> now = std::make_shared<std::chrono::steady_clock::time_point>();

  EngineHooks hooks() const {
    EngineHooks h;
    h.step_clock = [now = now] { return *now += std::chrono::milliseconds(1); };
    h.wrap_proposer = [now = now](std::unique_ptr<Proposer> real) -> std::unique_ptr<Proposer> {
      return std::make_unique<PricedProposer>(std::move(real), now);
    };
    return h;
  }

  class PricedProposer : public testing::ForwardingProposer {
   public:
    PricedProposer(std::unique_ptr<Proposer> real, std::shared_ptr<std::chrono::steady_clock::time_point> now)
        : ForwardingProposer(std::move(real)), now_(std::move(now)) {}
    absl::Status propose(std::span<ProposalRequest> batch) override {
      for (const ProposalRequest& r : batch) *now_ += std::chrono::milliseconds(2) * r.max_drafts;
      return real().propose(batch);
    }

   private:
    std::shared_ptr<std::chrono::steady_clock::time_point> now_;
  };
};

// Drafts that are never accepted (a random draft model's): with adaptive_draft_length most
// proposals soon ask for none (the rest are the controller's probes), where a fixed k asks for k
// every step; the tokens are the plain engine's either way. Step costs are scripted (drafting
// costs time, as it does on any machine) so that the outcome does not depend on the machine's load.
TEST(SpecEngine, AdaptiveDraftLengthStopsDraftingWhatIsNotAccepted) {
  const std::string json = R"({"method": "draft_model", "num_speculative_tokens": 3, "model": ")" +
                           fixture_path("spec/draft-llama-f32") + "\"";
  auto fixed = SpeculativeConfig::parse(json + "}", NodeRole::kColocated);
  auto adaptive = SpeculativeConfig::parse(json + R"(, "adaptive_draft_length": true})", NodeRole::kColocated);
  ASSERT_TRUE(fixed.ok() && adaptive.ok());
  auto plain = make_engine("llama-f32", std::nullopt);
  auto fixed_engine = make_engine("llama-f32", *fixed);
  auto adaptive_engine = make_engine("llama-f32", *adaptive, "auto", false, GraphMode::kAuto, std::nullopt,
                                     ScriptedStepCosts{}.hooks());
  std::vector<Job> jobs = jobs_for(plain->model_config().vocab_size, /*include_sampled=*/false);
  jobs.resize(1);
  jobs[0].params.max_tokens = 200;
  jobs[0].params.ignore_eos = true;
  const auto expected = run(*plain, jobs);
  EXPECT_EQ(run(*fixed_engine, jobs), expected);
  EXPECT_EQ(run(*adaptive_engine, jobs), expected);
  const SpecDecodeStats& f = *fixed_engine->spec_stats();
  ASSERT_LT(f.acceptance_rate(), 0.2) << "the fixture draft model is meant to be (almost) never accepted";
  EXPECT_EQ(f.proposals_by_length[0], 0);
  const std::vector<std::int64_t>& a = adaptive_engine->spec_stats()->proposals_by_length;
  std::int64_t total = 0;
  for (std::int64_t n : a) total += n;
  ASSERT_GT(total, 150);
  EXPECT_GE(a[0], total * 3 / 4) << "asked for no drafts on only " << a[0] << " of " << total << " proposals";
}

}  // namespace
}  // namespace baton
