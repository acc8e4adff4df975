// One request's fault stays its own, and a server can run an engine without polling:
//   - a proposer failing for one request finishes that request (kError, with the message) while
//     the others produce exactly their fault-free tokens; nothing leaks; the id can be reused;
//   - KV that arrives corrupt (NaN) on a decode engine fails those requests, not the process;
//   - abort yields a final output; outputs carry arrival, first-token and finish times; the
//     engine reports queue depth and the usage of each KV pool;
//   - EngineLoop runs an engine on its own thread: outputs equal a direct run, it sleeps while
//     idle (wake-ups grow with work, not time) and wakes by itself for a lease deadline.
#include <condition_variable>
#include <map>
#include <mutex>

#include "engine/engine.h"
#include "engine/engine_loop.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/disaggregated.h"
#include "tests/engine/engine_jobs.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/forwarding_proposer.h"
#include "tests/engine/spec_methods.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using testing::fixture_path;
using testing::Job;
using testing::method_cases;
using testing::run_jobs;

constexpr std::int32_t kPoisonToken = 7;  // prompts starting with it make the proposer fail

// The real proposer, failing for requests whose prompt starts with kPoisonToken.
class FailingProposer final : public testing::ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  absl::Status propose(std::span<ProposalRequest> batch) override {
    std::vector<ProposalRequest> good;
    for (ProposalRequest& p : batch) {
      if (!p.tokens.empty() && p.tokens[0] == kPoisonToken && p.max_drafts > 0) {
        p.status = absl::InternalError("injected proposer fault");
        ++failures;
      } else {
        good.push_back(p);
      }
    }
    const absl::Status s = real().propose(good);
    std::size_t g = 0;
    for (ProposalRequest& p : batch) {
      if (p.status.ok()) p.status = good[g++].status;
    }
    return s;
  }
  int failures = 0;
};

std::unique_ptr<Engine> make_engine(const std::optional<SpeculativeConfig>& spec, EngineHooks hooks = {},
                                    NodeRole role = NodeRole::kColocated) {
  EngineConfig c;
  c.model_dir = fixture_path("llama-f32");
  c.backend.num_threads = 2;
  c.kv_cache_bytes = 8 << 20;
  c.scheduler.max_num_batched_tokens = 64;
  c.scheduler.max_num_seqs = 8;
  c.speculative = spec;
  c.role = role;
  auto e = Engine::create(c, std::move(hooks));
  BATON_CHECK(e.ok(), e.status().ToString());
  return std::move(*e);
}

std::vector<Job> jobs(int n, std::uint32_t seed = 3) {
  std::mt19937 rng(seed);
  std::vector<Job> out;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = "j" + std::to_string(i);
    for (int t = 0; t < 12; ++t) j.prompt.push_back(static_cast<std::int32_t>(10 + rng() % 300));
    j.params.temperature = i % 2 == 0 ? 0.0f : 0.9f;
    j.params.seed = 50 + static_cast<std::uint64_t>(i);
    j.params.max_tokens = 14;
    j.params.ignore_eos = true;
    out.push_back(j);
  }
  return out;
}

// Steps to the end; returns every output.
std::vector<RequestOutput> drain(Engine& e) {
  std::vector<RequestOutput> all;
  while (e.has_unfinished()) {
    auto outs = e.step();
    BATON_CHECK(outs.ok(), outs.status().ToString());
    for (RequestOutput& o : *outs) all.push_back(std::move(o));
  }
  return all;
}

