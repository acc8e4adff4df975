// The link transport on loopback: a real grpc::Server on 127.0.0.1 serving only KvLink through
// LinkKvReceiver, a LinkKvSender in the same process with separate memory, and a real link
// between them: TCP on this machine (tcp_kv_link.h), with NCCL's contract. What NCCL itself
// adds (device memory, its communicator) is tested on GPUs (tests/kernels/cuda).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv_test_support.h"
#include "kv_transfer/kv_link_service.h"
#include "kv_transfer/kv_link_transport.h"
#include "tcp_kv_link.h"

namespace baton::kv {
namespace {

using namespace std::chrono_literals;
using testing::DoneWaiter;
using testing::finish_and_wait;
using testing::holds_exactly;
using testing::in;
using testing::make_pools;
using testing::mentions;
using testing::plan_copies;
using testing::regions;
using testing::TcpKvLinkFactory;

constexpr std::size_t kMiB = 1 << 20;

class KvLinkTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = make_pools(12 * kMiB, 2 * kMiB);
    src_[0]->fill_random(1);
    src_[1]->fill_random(2);
    dst_ = make_pools(12 * kMiB, 3 * kMiB);
    for (auto& p : dst_) p->fill_pattern();
    receiver_factory_ = std::make_shared<TcpKvLinkFactory>();
    receiver_ = std::make_unique<LinkKvReceiver>(
        regions(dst_), receiver_factory_,
        [this](const std::string& request_id, const std::string& capability, std::int32_t pool, std::uint64_t offset,
               std::uint64_t bytes) {
          return check_ ? check_(request_id, capability, pool, offset, bytes) : absl::OkStatus();
        },
        LinkReceiverOptions{5s});
    start_server();
    sender_factory_ = std::make_shared<TcpKvLinkFactory>();
    sender_ = std::make_unique<LinkKvSender>(regions(src_), sender_factory_, LinkSenderOptions{5s});
  }

  void TearDown() override {
    sender_.reset();
    stop_server();
  }

  void start_server(int port = 0) {
    service_ = std::make_unique<KvLinkService>(receiver_.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  void stop_server() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 100ms);
    server_.reset();
  }

  TransferTarget target(std::string request_id, std::uint64_t instance = 1) const {
    const std::string capability = "token-" + request_id;
    return TransferTarget{std::move(request_id), "127.0.0.1:" + std::to_string(port_), instance, receiver_->descriptor(),
                          capability};
  }

  std::vector<std::unique_ptr<testing::TestPool>> src_, dst_;
  WriteCheck check_;
  std::shared_ptr<TcpKvLinkFactory> receiver_factory_, sender_factory_;
  std::unique_ptr<LinkKvReceiver> receiver_;
  std::unique_ptr<KvLinkService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<LinkKvSender> sender_;
};

TEST_F(KvLinkTransportTest, SmallAndLargeCopiesLandExactlyOverOneLink) {
  // A 9 MiB run travels as nine 1 MiB pieces; 2000 row slices as pieces of their own.
  auto copies0 = plan_copies(11, src_[0]->size(), dst_[0]->size(), 1, 9 * kMiB, 2000, 256);
  auto copies1 = plan_copies(12, src_[1]->size(), dst_[1]->size(), 1, kMiB, 500, 256);
  std::vector<std::string> seen_requests;
  check_ = [&](const std::string& request_id, const std::string&, std::int32_t, std::uint64_t, std::uint64_t) {
    if (seen_requests.empty() || seen_requests.back() != request_id) seen_requests.push_back(request_id);
    return absl::OkStatus();
  };
  // Two requests, each layer's copies put separately, as a prefill node does.
  std::span<const Copy> all0(copies0);
  const std::size_t half = all0.size() / 2;
  for (const auto& [request, part] : {std::pair{"req-1", all0.first(half)}, std::pair{"req-2", all0.subspan(half)}}) {
    auto transfer = sender_->begin(target(request));
    ASSERT_TRUE(transfer.ok()) << transfer.status();
    for (std::size_t i = 0; i < part.size(); i += 300) (*transfer)->put(0, part.subspan(i, std::min<std::size_t>(300, part.size() - i)));
    if (std::string(request) == "req-2") (*transfer)->put(1, copies1);
    ASSERT_TRUE(finish_and_wait(**transfer, 20s).ok());
  }
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], copies0));
  EXPECT_TRUE(holds_exactly(*src_[1], *dst_[1], copies1));
  EXPECT_EQ(seen_requests, (std::vector<std::string>{"req-1", "req-2"}));
  EXPECT_EQ(sender_->links_made(), 1);
  EXPECT_EQ(receiver_->links_joined(), 1);
}

