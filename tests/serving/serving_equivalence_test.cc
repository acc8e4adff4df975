// Through router -> prefill node -> decode node, with real processes on loopback and the KV moved
// by the real UCX or gRPC transport, every request yields exactly what one local engine yields
// (`baton generate`): greedy tokens and text for no speculation and every method, and seeded
// sampled tokens (temperature 0.8, ten seeds) too.
#include <gtest/gtest.h>

#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

struct Case {
  SpecCase spec;
  std::string transport;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.spec.label << " over " << c.transport; }

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
  const std::vector<LocalResult> expected = run_local(c.spec.config, prompts, params);

  auto cluster = cli::LocalCluster::start(cluster_options(c.spec.config, c.transport, c.spec.label + "-" + c.transport));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  std::vector<v1::GenerateRequest> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) requests.push_back(text_request(prompts[i], params[i]));
  const std::vector<Completion> got = generate_all(*stub, requests);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, expected[i].ids);
    EXPECT_EQ(got[i].text, expected[i].text);
    EXPECT_EQ(finish_reason_from_proto(got[i].finish_reason), expected[i].finish_reason);
    EXPECT_FALSE(got[i].usage.local_prefill()) << "the router prefilled on the decode node";
    EXPECT_EQ(got[i].usage.transport(), c.transport);
    EXPECT_EQ(got[i].usage.completion_tokens(), static_cast<int>(expected[i].ids.size()));
    if (c.spec.config && expected[i].ids.size() > 2) {
      EXPECT_GT(got[i].usage.speculation().num_drafts(), 0);
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string transport : {"ucx", "grpc"}) {
    for (const SpecCase& s : family_methods()) out.push_back({s, transport});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Methods, ServingEquivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.spec.label + "_" + i.param.transport; });

}  // namespace
}  // namespace baton::testing
