// 64 streaming requests of mixed prompt and output lengths at once through router -> P -> D: all
// complete, each equals the local engine's output, and the decode node holds no KV afterwards.
// Some finish at their first token on the prefill node (max_tokens 1), so the router releases
// their reservations; one in eight prefills locally (short prompts, conditional disaggregation).
#include <gtest/gtest.h>

#include "baton/v1/node.grpc.pb.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

TEST(ServingConcurrency, SixtyFourMixedStreamsMatchLocal) {
  const SpecCase spec = family_methods()[4];  // eagle3
  ASSERT_EQ(spec.label, "eagle3");
  std::vector<std::string> prompts;
  std::vector<SamplingParams> params;
  const std::vector<std::string> base = code_prompts();
  for (int i = 0; i < 64; ++i) {
    std::string prompt = base[static_cast<std::size_t>(i) % base.size()];
    for (int r = 0; r < (i / 8) % 4; ++r) prompt += "\n" + base[static_cast<std::size_t>(i + r + 1) % base.size()];
    prompts.push_back(prompt);
    SamplingParams p;
    p.temperature = i % 3 == 0 ? 0.8f : 0.0f;
    p.seed = 1000 + static_cast<std::uint64_t>(i);
    p.max_tokens = i % 8 == 1 ? 1 : 4 + (i * 7) % 60;
    params.push_back(p);
  }
  const std::vector<LocalResult> expected = run_local(spec.config, prompts, params);

  cli::ClusterOptions options = cluster_options(spec.config, "ucx", "concurrency");
  options.router_args = {"--local-prefill-max-tokens", "5"};  // "x = [" goes local
  auto cluster = cli::LocalCluster::start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  std::vector<v1::GenerateRequest> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) requests.push_back(text_request(prompts[i], params[i]));
  const std::vector<Completion> got = generate_all(*stub, requests);
  int local = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, expected[i].ids);
    EXPECT_EQ(got[i].text, expected[i].text);
    EXPECT_EQ(finish_reason_from_proto(got[i].finish_reason), expected[i].finish_reason);
    EXPECT_GE(got[i].messages, 1);
    local += got[i].usage.local_prefill();
  }
  EXPECT_GT(local, 0) << "no request took the local-prefill path";
  EXPECT_LT(local, 64);

  // Nothing is left reserved or running on the decode node.
  auto d = node::v1::DecodeNode::NewStub(
      grpc::CreateChannel((*cluster)->nodes("decode").front()->address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::v1::NodeInfo info;
  ASSERT_TRUE(d->Info(&ctx, node::v1::InfoRequest(), &info).ok());
  EXPECT_EQ(info.load().num_running(), 0);
  EXPECT_EQ(info.load().num_waiting(), 0);
  EXPECT_EQ(info.load().local_prefills(), local);
  // Requests whose first token finished them released reservations their prefill node had been
  // writing: those blocks come back once D hears that P's writes are over.
  expect_no_kv_held_within(*d, std::chrono::seconds(10));
}

}  // namespace
}  // namespace baton::testing