TEST_F(KvLinkTransportTest, ConcurrentTransfersShareTheLinkInOrder) {
  // Four threads, each its own slice of the destination, interleaving their puts on one link.
  auto copies = plan_copies(21, src_[0]->size(), dst_[0]->size(), 4, 2 * kMiB, 1200, 512);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto transfer = sender_->begin(target("req-" + std::to_string(t)));
      if (!transfer.ok()) {
        results[t] = transfer.status();
        return;
      }
      std::vector<Copy> mine;
      for (std::size_t i = t; i < copies.size(); i += 4) mine.push_back(copies[i]);
      for (std::size_t i = 0; i < mine.size(); i += 50) {
        (*transfer)->put(0, std::span<const Copy>(mine).subspan(i, std::min<std::size_t>(50, mine.size() - i)));
      }
      results[t] = finish_and_wait(**transfer, 20s);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], copies));
  EXPECT_EQ(sender_->links_made(), 1);
}

TEST_F(KvLinkTransportTest, RejectedWritesFailTheirTransferAndTheLinkServesOn) {
  check_ = [](const std::string& request_id, const std::string& capability, std::int32_t pool, std::uint64_t offset,
               std::uint64_t) {
    if (capability != "token-" + request_id) return absl::PermissionDeniedError("not its token");
    if (request_id == "req-evil" && pool == 0 && offset >= 65536) return absl::PermissionDeniedError("not its block");
    return absl::OkStatus();
  };
  auto evil = sender_->begin(target("req-evil"));
  ASSERT_TRUE(evil.ok()) << evil.status();
  // The last two copies are rejected but still travel (into the discard buffer), the 3 MiB one
  // cut into pieces like any other.
  (*evil)->put(0, std::vector<Copy>{{0, 0, 4096}, {0, 65536, 4096}, {kMiB, 2 * kMiB, 3 * kMiB}});
  absl::Status status = finish_and_wait(**evil, 10s);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_TRUE(mentions(status, "req-evil"));
  EXPECT_TRUE(mentions(status, "offset 65536"));
  EXPECT_TRUE(mentions(status, "not its block"));

  // Both sides took the same pieces off the link: the next transfer's bytes land where they should.
  const std::vector<Copy> good{{5 * kMiB, 6 * kMiB, 2 * kMiB}, {77, 9 * kMiB, 1000}};
  auto next = sender_->begin(target("req-good"));
  ASSERT_TRUE(next.ok()) << next.status();
  (*next)->put(0, good);
  ASSERT_TRUE(finish_and_wait(**next, 10s).ok());
  std::vector<Copy> landed = good;
  landed.push_back({0, 0, 4096});  // the evil transfer's one allowed copy
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], landed));  // and nothing of its rejected ones

  // Another request's token: refused, nothing lands, and the link still serves.
  TransferTarget forged = target("req-forged");
  forged.capability = "token-req-good";
  auto stolen = sender_->begin(forged);
  ASSERT_TRUE(stolen.ok()) << stolen.status();
  (*stolen)->put(0, std::vector<Copy>{{0, 10 * kMiB, 4096}});
  EXPECT_EQ(finish_and_wait(**stolen, 10s).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], landed));
  EXPECT_EQ(sender_->links_made(), 1);
}

TEST_F(KvLinkTransportTest, OutOfBoundsIsInvalidArgumentOnEitherSide) {
  struct Case {
    std::int32_t pool;
    Copy copy;
    std::string_view says;
  };
  const Case cases[] = {
      {0, {0, dst_[0]->size() - 10, 4096}, "destination pool 0"},  // the receiver refuses it
      {0, {src_[0]->size() - 10, 0, 4096}, "source pool 0"},       // the sender refuses it
      {2, {0, 0, 16}, "pool 2 is out of range"},
  };
  for (const Case& c : cases) {
    auto transfer = sender_->begin(target("req-oob"));
    ASSERT_TRUE(transfer.ok()) << transfer.status();
    (*transfer)->put(c.pool, std::vector<Copy>{c.copy});
    absl::Status status = finish_and_wait(**transfer, 10s);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(mentions(status, c.says));
    EXPECT_TRUE(mentions(status, "req-oob"));
  }
  EXPECT_EQ(dst_[0]->data()[dst_[0]->size() - 5], testing::TestPool::pattern(dst_[0]->size() - 5));
  auto after = sender_->begin(target("req-after"));
  ASSERT_TRUE(after.ok());
  (*after)->put(0, std::vector<Copy>{{0, 0, 8192}});
  EXPECT_TRUE(finish_and_wait(**after, 10s).ok());
  EXPECT_EQ(sender_->links_made(), 1);
}

