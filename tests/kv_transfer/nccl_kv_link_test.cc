// The link transport over real NCCL, GPU memory to GPU memory: a LinkKvReceiver behind a real
// gRPC server on loopback and a LinkKvSender in the same process, each with its own NCCL link
// factory — on devices 0 and 1 when there are two, else both on device 0 (NCCL may refuse two
// ranks on one GPU; the test then checks that the refusal came at once, named, and skips).
// Label `cuda`: skips on a machine without a GPU or without libnccl.so.2.
#include <cuda_runtime_api.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kv_test_support.h"
#include "kv_transfer/kv_link_service.h"
#include "kv_transfer/kv_link_transport.h"
#include "kv_transfer/nccl_kv_link.h"

namespace baton::kv {
namespace {

using namespace std::chrono_literals;
using testing::finish_and_wait;
using testing::plan_copies;

constexpr std::size_t kMiB = 1 << 20;

// A pool in device memory, with a host copy of what it should hold.
class DevicePool {
 public:
  DevicePool(std::string name, std::size_t bytes, int device) : name_(std::move(name)), host_(bytes) {
    cudaSetDevice(device);
    if (cudaMalloc(&data_, bytes) != cudaSuccess) data_ = nullptr;
  }
  ~DevicePool() {
    if (data_ != nullptr) cudaFree(data_);
  }
  bool ok() const { return data_ != nullptr; }
  MemoryRegion region() const { return MemoryRegion{name_, data_, host_.size()}; }
  std::vector<std::uint8_t>& expected() { return host_; }
  void fill(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (auto& b : host_) b = static_cast<std::uint8_t>(rng());
    cudaMemcpy(data_, host_.data(), host_.size(), cudaMemcpyHostToDevice);
  }
  std::vector<std::uint8_t> read() const {
    std::vector<std::uint8_t> out(host_.size());
    cudaMemcpy(out.data(), data_, out.size(), cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  std::string name_;
  void* data_ = nullptr;
  std::vector<std::uint8_t> host_;
};

TEST(NcclKvLink, TransfersLandExactlyGpuToGpu) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  const int src_device = 0, dst_device = devices >= 2 ? 1 : 0;
  auto sender_factory = make_nccl_link_factory(NcclLinkOptions{src_device, kMiB});
  if (!sender_factory.ok()) GTEST_SKIP() << sender_factory.status();
  auto receiver_factory = make_nccl_link_factory(NcclLinkOptions{dst_device, kMiB});
  ASSERT_TRUE(receiver_factory.ok()) << receiver_factory.status();

  DevicePool src0("target", 12 * kMiB, src_device), src1("draft", 2 * kMiB, src_device);
  DevicePool dst0("target", 12 * kMiB, dst_device), dst1("draft", 3 * kMiB, dst_device);
  ASSERT_TRUE(src0.ok() && src1.ok() && dst0.ok() && dst1.ok());
  src0.fill(1);
  src1.fill(2);
  dst0.fill(3);
  dst1.fill(4);

  LinkKvReceiver receiver({dst0.region(), dst1.region()}, *receiver_factory,
                          [](const std::string& request_id, const std::string&, std::int32_t, std::uint64_t offset,
                             std::uint64_t) {
                            if (request_id == "req-evil" && offset >= 65536) return absl::PermissionDeniedError("not its block");
                            return absl::OkStatus();
                          },
                          LinkReceiverOptions{30s});
  KvLinkService service(&receiver);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  LinkKvSender sender({src0.region(), src1.region()}, *sender_factory, LinkSenderOptions{30s});
  auto target = [&](std::string id) {
    return TransferTarget{std::move(id), "127.0.0.1:" + std::to_string(port), 1, receiver.descriptor()};
  };

  const auto started = std::chrono::steady_clock::now();
  auto first = sender.begin(target("req-1"));
  if (!first.ok() && dst_device == src_device) {
    // One GPU: NCCL (2.5 and later) refuses two ranks on it. It must say so, not hang.
    EXPECT_NE(first.status().code(), absl::StatusCode::kDeadlineExceeded) << first.status();
    EXPECT_LT(std::chrono::steady_clock::now() - started, 25s);
    server->Shutdown(std::chrono::system_clock::now() + 1s);
    GTEST_SKIP() << "one GPU, and NCCL would not put both ranks on it: " << first.status();
  }
  ASSERT_TRUE(first.ok()) << first.status();

  // Large runs cut into 1 MiB pieces and thousands of row slices, in layer-sized puts.
  auto copies0 = plan_copies(11, 12 * kMiB, 12 * kMiB, 1, 9 * kMiB, 2000, 256);
  auto copies1 = plan_copies(12, 2 * kMiB, 3 * kMiB, 1, kMiB, 500, 256);
  std::span<const Copy> all0(copies0);
  for (std::size_t i = 0; i < all0.size(); i += 300) (*first)->put(0, all0.subspan(i, std::min<std::size_t>(300, all0.size() - i)));
  (*first)->put(1, copies1);
  ASSERT_TRUE(finish_and_wait(**first, 30s).ok());
  for (const Copy& c : copies0) std::memcpy(dst0.expected().data() + c.dst_offset, src0.expected().data() + c.src_offset, c.bytes);
  for (const Copy& c : copies1) std::memcpy(dst1.expected().data() + c.dst_offset, src1.expected().data() + c.src_offset, c.bytes);
  EXPECT_TRUE(dst0.read() == dst0.expected());
  EXPECT_TRUE(dst1.read() == dst1.expected());

  // A rejected copy goes to the discard buffer; the link serves the next transfer correctly.
  auto evil = sender.begin(target("req-evil"));
  ASSERT_TRUE(evil.ok()) << evil.status();
  (*evil)->put(0, std::vector<Copy>{{0, 65536, 3 * kMiB}});
  EXPECT_EQ(finish_and_wait(**evil, 30s).code(), absl::StatusCode::kPermissionDenied);
  const std::vector<Copy> after{{5 * kMiB, 0, 2 * kMiB}};
  auto next = sender.begin(target("req-2"));
  ASSERT_TRUE(next.ok()) << next.status();
  (*next)->put(0, after);
  ASSERT_TRUE(finish_and_wait(**next, 30s).ok());
  std::memcpy(dst0.expected().data(), src0.expected().data() + 5 * kMiB, 2 * kMiB);
  EXPECT_TRUE(dst0.read() == dst0.expected());
  EXPECT_EQ(sender.links_made(), 1);
  server->Shutdown(std::chrono::system_clock::now() + 1s);
}

}  // namespace
}  // namespace baton::kv
