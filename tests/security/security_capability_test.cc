// Per-request capabilities on real nodes (a local cluster of processes, as `baton up` starts it;
// plain text, so that the test plays a cluster member that holds no request's token): a forged
// Commit, PushKv, Decode, Release or Abort of another request is PERMISSION_DENIED and leaves that
// request as it was; a prefill node sends nothing to a destination its decode node does not
// confirm (a forged token, blocks the reservation does not hold, an address nobody introduced);
// and the real request path, with the tokens, still gives the local tokens.
#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;

class Capabilities : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Decode nodes take KV over gRPC first, so that PushKv is the path a forger would use.
    auto c = cli::LocalCluster::start(cluster_options(std::nullopt, "grpc", "capabilities"));
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    d_ = decode_stub(cluster_->nodes("decode").front()->address);
    p_ = prefill_stub(cluster_->nodes("prefill").front()->address);
  }

  // What the router does first: a reservation for `id`, with its token.
  node::v1::KvDestination reserve(const std::string& id, int prompt_len = 40) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    node::v1::ReserveRequest r;
    r.set_request_id(id);
    r.set_prompt_len(prompt_len);
    r.set_transport("grpc");
    node::v1::KvDestination dest;
    const grpc::Status s = d_->Reserve(&ctx, r, &dest);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(dest.capability().size(), 32u);
    return dest;
  }

  grpc::Status release(const std::string& id, const std::string& capability) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    node::v1::ReleaseRequest r;
    r.set_request_id(id);
    r.set_capability(capability);
    node::v1::ReleaseResponse out;
    return d_->Release(&ctx, r, &out);
  }

  std::int32_t reserved() { return node_info(*d_).load().pools(0).reserved(); }

  static inline cli::LocalCluster* cluster_ = nullptr;
  std::unique_ptr<node::v1::DecodeNode::Stub> d_;
  std::unique_ptr<node::v1::PrefillNode::Stub> p_;
};

TEST_F(Capabilities, ForgedCallsOnAnotherRequestAreRefusedAndChangeNothing) {
  const node::v1::KvDestination victim = reserve("victim-1");
  const node::v1::KvDestination mine = reserve("forger-1");
  ASSERT_NE(victim.capability(), mine.capability());
  const std::int32_t held = reserved();
  ASSERT_GT(held, 0);

  for (const std::string& token : {std::string(), mine.capability()}) {  // none, and the forger's own
    SCOPED_TRACE(token.empty() ? "no token" : "another request's token");
    {
      // A forged hand-off record (what poisoned the prefix cache).
      grpc::ClientContext ctx;
      node::v1::CommitRequest c;
      c.mutable_record()->set_request_id("victim-1");
      for (int i = 0; i < 40; ++i) c.mutable_record()->add_prompt(7);
      c.mutable_record()->mutable_kv_blocks()->Add(victim.kv_blocks().begin(), victim.kv_blocks().end());
      c.set_capability(token);
      node::v1::CommitResponse out;
      const grpc::Status s = d_->Commit(&ctx, c, &out);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("victim-1"));
    }
    {
      // KV bytes into the victim's blocks.
      grpc::ClientContext ctx;
      node::v1::PushKvResponse out;
      auto writer = d_->PushKv(&ctx, &out);
      node::v1::KvChunk chunk;
      chunk.set_request_id("victim-1");
      chunk.set_capability(token);
      node::v1::KvSegment* seg = chunk.add_segments();
      seg->set_dst_offset(0);
      seg->set_data(std::string(64, 'x'));
      writer->Write(chunk);
      writer->WritesDone();
      EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
    }
    {
      // Reading the victim's output.
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      node::v1::DecodeRequest r;
      r.set_request_id("victim-1");
      r.set_capability(token);
      auto stream = d_->Decode(&ctx, r);
      node::v1::DecodeResponse m;
      EXPECT_FALSE(stream->Read(&m));
      EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
    }
    EXPECT_EQ(release("victim-1", token).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    {
      grpc::ClientContext ctx;
      node::v1::NodeAbortRequest r;
      r.set_request_id("victim-1");
      r.set_capability(token);
      node::v1::NodeAbortResponse out;
      EXPECT_EQ(d_->Abort(&ctx, r, &out).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    }
    EXPECT_EQ(reserved(), held) << "the victim's reservation must be untouched";
  }
  // Its holder still owns it.
  EXPECT_TRUE(release("victim-1", victim.capability()).ok());
  EXPECT_TRUE(release("forger-1", mine.capability()).ok());
  expect_no_kv_held(node_info(*d_));
}

// A Prefill call as a member could make it: the destination the router would have passed, forged.
grpc::Status prefill_to(node::v1::PrefillNode::Stub& p, const std::string& id, const node::v1::KvDestination& dest) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  node::v1::PrefillRequest r;
  r.set_request_id(id);
  for (int i = 0; i < 40; ++i) r.add_prompt(100 + i);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(4);
  *r.mutable_destination() = dest;
  node::v1::PrefillResponse out;
  return p.Prefill(&ctx, r, &out);
}

TEST_F(Capabilities, APrefillNodeSendsOnlyWhereItsDecodeNodeConfirmsTheToken) {
  const node::v1::KvDestination victim = reserve("victim-2");
  const std::int64_t sent_before = node_info(*p_).load().kv_bytes_sent();

  node::v1::KvDestination forged = victim;
  forged.set_capability(std::string(32, 'a'));
  grpc::Status s = prefill_to(*p_, "victim-2", forged);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("nothing was sent"));

  // Right token, but blocks of someone else's: refused too.
  const node::v1::KvDestination other = reserve("other-2");
  forged = victim;
  forged.mutable_kv_blocks()->CopyFrom(other.kv_blocks());
  s = prefill_to(*p_, "victim-2", forged);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();

  // A decode address nobody introduced (nothing listens there).
  forged = victim;
  forged.set_decode_address("127.0.0.1:1");
  s = prefill_to(*p_, "victim-2", forged);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("nothing was sent"));

  EXPECT_EQ(node_info(*p_).load().kv_bytes_sent(), sent_before) << "no byte may have left the prefill node";
  // The real destination is taken: the request is prefilled and committed.
  s = prefill_to(*p_, "victim-2", victim);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(node_info(*p_).load().kv_bytes_sent(), sent_before);
  // Committed now: it runs on D until aborted with its token.
  grpc::ClientContext ctx;
  node::v1::NodeAbortRequest abort;
  abort.set_request_id("victim-2");
  abort.set_capability(victim.capability());
  node::v1::NodeAbortResponse out;
  EXPECT_TRUE(d_->Abort(&ctx, abort, &out).ok());
  EXPECT_TRUE(release("other-2", other.capability()).ok());
}

TEST_F(Capabilities, TheRequestPathStillGivesTheLocalTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 16;
  const std::string prompt = code_prompts()[0];
  const Completion c = generate(*router_stub(cluster_->router_address()), text_request(prompt, p));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_FALSE(c.usage.local_prefill());
  EXPECT_EQ(c.ids, run_local(std::nullopt, {prompt}, {p}).front().ids);
}

}  // namespace
}  // namespace baton::testing