TEST_F(KvLinkTransportTest, DroppedTransferDoesNotDisturbTheNext) {
  {
    auto dropped = sender_->begin(target("req-dropped"));
    ASSERT_TRUE(dropped.ok());
    (*dropped)->put(0, std::vector<Copy>{{0, 0, 3 * kMiB}});
  }  // no finish(): the handle tells D the transfer is over, and nobody waits for the answer
  const std::vector<Copy> copies{{4 * kMiB, 4 * kMiB, 2 * kMiB}};
  auto next = sender_->begin(target("req-next"));
  ASSERT_TRUE(next.ok());
  (*next)->put(0, copies);
  ASSERT_TRUE(finish_and_wait(**next, 10s).ok());
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], {Copy{0, 0, 3 * kMiB}, copies[0]}));
}

TEST_F(KvLinkTransportTest, StuckLinkFailsByTheDeadlineAndTheNextBeginMakesANewOne) {
  receiver_factory_->set_stall_receives(true);
  auto stuck = sender_->begin(target("req-stuck"));
  ASSERT_TRUE(stuck.ok()) << stuck.status();
  (*stuck)->put(0, std::vector<Copy>{{0, 0, 8 * kMiB}});  // more than the sockets buffer
  auto bystander = sender_->begin(target("req-bystander"));
  ASSERT_TRUE(bystander.ok());
  (*bystander)->put(0, std::vector<Copy>{{0, 9 * kMiB, 4096}});
  DoneWaiter bystander_done;
  (*bystander)->finish(in(30s), bystander_done.callback());
  const auto started = std::chrono::steady_clock::now();
  absl::Status status = finish_and_wait(**stuck, 300ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(mentions(status, "req-stuck"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  // The link is aborted: the transfer behind it fails too, long before its own deadline.
  auto other = bystander_done.wait_until(in(5s));
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->code(), absl::StatusCode::kUnavailable) << *other;
  EXPECT_TRUE(mentions(*other, "req-stuck"));

  receiver_factory_->set_stall_receives(false);
  const std::vector<Copy> copies{{kMiB, 10 * kMiB, kMiB}};
  auto next = sender_->begin(target("req-next"));
  ASSERT_TRUE(next.ok()) << next.status();
  (*next)->put(0, copies);
  ASSERT_TRUE(finish_and_wait(**next, 10s).ok());
  EXPECT_EQ(0, std::memcmp(dst_[0]->data() + 10 * kMiB, src_[0]->data() + kMiB, kMiB));
  EXPECT_EQ(sender_->links_made(), 2);
}

TEST_F(KvLinkTransportTest, MismatchedPoolsAreRefusedAtOnce) {
  auto other_pools = make_pools(kMiB, kMiB);
  std::vector<MemoryRegion> named = regions(other_pools);
  named[1].name = "drafter";
  LinkKvSender sender(named, sender_factory_, LinkSenderOptions{20s});
  const auto started = std::chrono::steady_clock::now();
  auto transfer = sender.begin(target("req-x"));
  ASSERT_FALSE(transfer.ok());
  EXPECT_EQ(transfer.status().code(), absl::StatusCode::kInvalidArgument) << transfer.status();
  EXPECT_TRUE(mentions(transfer.status(), "drafter"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);  // not the 20 s join deadline
}

TEST_F(KvLinkTransportTest, WrongDescriptorOrNoAddressIsInvalidArgument) {
  TransferTarget t = target("req-x");
  t.descriptor = "grpc/1";
  EXPECT_EQ(sender_->begin(t).status().code(), absl::StatusCode::kInvalidArgument);
  t = target("req-x");
  t.peer_address.clear();
  EXPECT_EQ(sender_->begin(t).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KvLinkTransportTest, UnreachablePeerIsUnavailableByTheBeginTimeout) {
  const TransferTarget t = target("req-down");
  stop_server();
  LinkKvSender sender(regions(src_), sender_factory_, LinkSenderOptions{500ms});
  const auto started = std::chrono::steady_clock::now();
  auto transfer = sender.begin(t);
  ASSERT_FALSE(transfer.ok());
  EXPECT_EQ(transfer.status().code(), absl::StatusCode::kUnavailable) << transfer.status();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
}

// A peer that breaks the protocol gets INVALID_ARGUMENT naming what it did, and the receiver
// serves the next stream as before.
TEST_F(KvLinkTransportTest, MalformedStreamsAreRefusedNamingTheFault) {
  auto stub = baton::node::v1::DecodeNode::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  auto run = [&](const std::vector<baton::node::v1::KvLinkMessage>& messages) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    auto stream = stub->KvLink(&context);
    for (const auto& m : messages) stream->Write(m);
    stream->WritesDone();
    baton::node::v1::KvLinkReply reply;
    while (stream->Read(&reply)) {
    }
    return stream->Finish();
  };
  baton::node::v1::KvLinkMessage put;
  put.mutable_put()->set_transfer(1);
  put.mutable_put()->set_request_id("req-x");
  grpc::Status status = run({put});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("the first message is not a hello"));

  baton::node::v1::KvLinkMessage hello;
  hello.mutable_hello()->set_link_kind("carrier-pigeon");
  hello.mutable_hello()->set_max_segment_bytes(receiver_factory_->max_piece_bytes());
  hello.mutable_hello()->add_pool_names("target");
  hello.mutable_hello()->add_pool_names("draft");
  status = run({hello});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("'carrier-pigeon'"));

  hello.mutable_hello()->set_link_kind("tcp");
  hello.mutable_hello()->set_max_segment_bytes(4096);
  status = run({hello});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("pieces of 4096 bytes"));

  // A join that never comes (no such link) ends by the receiver's join deadline, named.
  hello.mutable_hello()->set_max_segment_bytes(receiver_factory_->max_piece_bytes());
  hello.mutable_hello()->set_link_id("not-a-port");
  status = run({hello});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("cannot join the tcp link"));

  // A put announcing more bytes than any pool holds (they could never be discarded): the stream
  // ends, named, instead of the receiver waiting for them.
  baton::node::v1::KvLinkMessage huge;
  huge.mutable_put()->set_transfer(1);
  huge.mutable_put()->set_request_id("req-huge");
  auto* copy = huge.mutable_put()->add_copies();
  copy->set_dst_offset(0);
  copy->set_bytes(std::uint64_t{1} << 62);
  {
    // A link to join: a listener of the receiver's own test factory.
    auto id = receiver_factory_->new_link_id();
    ASSERT_TRUE(id.ok());
    hello.mutable_hello()->set_link_id(*id);
    std::thread rank0([&] { (void)receiver_factory_->join(*id, 0, testing::in(10s), [] { return false; }); });
    status = run({hello, huge});
    rank0.join();
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("more than any pool holds"));

  const std::vector<Copy> copies{{0, 0, kMiB}};
  auto after = sender_->begin(target("req-after"));
  ASSERT_TRUE(after.ok()) << after.status();
  (*after)->put(0, copies);
  ASSERT_TRUE(finish_and_wait(**after, 10s).ok());
  EXPECT_EQ(0, std::memcmp(dst_[0]->data(), src_[0]->data(), kMiB));
}

