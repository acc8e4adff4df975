// ProposerSession over a ProposerPool, without gRPC: nodes' contexts built from deltas, drafts
// equal to the engine's own proposer on the same sequence, a suffix cache shared across nodes
// (global scope) or not (node scope), FIFO eviction of cached responses, and resync after a
// node and the sidecar disagree.
#include "proposer_node/proposer_session.h"

#include <vector>

#include "engine/spec/ngram_proposer.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

using node::v1::ContextDelta;
using node::v1::ProposerRequest;

std::vector<std::int32_t> range(std::int32_t from, std::int32_t to) {  // [from, to)
  std::vector<std::int32_t> v;
  for (std::int32_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

std::vector<std::int32_t> cat(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::unique_ptr<ProposerSession> open(ProposerPool& pool, const std::string& config, const std::string& node) {
  node::v1::ProposerHello hello;
  hello.set_protocol_version(kProposerProtocolVersion);
  hello.set_node_id(node);
  hello.set_speculative_config(config);
  auto s = ProposerSession::open(pool, hello, 1 << 20);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

void delta(ProposerRequest& m, std::uint64_t id, ContextDelta::Kind kind, const std::vector<std::int32_t>& tokens = {},
           std::int32_t prompt_len = 0) {
  ContextDelta* d = m.add_deltas();
  d->set_request(id);
  d->set_kind(kind);
  d->mutable_tokens()->Add(tokens.begin(), tokens.end());
  d->set_prompt_len(prompt_len);
}

void send(ProposerSession& s, ProposerRequest m) { EXPECT_FALSE(s.handle(m).has_value()); }

// The drafts for one request (its context length as the node knows it), or the error.
struct Drafts {
  std::vector<std::int32_t> tokens;
  std::string error;
};
Drafts propose(ProposerSession& s, std::uint64_t id, std::int64_t num_tokens, std::int32_t max_drafts,
               ProposerRequest m = {}) {
  m.set_step(42);
  node::v1::ProposeItem* item = m.add_propose();
  item->set_request(id);
  item->set_max_drafts(max_drafts);
  item->set_num_tokens(num_tokens);
  std::optional<node::v1::ProposerReply> reply = s.handle(m);
  EXPECT_TRUE(reply.has_value());
  EXPECT_EQ(reply->step(), 42u);
  EXPECT_EQ(reply->drafts_size(), 1);
  return {{reply->drafts(0).tokens().begin(), reply->drafts(0).tokens().end()}, reply->drafts(0).error()};
}

constexpr const char* kSuffix = R"({"method":"suffix","num_speculative_tokens":8})";

TEST(ProposerSession, HelloIsChecked) {
  ProposerPool pool({});
  node::v1::ProposerHello hello;
  hello.set_protocol_version(99);
  hello.set_speculative_config(kSuffix);
  EXPECT_EQ(ProposerSession::open(pool, hello, 100).status().code(), absl::StatusCode::kFailedPrecondition);
  hello.set_protocol_version(kProposerProtocolVersion);
  hello.set_speculative_config(R"({"method":"eagle3","model":"/x","num_speculative_tokens":2})");
  const absl::Status s = ProposerSession::open(pool, hello, 100).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ngram and suffix"), std::string_view::npos) << s.message();
  hello.set_speculative_config("not json");
  EXPECT_EQ(ProposerSession::open(pool, hello, 100).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProposerSession, NgramDraftsEqualTheEnginesProposerOnTheSameSequence) {
  ProposerPool pool({});
  auto s = open(pool, R"({"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3})", "a");
  NgramProposer reference(1, 3, 4);
  const std::vector<std::int32_t> prompt = {5, 6, 7, 8, 5, 6, 9, 5, 6, 7, 1, 2, 3, 5};
  reference.add_request(1, prompt);
  ProposerRequest add;
  delta(add, 9, ContextDelta::ADD, prompt, static_cast<std::int32_t>(prompt.size()));
  std::vector<std::int32_t> context = prompt;
  ProposerRequest first = add;
  for (const std::vector<std::int32_t>& accepted : std::vector<std::vector<std::int32_t>>{{}, {6}, {7, 8}, {5, 6, 9}}) {
    ProposerRequest m = first;
    first.Clear();
    if (!accepted.empty()) delta(m, 9, ContextDelta::APPEND, accepted);
    context.insert(context.end(), accepted.begin(), accepted.end());
    std::vector<std::int32_t> expected;
    ProposalRequest p;
    p.key = 1;
    p.tokens = context;
    p.prompt_len = static_cast<std::int32_t>(prompt.size());
    p.max_drafts = 4;
    p.drafts = &expected;
    ASSERT_TRUE(reference.propose(std::span<ProposalRequest>(&p, 1)).ok());
    const Drafts got = propose(*s, 9, static_cast<std::int64_t>(context.size()), 4, m);
    EXPECT_EQ(got.error, "");
    EXPECT_EQ(got.tokens, expected) << "after " << context.size() << " tokens";
  }
  EXPECT_EQ(s->contexts().num_tokens(), static_cast<std::int64_t>(context.size()));
}

// One node's finished response drafts another node's request (global scope); with per-node
// scope it does not.
void one_node_teaches_another(CacheScope scope) {
  ProposerPool pool({scope, /*max_cached_requests=*/10});
  auto a = open(pool, kSuffix, "a");
  auto b = open(pool, kSuffix, "b");
  const std::vector<std::int32_t> response = range(1000, 1020);
  ProposerRequest m;
  delta(m, 1, ContextDelta::ADD, {7, 8}, 2);
  delta(m, 1, ContextDelta::APPEND, response);
  delta(m, 1, ContextDelta::FINISH);
  send(*a, m);

  // B's prompt ends with the first 8 tokens of A's response; nothing in B's own context follows them.
  const std::vector<std::int32_t> prompt = cat({9, 9}, range(1000, 1008));
  ProposerRequest add;
  delta(add, 1, ContextDelta::ADD, prompt, static_cast<std::int32_t>(prompt.size()));
  const Drafts got = propose(*b, 1, static_cast<std::int64_t>(prompt.size()), 6, add);
  EXPECT_EQ(got.error, "");
  if (scope == CacheScope::kGlobal) {
    EXPECT_EQ(got.tokens, range(1008, 1014));
  } else {
    EXPECT_TRUE(got.tokens.empty());
  }
}

TEST(ProposerSession, GlobalScopeSharesFinishedResponsesAcrossNodes) { one_node_teaches_another(CacheScope::kGlobal); }
TEST(ProposerSession, NodeScopeKeepsCachesApart) { one_node_teaches_another(CacheScope::kNode); }

TEST(ProposerSession, GlobalCacheEvictsTheOldestResponseFirst) {
  // Running responses hold a place too (suffix_proposer.h), so B's asking request needs one.
  ProposerPool pool({CacheScope::kGlobal, /*max_cached_requests=*/3});
  auto a = open(pool, kSuffix, "a");
  auto b = open(pool, kSuffix, "b");
  const auto finish = [&](std::uint64_t id, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& out) {
    ProposerRequest m;
    delta(m, id, ContextDelta::ADD, prompt, static_cast<std::int32_t>(prompt.size()));
    delta(m, id, ContextDelta::APPEND, out);
    delta(m, id, ContextDelta::FINISH);
    send(*a, m);
  };
  const auto ask = [&](std::uint64_t id) {
    const std::vector<std::int32_t> prompt = cat({9}, range(1000, 1008));
    ProposerRequest m;
    delta(m, id, ContextDelta::ADD, prompt, static_cast<std::int32_t>(prompt.size()));
    Drafts d = propose(*b, id, static_cast<std::int64_t>(prompt.size()), 4, m);
    ProposerRequest done;
    delta(done, id, ContextDelta::FINISH);  // an empty response gives its cache place back
    send(*b, done);
    return d.tokens;
  };
  finish(1, {7}, range(1000, 1020));
  EXPECT_EQ(ask(1), range(1008, 1012));
  finish(2, {7}, range(2000, 2010));  // cached: 1, 2 (+ B's asking request)
  EXPECT_EQ(ask(2), range(1008, 1012)) << "response 1 is still cached";
  finish(3, {7}, range(3000, 3010));  // cached: 1, 2, 3; B's next request evicts 1, the oldest
  EXPECT_TRUE(ask(3).empty()) << "response 1 should have been evicted";
}

TEST(ProposerSession, OutOfSyncRequestIsDroppedUntilResynced) {
  ProposerPool pool({});
  auto s = open(pool, R"({"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":1})", "a");
  const std::vector<std::int32_t> prompt = {1, 2, 3, 1, 2};
  ProposerRequest add;
  delta(add, 4, ContextDelta::ADD, prompt, 5);
  Drafts d = propose(*s, 4, 6, 2, add);  // the node says 6 tokens, the sidecar has 5
  EXPECT_NE(d.error.find("out of sync"), std::string::npos) << d.error;
  ProposerRequest append;
  delta(append, 4, ContextDelta::APPEND, {3});
  d = propose(*s, 4, 6, 2, append);
  EXPECT_NE(d.error.find("not known"), std::string::npos) << d.error;
  ProposerRequest resync;
  delta(resync, 4, ContextDelta::ADD, {1, 2, 3, 1, 2, 3}, 5);
  d = propose(*s, 4, 6, 2, resync);
  EXPECT_EQ(d.error, "");
  EXPECT_EQ(d.tokens, (std::vector<std::int32_t>{1, 2}));
}

}  // namespace
}  // namespace baton
