// Through router -> prefill node -> decode node, with real processes on loopback and the KV moved
// by the real UCX or gRPC transport, every request yields exactly what one local engine yields
// (`baton generate`): greedy tokens and text for no speculation and every method, and seeded
// sampled tokens (temperature 0.8, ten seeds) too; and the same with both nodes' backends acting
// like a GPU's memory, where the KV leaves and arrives through host mirrors of the pools; and with
// BF16 KV caches on both nodes, against a local engine with a BF16 cache; and with the decode
// node choosing its draft lengths (adaptive_draft_length). A repeated prompt is served from the
// prefix cache (the head's included) with the same tokens.
#include <gtest/gtest.h>

#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

struct Case {
  SpecCase spec;
  std::string transport;
  // Both nodes' CPU backends act like a GPU's memory: the KV goes through host mirrors.
  bool discrete_memory = false;
  // Both nodes replay decode and verification steps from graphs, as on a GPU.
  bool graphs = false;
  // Both nodes (and the local reference) keep their KV caches in BF16.
  bool bf16_kv = false;
  std::string name() const {
    return spec.label + "_" + transport + (discrete_memory ? "_host_mirrors" : "") + (graphs ? "_graphs" : "") +
           (bf16_kv ? "_bf16_kv" : "");
  }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.spec.label << " over " << c.transport << (c.discrete_memory ? " through host mirrors" : "")
      << (c.graphs ? " with graphs" : "") << (c.bf16_kv ? " with BF16 KV" : "");
}

class ServingEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(ServingEquivalence, DisaggregatedEqualsLocal) {
  const Case& c = GetParam();
  std::vector<std::string> prompts = code_prompts();
  std::vector<SamplingParams> params(prompts.size());
  for (SamplingParams& p : params) {
    p.temperature = 0.0f;
    p.max_tokens = 40;
  }
  // Ten seeded samples of one prompt.
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    prompts.push_back(code_prompts()[seed % 3]);
    SamplingParams p;
    p.temperature = 0.8f;
    p.max_tokens = 24;
    p.seed = seed * 7919;
    params.push_back(p);
  }
  const std::vector<LocalResult> expected =
      run_local(c.spec.config, prompts, params, c.bf16_kv ? std::optional(DType::kBF16) : std::nullopt);

  cli::ClusterOptions options = cluster_options(c.spec.config, c.transport, c.name());
  if (c.discrete_memory) options.node_args.push_back("--testing-cpu-discrete-memory");
  if (c.graphs) {
    options.node_args.push_back("--graphs");
    options.node_args.push_back("on");
  }
  if (c.bf16_kv) {
    options.node_args.push_back("--kv-cache-dtype");
    options.node_args.push_back("bfloat16");
  }
  auto cluster = cli::LocalCluster::start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  if (c.discrete_memory) {
    // The nodes really stage their KV, or this case would test nothing new.
    for (cli::ClusterProcess* p : (*cluster)->nodes("prefill")) EXPECT_TRUE(node_info(*prefill_stub(p->address)).kv_host_mirrors());
    for (cli::ClusterProcess* p : (*cluster)->nodes("decode")) EXPECT_TRUE(node_info(*decode_stub(p->address)).kv_host_mirrors());
  }
  std::vector<v1::GenerateRequest> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) requests.push_back(text_request(prompts[i], params[i]));
  const std::vector<Completion> got = generate_all(*stub, requests);
  std::int64_t drafts = 0, accepted_total = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, expected[i].ids);
    EXPECT_EQ(got[i].text, expected[i].text);
    EXPECT_EQ(finish_reason_from_proto(got[i].finish_reason), expected[i].finish_reason);
    EXPECT_FALSE(got[i].usage.local_prefill()) << "the router prefilled on the decode node";
    EXPECT_EQ(got[i].usage.transport(), c.transport);
    EXPECT_EQ(got[i].usage.completion_tokens(), static_cast<int>(expected[i].ids.size()));
    // A model-based proposer drafts at every step (unless an adaptive draft length chose not to);
    // n-gram and suffix lookup draft only where they find a match (checked over the batch below).
    const bool drafts_always = c.spec.label == "draft_model" || c.spec.label == "eagle3" || c.spec.label == "mtp" ||
                               c.spec.label == "medusa" || c.spec.label == "dflash";
    if (drafts_always && expected[i].ids.size() > 2) {
      EXPECT_GT(got[i].usage.speculation().num_drafts(), 0);
    }
    drafts += got[i].usage.speculation().num_drafts();
    accepted_total += got[i].usage.speculation().num_accepted_tokens();
    // Per position and by draft length, from the decode node to the client: the positions add up
    // to the accepted tokens, and steps that drafted are among the proposals.
    const v1::SpeculationUsage& spec = got[i].usage.speculation();
    if (spec.num_drafts() > 0) {
      std::int64_t accepted = 0, proposals = 0;
      for (std::int64_t n : spec.accepted_per_position()) accepted += n;
      for (std::int64_t n : spec.proposals_by_length()) proposals += n;
      EXPECT_EQ(accepted, spec.num_accepted_tokens());
      EXPECT_GE(proposals, spec.num_drafts());
      EXPECT_EQ(spec.proposals_by_length_size(), spec.accepted_per_position_size() + 1);
    }
  }
  if (c.spec.config) {
    EXPECT_GT(drafts, 0) << "the decode node never drafted";
  }
  if (c.spec.label == "dflash") {
    // Its drafts read the context the prefill node handed over: a lost or misplaced context would
    // still verify losslessly, but accept (almost) nothing.
    EXPECT_GT(accepted_total, 0) << "the decode node accepted no DFlash draft";
  }
  if (c.graphs) {
    // The decode nodes really replayed graphs, or this case would test nothing new.
    for (cli::ClusterProcess* p : (*cluster)->nodes("decode")) {
      const auto info = node_info(*decode_stub(p->address));
      EXPECT_GT(info.graph_max_batch_size(), 0);
      EXPECT_GT(info.load().counters().graph_replays(), 0);
    }
  }
}

