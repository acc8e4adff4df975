// The UCX transport on loopback, sender and receiver in one process with separate memory: bytes
// land exactly, connections are cached and replaced, bad input is rejected, and a dead peer fails
// a transfer before its deadline. ctest runs this twice: with UCX's default transports and with
// UCX_TLS=tcp.
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "kv_test_support.h"
#include "kv_transfer/ucx_transport.h"

namespace baton::kv {
namespace {

using namespace std::chrono_literals;
using testing::finish_and_wait;
using testing::holds_exactly;
using testing::make_pools;
using testing::plan_copies;
using testing::regions;

constexpr std::size_t kMiB = 1 << 20;

struct Side {
  std::vector<std::unique_ptr<testing::TestPool>> pools;
};

class UcxTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = make_pools(8 * kMiB, 2 * kMiB);
    src_[0]->fill_random(1);
    src_[1]->fill_random(2);
    dst_ = make_pools(12 * kMiB, 3 * kMiB);
    for (auto& p : dst_) p->fill_pattern();
    auto receiver = UcxKvReceiver::create(regions(dst_));
    ASSERT_TRUE(receiver.ok()) << receiver.status();
    receiver_ = std::move(*receiver);
    auto sender = UcxKvSender::create(regions(src_));
    ASSERT_TRUE(sender.ok()) << sender.status();
    sender_ = std::move(*sender);
  }

  TransferTarget target(std::string request_id, std::uint64_t instance = 1) const {
    EXPECT_NE(receiver_, nullptr);
    return TransferTarget{std::move(request_id), "decode-0:7000", instance, receiver_->descriptor()};
  }

  std::vector<std::unique_ptr<testing::TestPool>> src_, dst_;
  std::unique_ptr<UcxKvReceiver> receiver_;
  std::unique_ptr<UcxKvSender> sender_;
};

TEST_F(UcxTransportTest, SmallAndLargeCopiesLandExactly) {
  // Pool 0: three 2 MiB runs and 2000 256-byte row slices; pool 1: one 1 MiB run and 500 slices.
  auto copies0 = plan_copies(11, src_[0]->size(), dst_[0]->size(), 3, 2 * kMiB, 2000, 256);
  auto copies1 = plan_copies(12, src_[1]->size(), dst_[1]->size(), 1, kMiB, 500, 256);
  auto transfer = sender_->begin(target("req-1"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  // Posted in slices, as a prefill posts layer by layer.
  std::span<const Copy> all0(copies0);
  for (std::size_t i = 0; i < all0.size(); i += 300) (*transfer)->put(0, all0.subspan(i, std::min<std::size_t>(300, all0.size() - i)));
  (*transfer)->put(1, copies1);
  std::int64_t expected_bytes = 0;
  for (const Copy& c : copies0) expected_bytes += c.bytes;
  for (const Copy& c : copies1) expected_bytes += c.bytes;
  EXPECT_EQ((*transfer)->bytes_posted(), expected_bytes);
  ASSERT_TRUE(finish_and_wait(**transfer, 10s).ok());
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], copies0));
  EXPECT_TRUE(holds_exactly(*src_[1], *dst_[1], copies1));
}

TEST_F(UcxTransportTest, AdjacentBlocksLandExactly) {
  // Consecutive blocks of a layer: runs that continue one another on both sides (merged into one
  // put), on one side only, and a batch posted across several put() calls.
  std::vector<Copy> copies;
  for (std::uint64_t b = 0; b < 64; ++b) copies.push_back({b * 4096, 65536 + b * 4096, 4096});
  for (std::uint64_t b = 0; b < 16; ++b) copies.push_back({b * 4096, 2 * kMiB + b * 8192, 4096});
  auto transfer = sender_->begin(target("req-adjacent"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  std::span<const Copy> all(copies);
  (*transfer)->put(0, all.subspan(0, 30));
  (*transfer)->put(0, all.subspan(30));
  ASSERT_TRUE(finish_and_wait(**transfer, 10s).ok());
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], copies));
}

TEST_F(UcxTransportTest, ManyTransfersInARowEachWakeTheThread) {
  // Back-to-back transfers of many put() calls each, every one waited for: the commands race the
  // transport thread's wake-ups, and each must be seen (a lost wake-up shows as a begin() or
  // finish() that never answers).
  for (int i = 0; i < 200; ++i) {
    auto transfer = sender_->begin(target("req-" + std::to_string(i)));
    ASSERT_TRUE(transfer.ok()) << "transfer " << i << ": " << transfer.status();
    for (std::uint64_t j = 0; j < 32; ++j) {
      const std::uint64_t at = (static_cast<std::uint64_t>(i) * 32 + j) * 512;
      (*transfer)->put(0, std::vector<Copy>{{at, at, 512}});
    }
    ASSERT_TRUE(finish_and_wait(**transfer, 5s).ok()) << "transfer " << i;
  }
  EXPECT_EQ(std::memcmp(dst_[0]->data(), src_[0]->data(), 200 * 32 * 512), 0);
}

