// Faults with real processes: a prefill node killed in the middle of a KV transfer, a decode node
// killed mid-stream, a hand-off commit that never comes, nodes restarted under the router, and
// nodes frozen with SIGSTOP (a stalled stream ends at the progress deadline; a frozen prefill node
// is left within two seconds and its call in flight retried).
// Each ends within its deadline with the request served or a clear error, and with no KV block
// left reserved on the decode node. Synchronization is on what the processes print (a node's log
// line) and on their answers, never on sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <future>
#include <thread>

#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;
using cli::ClusterProcess;

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

std::string eagle3() { return family_methods()[4].config.value(); }

// Freezes a process (SIGSTOP) until the scope ends (SIGCONT), so that teardown finds it running.
class Frozen {
 public:
  explicit Frozen(Subprocess& p) : pid_(p.pid()) { ::kill(pid_, SIGSTOP); }
  ~Frozen() { thaw(); }
  void thaw() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

// Polls `done` every 50 ms until it holds or `limit` passed; returns how long it took (or limit).
template <class F>
std::chrono::milliseconds wait_until(F done, std::chrono::milliseconds limit) {
  const auto start = std::chrono::steady_clock::now();
  while (!done()) {
    if (std::chrono::steady_clock::now() - start > limit) return limit;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

// A long greedy stream through the router (1,500 tokens, EOS ignored), three messages in: a fault
// can then hit it mid-stream. finish() reads what is left and returns the call's status.
struct MidStream {
  MidStream(v1::Baton::Stub& stub, std::chrono::seconds deadline) {
    SamplingParams p = greedy(1500);
    p.ignore_eos = true;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    reader = stub.Generate(&ctx, text_request(code_prompts()[0], p));
    while (messages < 3 && reader->Read(&m)) ++messages;
  }
  grpc::Status finish() {
    while (reader->Read(&m)) {
    }
    return reader->Finish();
  }

  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  v1::GenerateResponse m;
  int messages = 0;
};

int usable_prefill_nodes(v1::Baton::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ModelInfo info;
  return stub.GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok() ? info.num_prefill_nodes() : -1;
}

// P holds every transfer (--testing-hold-kv-transfer) and is killed while holding one: the router
// gets UNAVAILABLE before the first token, releases D's reservation and retries — here, with no
// other prefill node, by prefilling on the decode node. The client sees the right tokens, and the
// reservation's blocks come back once D finds that P is gone.
TEST(ServingFaults, PrefillKilledMidTransferIsRetriedAndFreesTheReservation) {
  cli::ClusterOptions o = cluster_options(eagle3(), "ucx", "kill-prefill");
  o.prefill_binary = "baton-prefill-testing";
  o.prefill_args = {"--testing-hold-kv-transfer"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string prompt = code_prompts()[4];
  const std::vector<LocalResult> expected = run_local(eagle3(), {prompt}, {greedy(24)});
  auto stub = router_stub((*cluster)->router_address());
  auto pending = std::async(std::launch::async, [&] { return generate(*stub, text_request(prompt, greedy(24))); });
  ClusterProcess* p = (*cluster)->nodes("prefill").front();
  ASSERT_TRUE(p->process->wait_for_line("holding the KV transfer of", std::chrono::seconds(60)).ok());
  p->process->kill();
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const Completion c = pending.get();
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, expected[0].ids);
  EXPECT_TRUE(c.usage.local_prefill());
  // The released reservation stays quarantined until D finds the killed P gone.
  auto d = decode_stub((*cluster)->nodes("decode").front()->address);
  expect_no_kv_held_within(*d, std::chrono::seconds(15));
}

// A reservation whose commit never comes (P holds its transfer) is reclaimed by D's lease: the
// decode node logs it, its Decode stream for the request ends with the reason, and no block stays
// reserved.
TEST(ServingFaults, ACommitThatNeverComesIsReclaimedByTheLease) {
  cli::ClusterOptions o = cluster_options(eagle3(), "grpc", "lease");
  o.num_prefill = 0;
  o.decode_args = {"--handoff-lease-ms", "300"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClusterProcess* dp = (*cluster)->nodes("decode").front();
  auto d = decode_stub(dp->address);
  node::v1::KvDestination dest;
  {
    grpc::ClientContext ctx;
    node::v1::ReserveRequest r;
    r.set_request_id("never-committed");
    r.set_prompt_len(50);
    ASSERT_TRUE(d->Reserve(&ctx, r, &dest).ok());
  }
  EXPECT_EQ(dest.kv_blocks_size(), 4);
  EXPECT_GT(dest.proposer_blocks_size(), 0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  node::v1::DecodeRequest req;
  req.set_request_id("never-committed");
  req.set_capability(dest.capability());  // the reservation's token, as the router sends it
  auto stream = d->Decode(&ctx, req);
  node::v1::DecodeResponse last;
  for (node::v1::DecodeResponse m; stream->Read(&m);) last = m;
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_ERROR);
  EXPECT_THAT(last.error(), HasSubstr("lease"));
  EXPECT_TRUE(dp->process->wait_for_line("lease of 300 ms", std::chrono::seconds(10)).ok());
  expect_no_kv_held(node_info(*d));
}

// D is killed while streaming: the client gets UNAVAILABLE naming the decode node (tokens already
// sent are never retried elsewhere), and the router stops counting D as usable.
TEST(ServingFaults, DecodeKilledMidStreamFailsTheRequestAndMarksTheNode) {
  auto cluster = cli::LocalCluster::start(cluster_options(std::nullopt, "ucx", "kill-decode"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  MidStream stream(*stub, std::chrono::seconds(60));
  ASSERT_EQ(stream.messages, 3);
  ClusterProcess* d = (*cluster)->nodes("decode").front();
  d->process->kill();
  const grpc::Status s = stream.finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr(d->address));
  grpc::ClientContext ictx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ictx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.num_decode_nodes(), 0);
}

// Restarting P, then D, on their ports: the router notices each new instance, P's cached
// connection to the old D (its old memory keys) is replaced, and requests keep being served
// disaggregated with the right tokens.
TEST(ServingFaults, RestartedNodesServeAgain) {
  auto cluster = cli::LocalCluster::start(cluster_options(eagle3(), "ucx", "restart"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string prompt = code_prompts()[2];
  const std::vector<LocalResult> expected = run_local(eagle3(), {prompt}, {greedy(20)});
  auto stub = router_stub((*cluster)->router_address());
  const auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    const Completion c = generate(*stub, text_request(prompt, greedy(20)));
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_EQ(c.ids, expected[0].ids);
    EXPECT_FALSE(c.usage.local_prefill());
  };
  check("before any restart");
  ClusterProcess* p = (*cluster)->nodes("prefill").front();
  ClusterProcess* d = (*cluster)->nodes("decode").front();
  ASSERT_TRUE((*cluster)->restart(*p).ok());
  ASSERT_TRUE((*cluster)->router().process->wait_for_line("prefill node " + p->address + " restarted", std::chrono::seconds(30)).ok());
  check("after the prefill node restarted");
  ASSERT_TRUE((*cluster)->restart(*d).ok());
  ASSERT_TRUE((*cluster)->router().process->wait_for_line("decode node " + d->address + " restarted", std::chrono::seconds(30)).ok());
  check("after the decode node restarted");
}

// A frozen decode node (SIGSTOP) stops sending mid-stream: the router ends the stream at
// --stream-progress-timeout-ms with UNAVAILABLE naming the node and why (health checks left slow
// here, so that the progress deadline is what ends it), and once the node runs again the
// cancelled stream frees its blocks.
TEST(ServingFaults, AFrozenDecodeNodesStreamEndsAtTheProgressDeadline) {
  cli::ClusterOptions o = cluster_options(std::nullopt, "ucx", "freeze-decode");
  o.router_args = {"--stream-progress-timeout-ms", "2000", "--health-timeout-ms", "60000"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto stub = router_stub((*cluster)->router_address());
  MidStream stream(*stub, std::chrono::seconds(120));
  ASSERT_EQ(stream.messages, 3);
  ClusterProcess* d = (*cluster)->nodes("decode").front();
  Frozen frozen(*d->process);
  const auto frozen_at = std::chrono::steady_clock::now();
  const grpc::Status s = stream.finish();
  const auto took = std::chrono::steady_clock::now() - frozen_at;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("sent nothing for 2000 ms"));
  EXPECT_GE(took, std::chrono::milliseconds(1900));
  EXPECT_LT(took, std::chrono::seconds(15));  // the request deadline (120 s) is not what ended it
  frozen.thaw();
  auto dstub = decode_stub(d->address);
  const auto freed = wait_until(
      [&] {
        const node::v1::NodeInfo info = node_info(*dstub);
        for (const auto& pool : info.load().pools()) {
          if (pool.used() != 0 || pool.reserved() != 0) return false;
        }
        return true;
      },
      std::chrono::seconds(30));
  EXPECT_LT(freed, std::chrono::seconds(30)) << "the frozen node's blocks were not freed after it ran again";
}

// A frozen prefill node (SIGSTOP) while it holds a request's KV transfer: its health checks go
// unanswered, the router stops placing on it within two seconds, ends the Prefill call in flight
// (not waiting for --prefill-timeout-ms) and retries the request by prefilling on the decode node:
// the client gets the right tokens.
TEST(ServingFaults, AFrozenPrefillNodeIsLeftAndItsCallRetried) {
  cli::ClusterOptions o = cluster_options(eagle3(), "ucx", "freeze-prefill");
  o.prefill_binary = "baton-prefill-testing";
  o.prefill_args = {"--testing-hold-kv-transfer"};
  o.router_args = {"--health-timeout-ms", "1000", "--poll-interval-ms", "500"};
  auto cluster = cli::LocalCluster::start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string prompt = code_prompts()[4];
  const std::vector<LocalResult> expected = run_local(eagle3(), {prompt}, {greedy(24)});
  auto stub = router_stub((*cluster)->router_address());
  ASSERT_EQ(usable_prefill_nodes(*stub), 1);
  auto pending = std::async(std::launch::async, [&] { return generate(*stub, text_request(prompt, greedy(24))); });
  ClusterProcess* p = (*cluster)->nodes("prefill").front();
  ASSERT_TRUE(p->process->wait_for_line("holding the KV transfer of", std::chrono::seconds(60)).ok());
  Frozen frozen(*p->process);
  const auto frozen_at = std::chrono::steady_clock::now();
  const auto left = wait_until([&] { return usable_prefill_nodes(*stub) == 0; }, std::chrono::seconds(10));
  EXPECT_LE(left, std::chrono::milliseconds(2000)) << "new requests would have gone to the frozen node that long";
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(50)), std::future_status::ready)
      << "the Prefill call to the frozen node was not ended";
  const Completion c = pending.get();
  const auto served = std::chrono::steady_clock::now() - frozen_at;
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, expected[0].ids);
  EXPECT_TRUE(c.usage.local_prefill());
  EXPECT_LT(served, std::chrono::seconds(50));  // well before the 60 s prefill deadline
  // A new request meanwhile goes straight to local prefill.
  const Completion next = generate(*stub, text_request(prompt, greedy(24)));
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(next.ids, expected[0].ids);
  EXPECT_TRUE(next.usage.local_prefill());
}

}  // namespace
}  // namespace baton::testing