// Prefix caching in the default cluster (EAGLE-3 on both nodes, KV over UCX): a prompt sent again
// reuses the prefill node's cached blocks, the target's and the head's, reports them as cached
// prompt tokens, and still yields exactly local generation's tokens, drafts included.
TEST(ServingPrefixCache, ARepeatedPromptIsServedFromTheCacheWithTheLocalTokens) {
  const SpecCase eagle3 = family_methods()[4];
  ASSERT_EQ(eagle3.label, "eagle3");
  const std::string prompt = code_prompts()[6];  // several blocks of 16 tokens
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 40;
  const std::vector<LocalResult> expected = run_local(eagle3.config, {prompt}, {params});
  auto cluster = cli::LocalCluster::start(cluster_options(eagle3.config, "ucx", "prefix-cache"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  const Completion first = generate(*stub, text_request(prompt, params));
  const Completion again = generate(*stub, text_request(prompt, params));
  for (const Completion* c : {&first, &again}) {
    ASSERT_TRUE(c->status.ok()) << c->status.error_message();
    EXPECT_EQ(c->ids, expected[0].ids);
    EXPECT_GT(c->usage.speculation().num_accepted_tokens(), 0);
  }
  EXPECT_EQ(first.usage.cached_prompt_tokens(), 0);
  EXPECT_GT(again.usage.cached_prompt_tokens(), 0);
  EXPECT_EQ(again.usage.cached_prompt_tokens() % 16, 0);
  EXPECT_LT(again.usage.cached_prompt_tokens(), again.usage.prompt_tokens());
  // The decode node verified the same drafts either way: the head KV that came from the cache is
  // the head KV the first request computed.
  EXPECT_EQ(again.usage.speculation().num_drafts(), first.usage.speculation().num_drafts());
  EXPECT_EQ(again.usage.speculation().num_accepted_tokens(), first.usage.speculation().num_accepted_tokens());
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string transport : {"ucx", "grpc"}) {
    for (const SpecCase& s : family_methods()) out.push_back({s, transport});
  }
  // What a GPU node pair does with Debian's UCX (no CUDA support): every method over UCX, and
  // the proposers with KV of their own over gRPC.
  for (const SpecCase& s : family_methods()) {
    out.push_back({s, "ucx", true});
    if (s.label == "draft_model" || s.label == "eagle3") out.push_back({s, "grpc", true});
  }
  // What a GPU decode node does by default: every method with graphs, with and without mirrors.
  for (const SpecCase& s : family_methods()) out.push_back({s, "ucx", false, true});
  out.push_back({family_methods().back(), "ucx", true, true});
  // BF16 KV caches: every method over UCX (half the bytes per block move), and gRPC once.
  for (const SpecCase& s : family_methods()) out.push_back({s, "ucx", false, false, true});
  out.push_back({family_methods().front(), "grpc", false, false, true});
  // An adaptive draft length on the decode node (the prefill node gets it too, and ignores it).
  out.push_back({SpecCase{"eagle3_adaptive", R"({"method":"eagle3","model":")" + family_path("eagle3") +
                                                 R"(","num_speculative_tokens":4,"adaptive_draft_length":true})"},
                 "ucx"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Methods, ServingEquivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name(); });

}  // namespace
}  // namespace baton::testing
