// The gRPC transport on loopback: a real grpc::Server on 127.0.0.1 serving only PushKv through
// GrpcKvReceiver, and a GrpcKvSender in the same process with separate memory.
#include <grpcpp/grpcpp.h>

#include <chrono>

#include "gtest/gtest.h"
#include "kv_test_support.h"
#include "kv_transfer/grpc_push_service.h"
#include "kv_transfer/grpc_transport.h"

namespace baton::kv {
namespace {

using namespace std::chrono_literals;
using testing::finish_and_wait;
using testing::holds_exactly;
using testing::make_pools;
using testing::plan_copies;
using testing::regions;

constexpr std::size_t kMiB = 1 << 20;

class GrpcTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = make_pools(12 * kMiB, 2 * kMiB);
    src_[0]->fill_random(1);
    src_[1]->fill_random(2);
    dst_ = make_pools(12 * kMiB, 3 * kMiB);
    for (auto& p : dst_) p->fill_pattern();
    receiver_ = std::make_unique<GrpcKvReceiver>(
        regions(dst_), [this](const std::string& request_id, const std::string& capability, std::int32_t pool,
                              std::uint64_t offset, std::uint64_t bytes) {
          return check_ ? check_(request_id, capability, pool, offset, bytes) : absl::OkStatus();
        });
    start_server();
    sender_ = std::make_unique<GrpcKvSender>(regions(src_));
  }

  void TearDown() override {
    sender_.reset();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 2s);
  }

  void start_server() {
    service_ = std::make_unique<PushKvService>(receiver_.get());
    grpc::ServerBuilder builder;
    configure_kv_server(builder);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  TransferTarget target(std::string request_id, std::uint64_t instance = 1) const {
    const std::string capability = "token-" + request_id;
    return TransferTarget{std::move(request_id), "127.0.0.1:" + std::to_string(port_), instance,
                          receiver_->descriptor(), capability};
  }

  std::vector<std::unique_ptr<testing::TestPool>> src_, dst_;
  WriteCheck check_;
  std::unique_ptr<GrpcKvReceiver> receiver_;
  std::unique_ptr<PushKvService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<GrpcKvSender> sender_;
};

TEST_F(GrpcTransportTest, SmallAndLargeCopiesLandExactly) {
  // A 9 MiB run spans three chunks; 2000 row slices share chunks.
  auto copies0 = plan_copies(11, src_[0]->size(), dst_[0]->size(), 1, 9 * kMiB, 2000, 256);
  auto copies1 = plan_copies(12, src_[1]->size(), dst_[1]->size(), 1, kMiB, 500, 256);
  std::vector<std::string> seen_requests;
  check_ = [&](const std::string& request_id, const std::string&, std::int32_t, std::uint64_t, std::uint64_t) {
    if (seen_requests.empty() || seen_requests.back() != request_id) seen_requests.push_back(request_id);
    return absl::OkStatus();
  };
  auto transfer = sender_->begin(target("req-1"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  std::span<const Copy> all0(copies0);
  for (std::size_t i = 0; i < all0.size(); i += 300) (*transfer)->put(0, all0.subspan(i, std::min<std::size_t>(300, all0.size() - i)));
  (*transfer)->put(1, copies1);
  ASSERT_TRUE(finish_and_wait(**transfer, 20s).ok());
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], copies0));
  EXPECT_TRUE(holds_exactly(*src_[1], *dst_[1], copies1));
  EXPECT_EQ(seen_requests, std::vector<std::string>{"req-1"});
}

TEST_F(GrpcTransportTest, ChannelIsCachedPerInstance) {
  for (std::uint64_t instance : {1, 1, 2}) {
    auto transfer = sender_->begin(target("req", instance));
    ASSERT_TRUE(transfer.ok()) << transfer.status();
    (*transfer)->put(0, std::vector<Copy>{{0, 0, 4096}});
    ASSERT_TRUE(finish_and_wait(**transfer, 10s).ok());
  }
  EXPECT_EQ(sender_->channels_made(), 2);
  sender_->invalidate(target("req").peer_address);
  auto transfer = sender_->begin(target("req", 2));
  ASSERT_TRUE(transfer.ok());
  EXPECT_TRUE(finish_and_wait(**transfer, 10s).ok());
  EXPECT_EQ(sender_->channels_made(), 3);
}