TEST_F(UcxTransportTest, EmptyTransferFinishesOk) {
  auto transfer = sender_->begin(target("req-empty"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  EXPECT_TRUE(finish_and_wait(**transfer, 5s).ok());
}

TEST_F(UcxTransportTest, ConnectionIsReusedAcrossTransfers) {
  for (int i = 0; i < 2; ++i) {
    auto copies = plan_copies(20 + i, src_[0]->size(), dst_[0]->size(), 1, kMiB, 100, 256);
    auto transfer = sender_->begin(target("req-" + std::to_string(i)));
    ASSERT_TRUE(transfer.ok()) << transfer.status();
    (*transfer)->put(0, copies);
    ASSERT_TRUE(finish_and_wait(**transfer, 10s).ok());
    EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], copies));
    dst_[0]->fill_pattern();
  }
  EXPECT_EQ(sender_->connections_made(), 1);
}

TEST_F(UcxTransportTest, NewInstanceReplacesTheConnection) {
  auto first = sender_->begin(target("req-a", 1));
  ASSERT_TRUE(first.ok()) << first.status();
  (*first)->put(0, std::vector<Copy>{{0, 0, 4096}});
  ASSERT_TRUE(finish_and_wait(**first, 10s).ok());

  // The decode node restarts: new memory, new keys, new instance id, same address.
  receiver_.reset();
  dst_ = make_pools(12 * kMiB, 3 * kMiB);
  for (auto& p : dst_) p->fill_pattern();
  auto restarted = UcxKvReceiver::create(regions(dst_));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  receiver_ = std::move(*restarted);

  auto copies = plan_copies(31, src_[0]->size(), dst_[0]->size(), 2, kMiB, 300, 256);
  auto second = sender_->begin(target("req-b", 2));
  ASSERT_TRUE(second.ok()) << second.status();
  (*second)->put(0, copies);
  ASSERT_TRUE(finish_and_wait(**second, 10s).ok());
  EXPECT_TRUE(holds_exactly(*src_[0], *dst_[0], copies));
  EXPECT_EQ(sender_->connections_made(), 2);
}

TEST_F(UcxTransportTest, MalformedDescriptorIsInvalidArgument) {
  TransferTarget t = target("req-bad");
  for (std::string bad : {std::string("grpc/1"), std::string(""), receiver_->descriptor().substr(0, 40),
                          receiver_->descriptor() + "x"}) {
    t.descriptor = bad;
    auto transfer = sender_->begin(t);
    ASSERT_FALSE(transfer.ok());
    EXPECT_EQ(transfer.status().code(), absl::StatusCode::kInvalidArgument) << transfer.status();
    EXPECT_TRUE(testing::mentions(transfer.status(), "req-bad"));
  }
  EXPECT_EQ(sender_->connections_made(), 0);
}

TEST_F(UcxTransportTest, CopiesOutOfBoundsFailTheTransfer) {
  struct Case {
    std::int32_t pool;
    Copy copy;
    std::string_view says;
  };
  const Case cases[] = {
      {0, {src_[0]->size() - 100, 0, 4096}, "local pool 0"},   // past the source pool
      {0, {0, dst_[0]->size() - 100, 4096}, "peer pool 0"},    // past the destination pool
      {1, {0, ~std::uint64_t{0} - 10, 4096}, "peer pool 1"},   // offset + bytes overflows
      {2, {0, 0, 4096}, "pool 2 is out of range"},
  };
  for (const Case& c : cases) {
    auto transfer = sender_->begin(target("req-oob"));
    ASSERT_TRUE(transfer.ok()) << transfer.status();
    (*transfer)->put(c.pool, std::vector<Copy>{{0, 0, 256}, c.copy});
    absl::Status status = finish_and_wait(**transfer, 5s);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(testing::mentions(status, c.says));
    EXPECT_TRUE(testing::mentions(status, "req-oob"));
  }
  // The destination outside the first good copy is untouched.
  EXPECT_EQ(dst_[0]->data()[dst_[0]->size() - 50], testing::TestPool::pattern(dst_[0]->size() - 50));
}