TEST(Faults, AFailingProposerFinishesOneRequestAndNotTheBatch) {
  const SpeculativeConfig spec = method_cases()[2].config(3);  // draft_model
  const std::vector<Job> clean_jobs = jobs(6);
  auto clean = make_engine(spec);
  const auto want = run_jobs(*clean, clean_jobs);

  FailingProposer* faulty = nullptr;
  EngineHooks hooks;
  hooks.wrap_proposer = [&](std::unique_ptr<Proposer> real) {
    auto p = std::make_unique<FailingProposer>(std::move(real));
    faulty = p.get();
    return std::unique_ptr<Proposer>(std::move(p));
  };
  auto e = make_engine(spec, hooks);
  Job bad = clean_jobs[1];
  bad.id = "bad";
  bad.prompt[0] = kPoisonToken;
  for (const Job& j : clean_jobs) ASSERT_TRUE(e->add_request(j.id, j.prompt, j.params).ok());
  ASSERT_TRUE(e->add_request(bad.id, bad.prompt, bad.params).ok());
  std::map<std::string, std::vector<std::int32_t>> got;
  const RequestOutput* bad_final = nullptr;
  const std::vector<RequestOutput> all = drain(*e);
  for (const RequestOutput& o : all) {
    for (const TokenOutput& t : o.new_tokens) got[o.request_id].push_back(t.token);
    if (o.request_id == "bad" && o.finished) bad_final = &o;
  }
  ASSERT_NE(bad_final, nullptr);
  EXPECT_EQ(bad_final->finish_reason, FinishReason::kError);
  EXPECT_THAT(bad_final->error, HasSubstr("injected proposer fault"));
  EXPECT_EQ(got["bad"].size(), 1u) << "it fails when drafting after its first token";
  for (const Job& j : clean_jobs) EXPECT_EQ(got.at(j.id), want.at(j.id)) << j.id;
  EXPECT_EQ(e->stats().request_faults, 1);
  EXPECT_GE(faulty->failures, 1);
  for (const KvPoolInfo& p : e->kv_pools()) EXPECT_EQ(p.used, 0) << p.name;

  // The id is free again (and the same fault finishes it again, alone).
  ASSERT_TRUE(e->add_request(bad.id, bad.prompt, bad.params).ok());
  const std::vector<RequestOutput> again = drain(*e);
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again.back().finish_reason, FinishReason::kError);
  EXPECT_EQ(e->stats().request_faults, 2);
}

TEST(Faults, CorruptKvFailsItsRequestsNotTheDecodeEngine) {
  auto p = make_engine(std::nullopt, {}, NodeRole::kPrefill);
  auto d = make_engine(std::nullopt, {}, NodeRole::kDecode);
  testing::poison_pools(*d);
  const std::vector<Job> js = jobs(3);
  ASSERT_TRUE(d->add_request("local", js[2].prompt, js[2].params).ok());  // a local prefill on D
  auto r = d->reserve(js[0].id, static_cast<std::int32_t>(js[0].prompt.size()));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(p->add_request(js[0].id, js[0].prompt, js[0].params, {.prefill_only = true}).ok());
  auto outs = p->step();
  ASSERT_TRUE(outs.ok());
  ASSERT_TRUE((*outs)[0].handoff.has_value());
  // Commit without transferring the KV: D's blocks hold NaN.
  ASSERT_TRUE(d->commit(js[0].id, *(*outs)[0].handoff).ok());
  ASSERT_TRUE(p->release(js[0].id).ok());
  std::map<std::string, FinishReason> finish;
  std::map<std::string, std::string> errors;
  for (const RequestOutput& o : drain(*d)) {
    if (!o.finished) continue;
    finish[o.request_id] = o.finish_reason;
    errors[o.request_id] = o.error;
  }
  EXPECT_EQ(finish[js[0].id], FinishReason::kError);
  EXPECT_THAT(errors[js[0].id], HasSubstr("NaN"));
  EXPECT_EQ(finish["local"], FinishReason::kLength);
  EXPECT_EQ(d->block_pool().num_in_use(), 0);
}

