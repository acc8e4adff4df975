// Blocks a prefill node may still write are never given to another request (docs/serving.md,
// "Blocks a prefill node may still write"), on real nodes over UCX. The test plays the sender: it
// confirms a reservation's destination as a prefill node does (CheckReservation, naming a sender
// address), then the reservation is released as the router releases it when it gives up on P.
// The decode node must keep the blocks out of use until the sender is done: it committed, it holds
// the request no more (a real prefill node, stopped with SIGSTOP and then continued), or nothing
// listens at its address any more. A silent listener (connections accepted, nothing answered)
// stands for a sender that is stopped for good.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/serving/serving_support.h"

namespace baton::testing {
namespace {

using ::testing::HasSubstr;

// A TCP port on loopback: listening and never accepting (`listening`), or closed.
class LoopbackPort {
 public:
  explicit LoopbackPort(bool listening) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BATON_CHECK(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0, "bind");
    socklen_t len = sizeof(a);
    BATON_CHECK(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0, "getsockname");
    address_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    if (listening) {
      BATON_CHECK(::listen(fd_, 16) == 0, "listen");
    } else {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~LoopbackPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

class WriteQuarantine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = cli::LocalCluster::start(cluster_options(std::nullopt, "ucx", "write-quarantine"));
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    d_ = decode_stub(cluster_->nodes("decode").front()->address);
    ASSERT_EQ(target().used(), 0) << "a test before this one left blocks held";
  }

  node::v1::KvPoolUsage target() { return node_info(*d_).load().pools(0); }

  node::v1::KvDestination reserve(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    node::v1::ReserveRequest r;
    r.set_request_id(id);
    r.set_prompt_len(40);  // 3 blocks of 16
    r.set_transport("ucx");
    node::v1::KvDestination dest;
    const grpc::Status s = d_->Reserve(&ctx, r, &dest);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return dest;
  }

  // What a prefill node does before it writes a byte.
  grpc::Status confirm(const node::v1::KvDestination& dest, const std::string& sender_address) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    node::v1::CheckReservationRequest r;
    r.set_request_id(dest.request_id());
    r.set_capability(dest.capability());
    r.set_transport(dest.transport());
    r.set_transport_descriptor(dest.transport_descriptor());
    *r.mutable_kv_blocks() = dest.kv_blocks();
    *r.mutable_proposer_blocks() = dest.proposer_blocks();
    r.set_sender_address(sender_address);
    node::v1::CheckReservationResponse out;
    return d_->CheckReservation(&ctx, r, &out);
  }

  // What the router does when it gives up on the prefill node.
  void release(const node::v1::KvDestination& dest) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    node::v1::ReleaseRequest r;
    r.set_request_id(dest.request_id());
    r.set_capability(dest.capability());
    node::v1::ReleaseResponse out;
    const grpc::Status s = d_->Release(&ctx, r, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(out.found());
  }