TEST_F(GrpcTransportTest, TheReservationsCapabilityTravelsWithTheWrites) {
  // D's check (decode_service.h) admits a write only with the request's own token.
  check_ = [](const std::string& request_id, const std::string& capability, std::int32_t, std::uint64_t,
              std::uint64_t) {
    return capability == "token-" + request_id ? absl::OkStatus() : absl::PermissionDeniedError("not its token");
  };
  auto own = sender_->begin(target("req-a"));
  ASSERT_TRUE(own.ok()) << own.status();
  (*own)->put(0, std::vector<Copy>{{0, 0, 4096}});
  EXPECT_TRUE(finish_and_wait(**own, 10s).ok());

  TransferTarget forged = target("req-b");
  forged.capability = "token-req-a";  // another request's token
  auto stolen = sender_->begin(forged);
  ASSERT_TRUE(stolen.ok()) << stolen.status();
  (*stolen)->put(0, std::vector<Copy>{{0, 8192, 4096}});
  const absl::Status refused = finish_and_wait(**stolen, 10s);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_TRUE(testing::mentions(refused, "not its token"));
}

TEST_F(GrpcTransportTest, RejectedWriteFailsTheTransferNamingIt) {
  check_ = [](const std::string& request_id, const std::string&, std::int32_t pool, std::uint64_t offset,
               std::uint64_t) {
    if (pool == 0 && offset >= 65536) {
      return absl::PermissionDeniedError(request_id + " does not hold that block");
    }
    return absl::OkStatus();
  };
  auto transfer = sender_->begin(target("req-evil"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  (*transfer)->put(0, std::vector<Copy>{{0, 0, 4096}, {0, 65536, 4096}});
  absl::Status status = finish_and_wait(**transfer, 10s);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_TRUE(testing::mentions(status, "req-evil"));
  EXPECT_TRUE(testing::mentions(status, "offset 65536"));
  EXPECT_TRUE(testing::mentions(status, "does not hold that block"));
}

TEST_F(GrpcTransportTest, OutOfBoundsIsInvalidArgument) {
  struct Case {
    std::int32_t pool;
    Copy copy;
    std::string_view says;
  };
  const Case cases[] = {
      {0, {0, dst_[0]->size() - 10, 4096}, "destination pool 0"},  // the receiver refuses it
      {0, {src_[0]->size() - 10, 0, 4096}, "local pool 0"},        // the sender refuses it
      {2, {0, 0, 16}, "pool 2 is out of range"},
  };
  for (const Case& c : cases) {
    auto transfer = sender_->begin(target("req-oob"));
    ASSERT_TRUE(transfer.ok()) << transfer.status();
    (*transfer)->put(c.pool, std::vector<Copy>{c.copy});
    absl::Status status = finish_and_wait(**transfer, 10s);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(testing::mentions(status, c.says));
    EXPECT_TRUE(testing::mentions(status, "req-oob"));
  }
  EXPECT_EQ(dst_[0]->data()[dst_[0]->size() - 5], testing::TestPool::pattern(dst_[0]->size() - 5));
}

TEST_F(GrpcTransportTest, WrongDescriptorIsInvalidArgument) {
  TransferTarget t = target("req-x");
  t.descriptor = "BUCX....";
  auto transfer = sender_->begin(t);
  ASSERT_FALSE(transfer.ok());
  EXPECT_EQ(transfer.status().code(), absl::StatusCode::kInvalidArgument) << transfer.status();
}

TEST_F(GrpcTransportTest, PeerDownFailsBeforeTheDeadline) {
  server_->Shutdown(std::chrono::system_clock::now() + 1s);
  server_.reset();
  const auto started = std::chrono::steady_clock::now();
  auto transfer = sender_->begin(target("req-down"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  (*transfer)->put(0, std::vector<Copy>{{0, 0, 2 * kMiB}});
  absl::Status status = finish_and_wait(**transfer, 5s);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(testing::mentions(status, "req-down"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

TEST_F(GrpcTransportTest, StuckPeerHitsTheDeadline) {
  // The check blocks until released: the stream stalls, finish() must give up at its deadline.
  // The gate is shared with the server thread, which may still be leaving the check after the
  // test body ends.
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
  };
  auto gate = std::make_shared<Gate>();
  check_ = [gate](const std::string&, const std::string&, std::int32_t, std::uint64_t, std::uint64_t) {
    std::unique_lock lock(gate->mu);
    gate->cv.wait_for(lock, 10s, [&] { return gate->open; });
    return absl::OkStatus();
  };
  auto transfer = sender_->begin(target("req-stuck"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  (*transfer)->put(0, std::vector<Copy>{{0, 0, 4096}});
  const auto started = std::chrono::steady_clock::now();
  absl::Status status = finish_and_wait(**transfer, 500ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(testing::mentions(status, "req-stuck"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  {
    std::lock_guard lock(gate->mu);
    gate->open = true;
  }
  gate->cv.notify_all();
}

}  // namespace
}  // namespace baton::kv