TEST_F(UcxTransportTest, PeerDyingMidTransferFailsItBeforeTheDeadline) {
  auto warm = sender_->begin(target("req-warm"));
  ASSERT_TRUE(warm.ok()) << warm.status();
  (*warm)->put(0, std::vector<Copy>{{0, 0, kMiB}});
  ASSERT_TRUE(finish_and_wait(**warm, 10s).ok());

  auto transfer = sender_->begin(target("req-mid"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  (*transfer)->put(0, std::vector<Copy>{{0, 0, kMiB}});
  receiver_.reset();  // the decode node dies while the prefill still pushes
  (*transfer)->put(0, std::vector<Copy>{{kMiB, kMiB, 2 * kMiB}});
  const auto started = std::chrono::steady_clock::now();
  absl::Status status = finish_and_wait(**transfer, 5s);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(testing::mentions(status, "req-mid"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

TEST_F(UcxTransportTest, StaleDescriptorOfADeadPeerFailsBeforeTheDeadline) {
  auto warm = sender_->begin(target("req-warm"));
  ASSERT_TRUE(warm.ok()) << warm.status();
  ASSERT_TRUE(finish_and_wait(**warm, 10s).ok());
  const TransferTarget stale = target("req-stale");
  receiver_.reset();

  for (int i = 0; i < 2; ++i) {  // whether or not the cached connection has noticed yet
    const auto started = std::chrono::steady_clock::now();
    auto transfer = sender_->begin(stale);
    if (!transfer.ok()) {  // refusing at begin is as good as failing at finish
      EXPECT_EQ(transfer.status().code(), absl::StatusCode::kUnavailable) << transfer.status();
      continue;
    }
    (*transfer)->put(0, std::vector<Copy>{{0, 0, 2 * kMiB}});
    absl::Status status = finish_and_wait(**transfer, 5s);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  }
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

TEST_F(UcxTransportTest, IdleThreadsSleep) {
  // With a live connection and nothing to send, the transport and progress threads must sleep in
  // epoll: over an idle second the process uses a small fraction of one core's time.
  auto transfer = sender_->begin(target("req-idle"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  (*transfer)->put(0, std::vector<Copy>{{0, 0, kMiB}});
  ASSERT_TRUE(finish_and_wait(**transfer, 10s).ok());
  const double before = cpu_seconds();
  std::this_thread::sleep_for(1s);  // the measurement window, not a synchronisation
  EXPECT_LT(cpu_seconds() - before, 0.2);
}

TEST_F(UcxTransportTest, IdleThreadsSleepAfterAPeerFailed) {
  // UCX 1.12 could keep a worker's event fd signalled after an endpoint failed (keep-alive); the
  // sender must still go back to sleep once it has dropped the dead peer.
  auto transfer = sender_->begin(target("req-idle"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  (*transfer)->put(0, std::vector<Copy>{{0, 0, kMiB}});
  ASSERT_TRUE(finish_and_wait(**transfer, 10s).ok());
  const TransferTarget stale = target("req-after");
  receiver_.reset();
  auto after = sender_->begin(stale);  // fails, at begin or at finish: the death has been handled
  if (after.ok()) {
    (*after)->put(0, std::vector<Copy>{{0, 0, 4096}});
    EXPECT_FALSE(finish_and_wait(**after, 5s).ok());
  }
  const double before = cpu_seconds();
  std::this_thread::sleep_for(1s);  // the measurement window, not a synchronisation
  EXPECT_LT(cpu_seconds() - before, 0.2);
}

TEST_F(UcxTransportTest, SenderDestroyedBeforeFinishReportsCancelled) {
  auto transfer = sender_->begin(target("req-orphan"));
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  sender_.reset();
  absl::Status status = finish_and_wait(**transfer, 5s);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

TEST_F(UcxTransportTest, DoneCallbackMayBeginTheNextTransfer) {
  testing::DoneWaiter second_done;
  std::unique_ptr<KvTransfer> second;
  auto first = sender_->begin(target("req-1"));
  ASSERT_TRUE(first.ok()) << first.status();
  (*first)->put(0, std::vector<Copy>{{0, 0, 4096}});
  (*first)->finish(testing::in(10s), [&](absl::Status status) {
    ASSERT_TRUE(status.ok()) << status;
    auto next = sender_->begin(target("req-2"));  // on the transport thread
    ASSERT_TRUE(next.ok()) << next.status();
    second = std::move(*next);
    second->put(0, std::vector<Copy>{{8192, 8192, 4096}});
    second->finish(testing::in(10s), second_done.callback());
  });
  auto status = second_done.wait_until(testing::in(12s));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->ok()) << *status;
  EXPECT_EQ(std::memcmp(dst_[0]->data() + 8192, src_[0]->data() + 8192, 4096), 0);
}

}  // namespace
}  // namespace baton::kv