  // Polls D until no block is quarantined (each poll is an Info call; the deadline bounds it).
  bool quarantine_ends_within(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (target().quarantined() == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  static inline cli::LocalCluster* cluster_ = nullptr;
  std::unique_ptr<node::v1::DecodeNode::Stub> d_;
};

bool disjoint(const node::v1::KvDestination& a, const node::v1::KvDestination& b) {
  return std::none_of(a.kv_blocks().begin(), a.kv_blocks().end(), [&](std::int32_t x) {
    return std::find(b.kv_blocks().begin(), b.kv_blocks().end(), x) != b.kv_blocks().end();
  });
}

TEST_F(WriteQuarantine, AStoppedSendersBlocksStayOutOfUseUntilItRunsAgain) {
  cli::ClusterProcess* p = cluster_->nodes("prefill").front();
  const node::v1::KvDestination a = reserve("stopped-sender");
  ASSERT_TRUE(confirm(a, p->address).ok());
  ::kill(p->process->pid(), SIGSTOP);
  release(a);

  // Released, yet held: the sender may still write them.
  node::v1::KvPoolUsage pool = target();
  EXPECT_EQ(pool.quarantined(), 3);
  EXPECT_EQ(pool.used(), 3);
  EXPECT_EQ(pool.reserved(), 0);
  const node::v1::KvDestination b = reserve("next-request");
  EXPECT_TRUE(disjoint(a, b)) << "the next request got blocks the stopped sender may still write";

  // Three of D's probes go unanswered meanwhile: that keeps the blocks.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  EXPECT_EQ(target().quarantined(), 3);

  // Continued, the prefill node answers that it holds no such request: the blocks are free.
  ::kill(p->process->pid(), SIGCONT);
  EXPECT_TRUE(quarantine_ends_within(std::chrono::seconds(15)));
  release(b);
  EXPECT_EQ(target().used(), 0);
  const auto counters = node_info(*d_).load().counters();
  EXPECT_GE(counters.write_quarantines(), 1);
  EXPECT_EQ(counters.write_quarantines_expired(), 0);
}

TEST_F(WriteQuarantine, TheSendersCommitEndsItsQuarantine) {
  LoopbackPort stopped_for_good(/*listening=*/true);
  const node::v1::KvDestination a = reserve("late-commit");
  ASSERT_TRUE(confirm(a, stopped_for_good.address()).ok());
  release(a);
  EXPECT_EQ(target().quarantined(), 3);

  // The sender comes back and commits: refused (the reservation is gone), and it is done writing.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::v1::CommitRequest c;
  c.set_capability(a.capability());
  c.mutable_record()->set_request_id(a.request_id());
  node::v1::CommitResponse out;
  const grpc::Status s = d_->Commit(&ctx, c, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_TRUE(quarantine_ends_within(std::chrono::seconds(5)));
  EXPECT_EQ(target().used(), 0);
}

TEST_F(WriteQuarantine, ASenderThatIsGoneEndsItsQuarantine) {
  LoopbackPort gone(/*listening=*/false);
  const node::v1::KvDestination a = reserve("gone-sender");
  ASSERT_TRUE(confirm(a, gone.address()).ok());
  release(a);
  EXPECT_EQ(target().quarantined(), 3);
  EXPECT_TRUE(quarantine_ends_within(std::chrono::seconds(15)));
  EXPECT_EQ(target().used(), 0);
}

TEST_F(WriteQuarantine, AForgedCommitEndsNothing) {
  LoopbackPort stopped_for_good(/*listening=*/true);
  const node::v1::KvDestination a = reserve("forged-end");
  ASSERT_TRUE(confirm(a, stopped_for_good.address()).ok());
  release(a);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::v1::CommitRequest c;
  c.set_capability(std::string(32, 'a'));
  c.mutable_record()->set_request_id(a.request_id());
  node::v1::CommitResponse out;
  EXPECT_FALSE(d_->Commit(&ctx, c, &out).ok());
  EXPECT_EQ(target().quarantined(), 3);
  // Tidy up as the real sender would.
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  c.set_capability(a.capability());
  (void)d_->Commit(&ctx2, c, &out);
  EXPECT_TRUE(quarantine_ends_within(std::chrono::seconds(5)));
}

TEST_F(WriteQuarantine, AMalformedSenderAddressIsRefusedAndGrantsNothing) {
  // D dials the address a confirmed sender gives: one too long or not printable is refused before
  // it is granted anything, and the reservation is still the router's to release.
  const node::v1::KvDestination a = reserve("malformed-sender");
  for (const std::string& address : {std::string(257, 'a'), std::string("127.0.0.1:1\n"), std::string("bad host:1")}) {
    const grpc::Status s = confirm(a, address);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("sender_address"), std::string::npos) << s.error_message();
  }
  release(a);
  const node::v1::KvPoolUsage pool = target();
  EXPECT_EQ(pool.quarantined(), 0);
  EXPECT_EQ(pool.used(), 0);
}

}  // namespace
}  // namespace baton::testing
