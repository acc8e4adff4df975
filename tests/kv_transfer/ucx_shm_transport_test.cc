// The UCX shared-memory path: a receiver whose pools UcxShmMemory allocated offers it, a sender on
// the same host takes it (and the network path when UCX_TLS leaves no shared memory: ctest runs
// this binary again with UCX_TLS=tcp), bytes land exactly, and a receiver process killed during or
// after a transfer costs the sender at most that transfer, within its deadline.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "gtest/gtest.h"
#include "kv_test_support.h"
#include "kv_transfer/ucx_descriptor.h"
#include "kv_transfer/ucx_transport.h"

extern char** environ;

namespace baton::kv {
namespace {

using namespace std::chrono_literals;
using testing::finish_and_wait;

constexpr std::size_t kMiB = 1 << 20;

bool shm_expected() { return shared_memory_transports(std::getenv("UCX_TLS")).has_value(); }
std::string_view expected_path() { return shm_expected() ? "shm" : "network"; }

// Destination pools in the receiver's shared memory (private memory when there is none).
struct ShmPools {
  std::shared_ptr<UcxShmMemory> shm;
  std::vector<OwnedRegion> owned;
  std::vector<MemoryRegion> regions;

  static ShmPools make(std::size_t target_bytes, std::size_t draft_bytes) {
    ShmPools out;
    auto shm = UcxShmMemory::create();
    EXPECT_TRUE(shm.ok()) << shm.status();
    out.shm = shm.ok() ? *shm : nullptr;
    EXPECT_EQ(out.shm != nullptr, shm_expected());
    const std::pair<const char*, std::size_t> pools[] = {{"target", target_bytes}, {"draft", draft_bytes}};
    for (const auto& [name, bytes] : pools) {
      if (out.shm) {
        auto region = out.shm->allocate(bytes, name);
        EXPECT_TRUE(region.ok()) << region.status();
        out.owned.push_back(std::move(*region));
      } else {
        auto* p = new std::uint8_t[bytes]();
        out.owned.push_back(OwnedRegion{p, bytes, std::shared_ptr<void>(p, [](void* q) { delete[] static_cast<std::uint8_t*>(q); })});
      }
      auto* data = static_cast<std::uint8_t*>(out.owned.back().base);
      for (std::size_t i = 0; i < bytes; ++i) data[i] = testing::TestPool::pattern(i);
      out.regions.push_back(MemoryRegion{name, out.owned.back().base, bytes});
    }
    return out;
  }
  const std::uint8_t* data(int pool) const { return static_cast<const std::uint8_t*>(owned[pool].base); }
};

::testing::AssertionResult holds_exactly(const testing::TestPool& src, const std::uint8_t* dst, std::size_t dst_bytes,
                                         const std::vector<Copy>& copies) {
  std::vector<std::uint8_t> expected(dst_bytes);
  for (std::size_t i = 0; i < dst_bytes; ++i) expected[i] = testing::TestPool::pattern(i);
  for (const Copy& c : copies) std::memcpy(expected.data() + c.dst_offset, src.data() + c.src_offset, c.bytes);
  if (std::memcmp(expected.data(), dst, dst_bytes) == 0) return ::testing::AssertionSuccess();
  std::size_t first = 0;
  while (expected[first] == dst[first]) ++first;
  return ::testing::AssertionFailure() << "destination differs first at byte " << first;
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// kv_ucx_receiver_child: a receiver in its own process, killed by the test.
class ReceiverProcess {
 public:
  ReceiverProcess(std::size_t target_bytes, std::size_t draft_bytes) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::string a1 = std::to_string(target_bytes), a2 = std::to_string(draft_bytes);
    char* argv[] = {const_cast<char*>(KV_UCX_RECEIVER_CHILD), a1.data(), a2.data(), nullptr};
    if (posix_spawn(&pid_, KV_UCX_RECEIVER_CHILD, &actions, nullptr, argv, environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~ReceiverProcess() {
    kill_now();
    if (stdin_ >= 0) close(stdin_);
    close(stdout_);
  }

  // The child's descriptor, read by a deadline (empty on failure). Its log lines come first.
  std::string descriptor(std::chrono::milliseconds timeout) {
    const std::string prefix = "DESCRIPTOR ";
    std::string text;
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const std::size_t at = text.find(prefix);
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        const std::string hex = text.substr(at + prefix.size(), text.find('\n', at) - at - prefix.size());
        std::string bytes;
        for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
          bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
        }
        return bytes;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = read(stdout_, buf, sizeof(buf));
      if (n <= 0) return "";
      text.append(buf, n);
    }
  }

  // Closes its stdin: the receiver shuts down in order (as a node does on SIGTERM).
  void stop() {
    if (pid_ <= 0) return;
    close(stdin_);
    stdin_ = -1;
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
};

class UcxShmTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = testing::make_pools(8 * kMiB, 2 * kMiB);
    src_[0]->fill_random(1);
    src_[1]->fill_random(2);
    auto sender = UcxKvSender::create(testing::regions(src_));
    ASSERT_TRUE(sender.ok()) << sender.status();
    sender_ = std::move(*sender);
  }

  std::vector<std::unique_ptr<testing::TestPool>> src_;
  std::unique_ptr<UcxKvSender> sender_;
};

TEST(UcxShmMemory, PoolsAreCommittedWhenAllocated) {
  // Committed at allocation (MADV_POPULATE_WRITE), so a page a peer wrote does not fault on its
  // first read here, inside a step or a GPU node's commit copying a mirror into its pool. mincore()
  // sees residency without touching the pages (a sanitizer's checks would fault its own shadow).
  if (!shm_expected()) GTEST_SKIP() << "UCX_TLS leaves no shared memory";
  auto shm = UcxShmMemory::create();
  ASSERT_TRUE(shm.ok() && *shm) << shm.status();
  constexpr std::size_t kBytes = 16 * kMiB;
  auto region = (*shm)->allocate(kBytes, "target");
  ASSERT_TRUE(region.ok()) << region.status();
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((kBytes + page - 1) / page);
  ASSERT_EQ(mincore(region->base, kBytes, resident.data()), 0) << std::strerror(errno);
  const auto count = static_cast<std::size_t>(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }));
  EXPECT_EQ(count, resident.size()) << "of " << resident.size() << " pages, " << count << " are resident";
}