TEST(Outputs, AbortReportsAFinalOutputAndTimesAreOrdered) {
  auto e = make_engine(std::nullopt);
  const std::vector<Job> js = jobs(3);
  for (const Job& j : js) ASSERT_TRUE(e->add_request(j.id, j.prompt, j.params).ok());
  EXPECT_EQ(e->num_waiting(), 3u);
  auto first = e->step();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(e->num_running(), 3u);
  EXPECT_EQ(e->num_waiting(), 0u);
  const KvPoolInfo target = e->kv_pools().front();
  EXPECT_EQ(target.name, "target");
  EXPECT_EQ(target.used, 3);  // 12 prompt tokens + 1 output: one block each
  EXPECT_EQ(target.used + target.free, target.num_blocks);

  e->abort(js[1].id);
  e->abort("no-such-request");
  std::map<std::string, RequestOutput> last;
  for (RequestOutput& o : drain(*e)) last[o.request_id] = std::move(o);
  ASSERT_TRUE(last.contains(js[1].id));
  EXPECT_TRUE(last[js[1].id].finished);
  EXPECT_EQ(last[js[1].id].finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(last.contains("no-such-request"));
  for (const Job& j : {js[0], js[2]}) {
    const RequestOutput& o = last[j.id];
    EXPECT_EQ(o.finish_reason, FinishReason::kLength);
    EXPECT_LE(o.arrival_time, o.first_token_time);
    EXPECT_LE(o.first_token_time, o.finish_time);
    EXPECT_NE(o.finish_time, EngineClock::time_point{});
  }
  EXPECT_EQ(e->block_pool().num_in_use(), 0);
}

// ---------------------------------------------------------------------------------------------
// EngineLoop

// Collects outputs from the loop thread; waits (with a deadline) for a condition on them.
struct Collector {
  std::mutex mu;
  std::condition_variable changed;
  std::map<std::string, std::vector<std::int32_t>> tokens;
  std::map<std::string, RequestOutput> finals;

  void add(std::vector<RequestOutput>&& outs) {
    std::lock_guard<std::mutex> lock(mu);
    for (RequestOutput& o : outs) {
      for (const TokenOutput& t : o.new_tokens) tokens[o.request_id].push_back(t.token);
      if (o.finished) finals[o.request_id] = std::move(o);
    }
    changed.notify_all();
  }
  bool wait_for_finals(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return changed.wait_for(lock, std::chrono::seconds(60), [&] { return finals.size() >= n; });
  }
};

TEST(EngineLoop, RunsRequestsFromOtherThreadsAndSleepsWhenIdle) {
  const std::vector<Job> js = jobs(5, 11);
  auto direct = make_engine(std::nullopt);
  const auto want = run_jobs(*direct, js);

  Collector c;
  EngineLoop loop(make_engine(std::nullopt), [&](std::vector<RequestOutput>&& o) { c.add(std::move(o)); });
  std::vector<std::thread> clients;
  for (const Job& j : js) {
    clients.emplace_back([&loop, j] {
      auto added = loop.call([j](Engine& e) { return e.add_request(j.id, j.prompt, j.params); });
      BATON_CHECK(added.get().ok(), "add_request");
    });
  }
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(c.wait_for_finals(js.size()));
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (const Job& j : js) EXPECT_EQ(c.tokens[j.id], want.at(j.id)) << j.id;
  }
  // Idle now: a round trip through the loop costs a wake-up or two, however long it takes.
  const std::uint64_t before = loop.iterations();
  EXPECT_FALSE(loop.call([](Engine& e) { return e.has_work(); }).get());
  EXPECT_FALSE(loop.call([](Engine& e) { return e.has_work(); }).get());
  EXPECT_LE(loop.iterations() - before, 4u) << "the loop polls while idle";
  loop.stop();
}

TEST(EngineLoop, WakesByItselfForALeaseDeadline) {
  EngineConfig cfg;
  cfg.model_dir = fixture_path("llama-f32");
  cfg.backend.num_threads = 1;
  cfg.kv_cache_bytes = 4 << 20;
  cfg.role = NodeRole::kDecode;
  cfg.handoff_lease = std::chrono::milliseconds(50);
  auto engine = Engine::create(cfg);
  ASSERT_TRUE(engine.ok());
  Collector c;
  EngineLoop loop(std::move(*engine), [&](std::vector<RequestOutput>&& o) { c.add(std::move(o)); });
  ASSERT_TRUE(loop.call([](Engine& e) { return e.reserve("r", 20).status(); }).get().ok());
  ASSERT_TRUE(c.wait_for_finals(1)) << "the reservation's expiry was never reported";
  std::lock_guard<std::mutex> lock(c.mu);
  EXPECT_EQ(c.finals["r"].finish_reason, FinishReason::kError);
  EXPECT_THAT(c.finals["r"].error, HasSubstr("lease"));
}

}  // namespace
}  // namespace baton