TEST_F(KvLinkTransportTest, ReceiverRestartFailsWaitingTransfersAndANewInstanceReconnects) {
  receiver_factory_->set_stall_receives(true);  // so that the transfer is still waiting at the restart
  auto waiting = sender_->begin(target("req-waiting"));
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  (*waiting)->put(0, std::vector<Copy>{{0, 0, 8 * kMiB}});
  DoneWaiter done;
  (*waiting)->finish(in(30s), done.callback());
  const int port = port_;
  stop_server();
  auto status = done.wait_until(in(10s));
  ASSERT_TRUE(status.has_value()) << "the transfer did not fail when its receiver went away";
  EXPECT_EQ(status->code(), absl::StatusCode::kUnavailable) << *status;

  receiver_factory_->set_stall_receives(false);
  start_server(port);
  const std::vector<Copy> copies{{0, 0, 2 * kMiB}};
  auto next = sender_->begin(target("req-next", /*instance=*/2));
  ASSERT_TRUE(next.ok()) << next.status();
  (*next)->put(0, copies);
  ASSERT_TRUE(finish_and_wait(**next, 10s).ok());
  EXPECT_EQ(0, std::memcmp(dst_[0]->data(), src_[0]->data(), 2 * kMiB));
  EXPECT_EQ(sender_->links_made(), 2);
}

}  // namespace
}  // namespace baton::kv
