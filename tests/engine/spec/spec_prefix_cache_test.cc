// Prefix caching with the proposers that draft from the target's hidden states: their heads'
// own cache of KV reused with the target's, and output, drafts and acceptances exactly those of
// an engine without prefix caching.
#include <map>
#include <random>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/forwarding_proposer.h"
#include "tests/engine/spec_methods.h"

namespace baton {
namespace {

using testing::fixture_path;
using testing::Job;
using testing::method_cases;
using testing::MethodCase;

// Records every draft a proposer returns, per request key, in call order.
class DraftRecorder : public testing::ForwardingProposer {
 public:
  DraftRecorder(std::unique_ptr<Proposer> real, std::map<RequestKey, std::vector<std::int32_t>>* drafts)
      : ForwardingProposer(std::move(real)), drafts_(drafts) {}
  absl::Status propose(std::span<ProposalRequest> batch) override {
    BATON_RETURN_IF_ERROR(real().propose(batch));
    for (const ProposalRequest& p : batch) {
      auto& d = (*drafts_)[p.key];
      d.push_back(-1);  // a call's boundary
      d.insert(d.end(), p.drafts->begin(), p.drafts->end());
    }
    return absl::OkStatus();
  }

 private:
  std::map<RequestKey, std::vector<std::int32_t>>* drafts_;
};

struct CachedRun {
  std::map<std::string, std::vector<std::int32_t>> tokens;
  std::map<std::string, std::int32_t> cached;  // num_cached_prompt_tokens
};

// Runs the jobs one after another (each alone, so a later one can hit what an earlier one cached).
CachedRun run_one_by_one(Engine& engine, const std::vector<Job>& jobs) {
  CachedRun out;
  for (const Job& j : jobs) {
    const absl::Status added = engine.add_request(j.id, j.prompt, j.params);
    BATON_CHECK(added.ok(), added.ToString());
    while (engine.has_unfinished()) {
      auto outs = engine.step();
      BATON_CHECK(outs.ok(), outs.status().ToString());
      for (const RequestOutput& o : *outs) {
        for (const TokenOutput& t : o.new_tokens) out.tokens[o.request_id].push_back(t.token);
        if (o.finished) out.cached[o.request_id] = o.num_cached_prompt_tokens;
      }
    }
  }
  return out;
}

// Prefix caching with the proposers that draft from the target's hidden states (EAGLE, EAGLE-3,
// MTP, Medusa, DFlash): a prompt sharing a cached prefix reuses the target's blocks and the head's,
// and gives exactly the tokens, drafts and acceptances of an engine without prefix caching. A
// prompt whose first block the target's cache holds but the head's does not (it differs in the
// token right after that block, which the head's last position of the block consumed) reuses
// nothing; Medusa keeps no KV, and DFlash's context KV at a position depends on the tokens up to
// it only, as the target's does, so both reuse whatever the target's cache holds.
TEST(SpecEngine, PrefixCachingWithHiddenStateProposersReusesTheHeadsKv) {
  for (const MethodCase& m : method_cases()) {
    const bool medusa = m.label.starts_with("medusa");  // no KV of its own: it reuses what the target does
    const bool dflash = m.label.starts_with("dflash");  // KV keyed like the target's
    if (m.label.find("eagle") == std::string::npos && m.label.find("mtp") == std::string::npos && !medusa && !dflash) {
      continue;
    }
    std::map<RequestKey, std::vector<std::int32_t>> drafts[2];
    std::unique_ptr<Engine> engines[2];
    for (int caching = 0; caching < 2; ++caching) {
      EngineConfig c;
      c.model_dir = fixture_path(m.target);
      c.backend.num_threads = 2;
      c.kv_cache_bytes = 8 << 20;
      c.scheduler.max_num_batched_tokens = 256;
      c.scheduler.enable_prefix_caching = caching == 1;
      c.speculative = m.config(3);
      EngineHooks hooks;
      hooks.wrap_proposer = [&drafts, caching](std::unique_ptr<Proposer> p) -> std::unique_ptr<Proposer> {
        return std::make_unique<DraftRecorder>(std::move(p), &drafts[caching]);
      };
      auto e = Engine::create(c, std::move(hooks));
      ASSERT_TRUE(e.ok()) << m.label << ": " << e.status();
      engines[caching] = std::move(*e);
    }
    const std::int32_t vocab = engines[0]->model_config().vocab_size;
    std::mt19937 rng(5);
    std::vector<std::int32_t> base(50);
    for (auto& t : base) t = static_cast<std::int32_t>(3 + rng() % static_cast<unsigned>(vocab - 3));
    std::vector<Job> jobs(4);
    jobs[0].prompt = base;                                    // fills both caches
    jobs[1].prompt.assign(base.begin(), base.begin() + 40);   // 2 blocks of 16 cached, recomputes 8
    jobs[1].prompt.insert(jobs[1].prompt.end(), {7, 8, 9});
    jobs[2].prompt = base;                                    // the same prompt again: 3 blocks
    jobs[3].prompt = base;
    jobs[3].prompt[16] = base[16] == 5 ? 6 : 5;               // target block 0 matches, head block 0 does not
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      jobs[i].id = "p" + std::to_string(i);
      jobs[i].params.temperature = 0;
      jobs[i].params.max_tokens = 10;
      jobs[i].params.ignore_eos = true;
    }
    const CachedRun plain = run_one_by_one(*engines[0], jobs);
    const CachedRun cached = run_one_by_one(*engines[1], jobs);
    EXPECT_EQ(cached.tokens, plain.tokens) << m.label;
    EXPECT_EQ(drafts[1], drafts[0]) << m.label << ": the cached head KV drafts differently";
    EXPECT_EQ(engines[1]->spec_stats()->num_accepted_tokens, engines[0]->spec_stats()->num_accepted_tokens) << m.label;
    EXPECT_EQ(cached.cached.at("p0"), 0) << m.label;
    EXPECT_EQ(cached.cached.at("p1"), 32) << m.label;
    EXPECT_EQ(cached.cached.at("p2"), 48) << m.label;
    EXPECT_EQ(cached.cached.at("p3"), medusa || dflash ? 16 : 0) << m.label;
    for (const auto& [id, n] : plain.cached) EXPECT_EQ(n, 0) << m.label << " " << id;
    for (const KvPoolInfo& pool : engines[1]->kv_pools()) EXPECT_EQ(pool.used, 0) << m.label << " " << pool.name;
    if (!medusa) {
      EXPECT_GT(engines[1]->kv_pools().back().cached, 0) << m.label << ": the head's blocks were never cached";
    }
  }
}

}  // namespace
}  // namespace baton
