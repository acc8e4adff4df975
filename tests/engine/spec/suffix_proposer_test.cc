// The suffix decoding proposer: local vs global tree, the global cache fed as responses are
// generated, FIFO eviction under the cap, aborts and resets, against brute-force references.
#include "engine/spec/suffix_proposer.h"

#include "gtest/gtest.h"
#include "tests/engine/spec/proposer_test_support.h"

namespace baton {
namespace {

using namespace ::baton::testing;  // the helpers these proposer tests share

SuffixProposerConfig suffix_config(int depth, int cached, int k = 16) {
  SuffixProposerConfig c;
  c.max_spec_tokens = k;
  c.max_tree_depth = depth;
  c.max_cached_requests = cached;
  return c;
}

// Adds a request, lets the proposer see prompt + output, and removes it.
void run_request(SuffixProposer& p, RequestKey key, const Tokens& prompt, const Tokens& output,
                 bool finished) {
  p.add_request(key, prompt);
  Tokens all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  propose_one(p, key, all, static_cast<std::int32_t>(prompt.size()), 0);
  p.remove_request(key, finished);
}

TEST(SuffixProposer, GlobalTreeLearnsOnlyFinishedOutputs) {
  SuffixProposer p(suffix_config(8, 10));
  run_request(p, 1, {10, 11, 12}, {1, 2, 3, 4, 5, 6}, /*finished=*/false);
  EXPECT_EQ(p.global_tree().num_sequences(), 0);
  run_request(p, 2, {10, 11, 12}, {1, 2, 3, 4, 5, 6}, /*finished=*/true);
  EXPECT_EQ(p.global_tree().num_sequences(), 1);
  EXPECT_EQ(p.global_tree().count({}), 6);     // the output only
  EXPECT_EQ(p.global_tree().count(Tokens{10}), 0);   // not the prompt
  EXPECT_EQ(p.local_tree(2), nullptr);

  // A new request whose tail "1 2 3" only the global tree can continue.
  p.add_request(3, Tokens{9, 1, 2, 3});
  EXPECT_EQ(propose_one(p, 3, {9, 1, 2, 3}, 4, 8), (Tokens{4, 5, 6}));
}

TEST(SuffixProposer, LocalTreeWinsTiesAndLosesToABetterGlobalProposal) {
  SuffixProposer p(suffix_config(8, 10));
  // Global: "1 2 3" → 4 5 6 once out of twice (0.5 per token, score 1.5).
  run_request(p, 1, {}, {1, 2, 3, 4, 5, 6, 1, 2, 3}, true);
  // Local: "1 2 3" → 7 8 9 once out of twice (the context's own end is the other): also 1.5.
  p.add_request(2, Tokens{1, 2, 3, 7, 8, 9, 0, 1, 2, 3});
  EXPECT_EQ(propose_one(p, 2, {1, 2, 3, 7, 8, 9, 0, 1, 2, 3}, 10, 3), (Tokens{7, 8, 9}));
  // Local: "2 3" → 7 0 at 0.5 each (score 1.0); the global 4 5 6 scores 1.5.
  p.add_request(3, Tokens{2, 3, 7, 0, 1, 2, 3});
  EXPECT_EQ(propose_one(p, 3, {2, 3, 7, 0, 1, 2, 3}, 7, 3), (Tokens{4, 5, 6}));
}

TEST(SuffixProposer, FifoEvictionTakesOutTheOldestOutput) {
  SuffixProposer p(suffix_config(6, 2));
  const Tokens outs[] = {{1, 2, 3, 1, 2}, {2, 3, 4, 2, 3, 1}, {3, 1, 2, 3, 4}};
  run_request(p, 1, {9}, outs[0], true);
  run_request(p, 2, {9}, outs[1], true);
  EXPECT_EQ(p.num_cached_requests(), 2);
  run_request(p, 3, {9}, outs[2], true);
  EXPECT_EQ(p.num_cached_requests(), 2);
  EXPECT_EQ(p.global_tree().num_sequences(), 2);
  // Counts are those of the last two outputs alone, node for node.
  SuffixReference ref(6);
  ref.add(outs[1]);
  ref.add(outs[2]);
  expect_same_counts(p.global_tree(), ref, 10);
  SuffixTree fresh(6);
  fresh.extend(fresh.add_sequence(), outs[1]);
  fresh.extend(fresh.add_sequence(), outs[2]);
  EXPECT_EQ(p.global_tree().num_nodes(), fresh.num_nodes());
}

TEST(SuffixProposer, NoGlobalTreeWhenMaxCachedRequestsIsZero) {
  SuffixProposer p(suffix_config(8, 0));
  run_request(p, 1, {}, {1, 2, 3, 4, 5, 6}, true);
  EXPECT_EQ(p.global_tree().num_sequences(), 0);
  EXPECT_EQ(p.num_cached_requests(), 0);
  p.add_request(2, Tokens{9, 1, 2, 3});
  EXPECT_TRUE(propose_one(p, 2, {9, 1, 2, 3}, 4, 8).empty());
}

TEST(SuffixProposer, RunningRequestsPartialOutputIsProposedFromBeforeItFinishes) {
  SuffixProposer p(suffix_config(8, 10));
  p.add_request(1, Tokens{10, 11, 12});
  propose_one(p, 1, {10, 11, 12, 1, 2, 3, 4, 5, 6}, 3, 0);  // request 1 has produced 1..6
  ASSERT_NE(p.local_tree(1), nullptr);                       // and is still running
  EXPECT_EQ(p.num_cached_requests(), 1);
  EXPECT_EQ(p.global_tree().count({}), 6);        // its output so far
  EXPECT_EQ(p.global_tree().count(Tokens{10}), 0);  // not its prompt

  // Request 2's tail "1 2 3" only request 1's partial output can continue.
  p.add_request(2, Tokens{9, 1, 2, 3});
  EXPECT_EQ(propose_one(p, 2, {9, 1, 2, 3}, 4, 8), (Tokens{4, 5, 6}));
  // Request 1 goes on; request 2 accepted 4 5 6 and is proposed the newest tokens of request 1.
  propose_one(p, 1, {10, 11, 12, 1, 2, 3, 4, 5, 6, 7, 8}, 3, 0);
  EXPECT_EQ(propose_one(p, 2, {9, 1, 2, 3, 4, 5, 6}, 4, 8), (Tokens{7, 8}));
  ASSERT_NE(p.local_tree(1), nullptr);
  EXPECT_TRUE(p.global_tree().validate().ok()) << p.global_tree().validate();
}

TEST(SuffixProposer, CapEvictsTheOldestResponseEvenWhileItsRequestRuns) {
  SuffixProposer p(suffix_config(6, 2));
  p.add_request(1, Tokens{9});
  propose_one(p, 1, {9, 1, 2, 3}, 1, 0);
  p.add_request(2, Tokens{9});
  propose_one(p, 2, {9, 4, 5}, 1, 0);
  EXPECT_EQ(p.num_cached_requests(), 2);
  EXPECT_EQ(p.global_tree().count(Tokens{1, 2, 3}), 1);
  // A third request takes the oldest place: request 1's, though request 1 still runs.
  p.add_request(3, Tokens{9});
  EXPECT_EQ(p.num_cached_requests(), 2);
  EXPECT_EQ(p.global_tree().count(Tokens{1}), 0);
  EXPECT_EQ(p.global_tree().count(Tokens{4, 5}), 1);
  // Request 1 still drafts from both trees, but its new tokens no longer teach the global one.
  EXPECT_EQ(propose_one(p, 1, {9, 1, 2, 3, 4}, 1, 2), (Tokens{5}));  // from request 2's response
  EXPECT_EQ(p.global_tree().count(Tokens{3, 4}), 0);
  p.remove_request(1, /*finished=*/true);
  EXPECT_EQ(p.num_cached_requests(), 2);  // requests 2 and 3
  EXPECT_EQ(p.global_tree().count({}), 2);
  EXPECT_TRUE(p.global_tree().validate().ok()) << p.global_tree().validate();
}

TEST(SuffixProposer, AbortDropsTheResponseAndReAddingIsAReset) {
  SuffixProposer p(suffix_config(8, 10));
  p.add_request(1, Tokens{9});
  propose_one(p, 1, {9, 1, 2, 3}, 1, 0);
  EXPECT_EQ(p.global_tree().count({}), 3);
  p.remove_request(1, /*finished=*/false);
  EXPECT_EQ(p.num_cached_requests(), 0);
  EXPECT_EQ(p.global_tree().num_nodes(), 1);

  // Re-adding a running request (a reset) replaces its response: fed again, counted once.
  p.add_request(2, Tokens{9});
  propose_one(p, 2, {9, 4, 5, 6}, 1, 0);
  p.add_request(2, Tokens{9, 4, 5});
  propose_one(p, 2, {9, 4, 5, 6, 7}, 1, 0);
  EXPECT_EQ(p.num_cached_requests(), 1);
  EXPECT_EQ(p.global_tree().count(Tokens{4, 5, 6, 7}), 1);
  EXPECT_EQ(p.global_tree().count({}), 4);

  // A request that finishes with no output gives its place back.
  p.add_request(3, Tokens{9});
  EXPECT_EQ(p.num_cached_requests(), 2);
  p.remove_request(3, /*finished=*/true);
  EXPECT_EQ(p.num_cached_requests(), 1);
}

TEST(SuffixProposer, NoGlobalTreeWhileRequestsRunWhenMaxCachedRequestsIsZero) {
  SuffixProposer p(suffix_config(8, 0));
  p.add_request(1, Tokens{10});
  p.add_request(2, Tokens{9, 1, 2, 3});
  propose_one(p, 1, {10, 1, 2, 3, 4, 5, 6}, 1, 4);
  EXPECT_EQ(p.num_cached_requests(), 0);
  EXPECT_EQ(p.global_tree().num_sequences(), 0);
  EXPECT_EQ(p.global_tree().num_nodes(), 1);
  EXPECT_TRUE(propose_one(p, 2, {9, 1, 2, 3}, 4, 8).empty());  // request 1's output is not shared
  p.remove_request(1, true);
  EXPECT_EQ(p.global_tree().num_nodes(), 1);
  EXPECT_TRUE(propose_one(p, 2, {9, 1, 2, 3}, 4, 8).empty());
}

// Requests start, grow a few tokens per step interleaved, and finish or abort, against a model of
// the FIFO of cached responses: after every call the global tree holds exactly the model's
// responses (counts node for node; memory bounded by the cap), and every proposal is the brute
// force best of the request's context and the model's responses.
TEST(SuffixProposer, InterleavedRequestsMatchAFifoModelOfTheGlobalCache) {
  std::mt19937 rng(41);
  constexpr int kAlphabet = 4;
  constexpr int kDepth = 5;
  constexpr int kMaxOutput = 30;
  for (int trial = 0; trial < 30; ++trial) {
    const int cap = 1 + trial % 3;
    SuffixProposerConfig config = suffix_config(kDepth, cap, 4);
    SuffixProposer p(config);
    struct Cached {
      RequestKey key;
      Tokens response;
    };
    std::vector<Cached> model;  // oldest first
    struct Running {
      RequestKey key;
      Tokens all;  // prompt + planned output
      std::size_t prompt_len, len;
      bool finishes;
    };
    std::vector<Running> running;
    RequestKey next_key = 1;
    auto find_cached = [&](RequestKey key) {
      return std::find_if(model.begin(), model.end(), [&](const Cached& c) { return c.key == key; });
    };
    auto check = [&] {
      ASSERT_EQ(p.num_cached_requests(), static_cast<std::int32_t>(model.size()));
      ASSERT_LE(p.num_cached_requests(), cap);
      const SuffixTree& g = p.global_tree();
      ASSERT_EQ(g.num_sequences(), static_cast<std::int32_t>(model.size()));
      SuffixReference ref(kDepth);
      SuffixTree fresh(kDepth);
      std::int64_t held = 0;
      for (const Cached& c : model) {
        ref.add(c.response);
        fresh.extend(fresh.add_sequence(), c.response);
        held += static_cast<std::int64_t>(c.response.size());
      }
      expect_same_counts(g, ref, kAlphabet);
      EXPECT_EQ(g.num_nodes(), fresh.num_nodes());
      EXPECT_LE(held, static_cast<std::int64_t>(cap) * kMaxOutput);
      EXPECT_LE(g.num_nodes(), 1 + 2 * held + kDepth * cap);
    };
    while (next_key <= 25 || !running.empty()) {
      if (next_key <= 25 && running.size() < 4 && rng() % 2 == 0) {
        const Tokens prompt = random_tokens(rng, 3, kAlphabet);
        Running r{next_key++, prompt, prompt.size(), prompt.size(), rng() % 5 != 0};
        const Tokens out = random_tokens(rng, static_cast<int>(rng() % (kMaxOutput + 1)), kAlphabet);
        r.all.insert(r.all.end(), out.begin(), out.end());
        p.add_request(r.key, prompt);
        while (static_cast<int>(model.size()) >= cap) model.erase(model.begin());
        model.push_back({r.key, {}});
        running.push_back(std::move(r));
        check();
      }
      if (running.empty()) continue;
      const std::size_t i = rng() % running.size();
      Running& r = running[i];
      if (r.len == r.all.size()) {
        p.remove_request(r.key, r.finishes);
        const auto c = find_cached(r.key);
        if (c != model.end() && (!r.finishes || c->response.empty())) model.erase(c);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        check();
        continue;
      }
      const std::size_t old_len = r.len;
      r.len = std::min(r.all.size(), r.len + 1 + rng() % 3);
      const Tokens ctx(r.all.begin(), r.all.begin() + static_cast<std::ptrdiff_t>(r.len));
      if (const auto c = find_cached(r.key); c != model.end()) {
        c->response.insert(c->response.end(), ctx.begin() + static_cast<std::ptrdiff_t>(old_len), ctx.end());
      }
      const int max_drafts = static_cast<int>(rng() % 5);
      SuffixSpeculation want;
      if (max_drafts > 0) {
        SuffixReference local(kDepth);
        local.add(ctx);
        SuffixReference global(kDepth);
        for (const Cached& c : model) global.add(c.response);
        want = local.speculate(ctx, max_drafts, config.max_spec_factor, config.min_token_prob, kAlphabet);
        const SuffixSpeculation g =
            global.speculate(ctx, max_drafts, config.max_spec_factor, config.min_token_prob, kAlphabet);
        if (g.score > want.score) want = g;
      }
      ASSERT_EQ(propose_one(p, r.key, ctx, static_cast<std::int32_t>(r.prompt_len), max_drafts), want.tokens)
          << "trial " << trial << " request " << r.key;
      check();
      if (::testing::Test::HasFailure()) FAIL() << "trial " << trial;
    }
  }
}

TEST(SuffixProposer, IncrementalLocalTreeEqualsOneBuiltFromScratch) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int depth = 2 + trial % 6;
    SuffixProposer p(suffix_config(depth, 0, 5));
    const Tokens all = random_tokens(rng, 60, 3);
    std::size_t len = 10;
    p.add_request(1, std::span<const std::int32_t>(all).first(len));
    while (len < all.size()) {
      len = std::min(all.size(), len + 1 + rng() % 3);
      const Tokens ctx(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(len));
      const Tokens drafts = propose_one(p, 1, ctx, 10, 5);
      SuffixTree fresh(depth);
      fresh.extend(fresh.add_sequence(), ctx);
      const SuffixTree& local = *p.local_tree(1);
      ASSERT_TRUE(local.validate().ok()) << local.validate();
      EXPECT_EQ(local.num_nodes(), fresh.num_nodes());
      SuffixReference ref(depth);
      ref.add(ctx);
      expect_same_counts(local, ref, 3);
      EXPECT_EQ(drafts, fresh.speculate(ctx, 5, 1.0f, 0.1f).tokens);
      expect_same_speculation(local.speculate_tail(0, 5, 1.0f, 0.1f), fresh.speculate(ctx, 5, 1.0f, 0.1f));
      if (::testing::Test::HasFailure()) FAIL() << "trial " << trial << " len " << len;
    }
  }
}