TEST_F(UcxShmTransportTest, SameHostTakesTheSharedMemoryPathAndBytesLandExactly) {
  ShmPools dst = ShmPools::make(12 * kMiB, 3 * kMiB);
  auto receiver = UcxKvReceiver::create(dst.regions, dst.shm);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  auto desc = decode_ucx_descriptor((*receiver)->descriptor());
  ASSERT_TRUE(desc.ok()) << desc.status();
  EXPECT_EQ(desc->shm.has_value(), shm_expected());

  auto copies0 = testing::plan_copies(21, src_[0]->size(), dst.regions[0].bytes, 3, 2 * kMiB, 2000, 256);
  auto copies1 = testing::plan_copies(22, src_[1]->size(), dst.regions[1].bytes, 1, kMiB, 500, 256);
  auto transfer = sender_->begin(TransferTarget{"req-shm", "decode-0:7000", 1, (*receiver)->descriptor()});
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  EXPECT_EQ((*transfer)->path(), expected_path());
  std::span<const Copy> all0(copies0);
  for (std::size_t i = 0; i < all0.size(); i += 300) (*transfer)->put(0, all0.subspan(i, std::min<std::size_t>(300, all0.size() - i)));
  (*transfer)->put(1, copies1);
  ASSERT_TRUE(finish_and_wait(**transfer, 10s).ok());
  EXPECT_TRUE(holds_exactly(*src_[0], dst.data(0), dst.regions[0].bytes, copies0));
  EXPECT_TRUE(holds_exactly(*src_[1], dst.data(1), dst.regions[1].bytes, copies1));

  // The cached connection keeps its path; idle, both sides' threads sleep.
  auto again = sender_->begin(TransferTarget{"req-shm-2", "decode-0:7000", 1, (*receiver)->descriptor()});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->path(), expected_path());
  ASSERT_TRUE(finish_and_wait(**again, 10s).ok());
  EXPECT_EQ(sender_->connections_made(), 1);
  const double before = cpu_seconds();
  std::this_thread::sleep_for(1s);  // the measurement window, not a synchronisation
  EXPECT_LT(cpu_seconds() - before, 0.2);
}

TEST_F(UcxShmTransportTest, PoolsOutsideSharedMemoryOfferOnlyTheNetworkPath) {
  auto shm = UcxShmMemory::create();
  ASSERT_TRUE(shm.ok()) << shm.status();
  auto dst = testing::make_pools(4 * kMiB, kMiB);  // the process's own memory
  auto receiver = UcxKvReceiver::create(testing::regions(dst), *shm);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  auto desc = decode_ucx_descriptor((*receiver)->descriptor());
  ASSERT_TRUE(desc.ok()) << desc.status();
  EXPECT_FALSE(desc->shm.has_value());
  auto transfer = sender_->begin(TransferTarget{"req-net", "decode-1:7000", 1, (*receiver)->descriptor()});
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  EXPECT_EQ((*transfer)->path(), "network");
  (*transfer)->put(0, std::vector<Copy>{{0, 0, kMiB}});
  ASSERT_TRUE(finish_and_wait(**transfer, 10s).ok());
  EXPECT_EQ(std::memcmp(dst[0]->data(), src_[0]->data(), kMiB), 0);
}

TEST_F(UcxShmTransportTest, ReceiverProcessKilledDuringAndAfterATransferCostsOnlyThoseTransfers) {
  ReceiverProcess child(12 * kMiB, 3 * kMiB);
  ASSERT_TRUE(child.started());
  const std::string descriptor = child.descriptor(30s);
  ASSERT_FALSE(descriptor.empty()) << "the receiver process printed no descriptor";
  const TransferTarget target{"req-child", "decode-0:7000", 1, descriptor};

  auto warm = sender_->begin(target);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ((*warm)->path(), expected_path());
  (*warm)->put(0, std::vector<Copy>{{0, 0, kMiB}});
  ASSERT_TRUE(finish_and_wait(**warm, 10s).ok());

  // Killed mid-transfer: the transfer finishes (its bytes went into memory only we still map) or
  // fails, by its deadline.
  auto during = sender_->begin(TransferTarget{"req-during", target.peer_address, 1, descriptor});
  ASSERT_TRUE(during.ok()) << during.status();
  (*during)->put(0, std::vector<Copy>{{0, 0, 4 * kMiB}});
  child.kill_now();
  (*during)->put(0, std::vector<Copy>{{4 * kMiB, 4 * kMiB, 4 * kMiB}});
  auto started = std::chrono::steady_clock::now();
  absl::Status status = finish_and_wait(**during, 5s);
  EXPECT_TRUE(status.ok() || status.code() == absl::StatusCode::kUnavailable) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s + 1s);

  // After the death, with the stale descriptor: refused at begin, failed or finished by the deadline.
  started = std::chrono::steady_clock::now();
  auto after = sender_->begin(TransferTarget{"req-after", target.peer_address, 1, descriptor});
  if (after.ok()) {
    (*after)->put(0, std::vector<Copy>{{0, 0, 2 * kMiB}});
    status = finish_and_wait(**after, 5s);
    EXPECT_TRUE(status.ok() || status.code() == absl::StatusCode::kUnavailable) << status;
  } else {
    EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s + 1s);

  // The sender keeps serving: the node's successor (a new instance at the same address) gets
  // its bytes exactly, on the same path.
  ShmPools dst = ShmPools::make(4 * kMiB, kMiB);
  auto successor = UcxKvReceiver::create(dst.regions, dst.shm);
  ASSERT_TRUE(successor.ok()) << successor.status();
  auto next = sender_->begin(TransferTarget{"req-next", target.peer_address, 2, (*successor)->descriptor()});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)->path(), expected_path());
  const std::vector<Copy> copies{{kMiB, 0, 2 * kMiB}, {0, 3 * kMiB, 4096}};
  (*next)->put(0, copies);
  ASSERT_TRUE(finish_and_wait(**next, 10s).ok());
  EXPECT_TRUE(holds_exactly(*src_[0], dst.data(0), dst.regions[0].bytes, copies));
}

TEST_F(UcxShmTransportTest, ReceiverProcessThatShutsDownIsReplacedByItsSuccessor) {
  ReceiverProcess child(12 * kMiB, 3 * kMiB);
  ASSERT_TRUE(child.started());
  const std::string descriptor = child.descriptor(30s);
  ASSERT_FALSE(descriptor.empty()) << "the receiver process printed no descriptor";
  auto first = sender_->begin(TransferTarget{"req-first", "decode-0:7000", 1, descriptor});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->path(), expected_path());
  (*first)->put(0, std::vector<Copy>{{0, 0, kMiB}});
  ASSERT_TRUE(finish_and_wait(**first, 10s).ok());
  child.stop();

  ShmPools dst = ShmPools::make(4 * kMiB, kMiB);
  auto successor = UcxKvReceiver::create(dst.regions, dst.shm);
  ASSERT_TRUE(successor.ok()) << successor.status();
  auto next = sender_->begin(TransferTarget{"req-next", "decode-0:7000", 2, (*successor)->descriptor()});
  ASSERT_TRUE(next.ok()) << next.status();
  const std::vector<Copy> copies{{kMiB, 0, 2 * kMiB}};
  (*next)->put(0, copies);
  ASSERT_TRUE(finish_and_wait(**next, 10s).ok());
  EXPECT_TRUE(holds_exactly(*src_[0], dst.data(0), dst.regions[0].bytes, copies));
}

}  // namespace
}  // namespace baton::kv