TEST(SuffixProposer, BestOfLocalAndGlobalMatchesBruteForce) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const int alphabet = 2 + trial % 3;
    const int depth = 1 + static_cast<int>(rng() % 6);
    const int cached = static_cast<int>(rng() % 3);
    SuffixProposerConfig config = suffix_config(depth, cached, 1 + static_cast<int>(rng() % 6));
    config.max_spec_factor = rng() % 2 ? 1.0f : 2.0f;
    config.min_token_prob = rng() % 2 ? 0.1f : 0.3f;
    SuffixProposer p(config);
    std::vector<Tokens> responses;  // finished, non-empty outputs, oldest first
    for (RequestKey key = 1; key <= 4; ++key) {
      const Tokens out = random_tokens(rng, static_cast<int>(rng() % 20), alphabet);
      const bool done = rng() % 4 != 0;
      run_request(p, key, random_tokens(rng, 3, alphabet), out, done);
      if (done && !out.empty()) responses.push_back(out);
    }
    const Tokens ctx = random_tokens(rng, 12, alphabet);
    p.add_request(99, std::span<const std::int32_t>(ctx).first(4));
    // Request 99's own response takes the newest place and holds its output before it drafts.
    responses.emplace_back(ctx.begin() + 4, ctx.end());
    SuffixReference global(depth);
    for (std::size_t i = responses.size() > static_cast<std::size_t>(cached) ? responses.size() - cached : 0;
         cached > 0 && i < responses.size(); ++i) {
      global.add(responses[i]);
    }
    SuffixReference local(depth);
    local.add(ctx);
    const int max_drafts = static_cast<int>(rng() % 6);
    const int max_tokens = std::min(config.max_spec_tokens, max_drafts);
    SuffixSpeculation want;
    if (max_tokens > 0) {
      want = local.speculate(ctx, max_tokens, config.max_spec_factor, config.min_token_prob, alphabet);
      const SuffixSpeculation g =
          global.speculate(ctx, max_tokens, config.max_spec_factor, config.min_token_prob, alphabet);
      if (g.score > want.score) want = g;
    }
    ASSERT_EQ(propose_one(p, 99, ctx, 4, max_drafts), want.tokens) << "trial " << trial;
  }
}

TEST(SuffixProposer, ErrorsForUnknownKeysAndClearsOutputs) {
  SuffixProposer p(suffix_config(8, 4));
  Tokens drafts{1, 2};
  std::vector<float> probs{0.5f};
  const Tokens t{1, 2, 1};
  ProposalRequest req{.key = 5, .tokens = t, .prompt_len = 3, .max_drafts = 2, .drafts = &drafts,
                      .draft_probs = &probs};
  EXPECT_EQ(p.propose(std::span<ProposalRequest>(&req, 1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(drafts.empty());
  EXPECT_TRUE(probs.empty());
  EXPECT_FALSE(p.has_draft_probs());
  p.add_request(5, t);
  EXPECT_TRUE(p.propose(std::span<ProposalRequest>(&req, 1)).ok());
  EXPECT_EQ(drafts, (Tokens{2}));  // "1" → 2 (1/2), one token for a match of length 1
}

}  // namespace
}  // namespace baton
