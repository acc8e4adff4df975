// Graphs on the CPU backend (kernels/cpu/cpu_graph.h): ops recorded between begin_capture() and
// end_capture() do not run then, and each replay runs them on the buffers' contents at that time;
// calls a GPU graph cannot hold break the capture, naming themselves; other threads are unaffected.
#include <thread>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace baton::cpu {
namespace {

std::unique_ptr<CpuBackend> backend() {
  BackendOptions o;
  o.num_threads = 2;
  auto b = CpuBackend::create(o);
  BATON_CHECK(b.ok(), b.status().ToString());
  return std::move(*b);
}

struct Buffers {
  DeviceBuffer a, b, out;
  TensorView va, vb, vout;
};

Buffers make_buffers(CpuBackend& be, std::int64_t n) {
  Buffers bufs;
  for (DeviceBuffer* d : {&bufs.a, &bufs.b, &bufs.out}) {
    auto got = be.allocate(static_cast<std::size_t>(n) * sizeof(float));
    BATON_CHECK(got.ok(), got.status().ToString());
    *d = std::move(*got);
    std::fill_n(static_cast<float*>(d->data()), n, 0.0f);
  }
  bufs.va = bufs.a.view(DType::kF32, {1, n});
  bufs.vb = bufs.b.view(DType::kF32, {1, n});
  bufs.vout = bufs.out.view(DType::kF32, {1, n});
  return bufs;
}

void fill(const TensorView& v, float x) { std::fill_n(v.ptr<float>(), v.numel(), x); }

TEST(CpuGraph, RecordedOpsRunOnlyAtReplayOnTheCurrentContents) {
  auto be = backend();
  ASSERT_TRUE(be->captures_graphs());
  Buffers f = make_buffers(*be, 5);
  fill(f.va, 1.0f);
  fill(f.vb, 2.0f);
  ASSERT_TRUE(be->begin_capture().ok());
  be->add(f.va, f.vb, f.vout);       // out = a + b
  be->add(f.vout, f.vout, f.vout);   // out = 2 (a + b), reading the first op's result
  auto graph = be->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(f.vout.ptr<float>()[0], 0.0f) << "an op ran while being recorded";

  (*graph)->replay();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f.vout.ptr<float>()[i], 6.0f);
  fill(f.va, 10.0f);
  (*graph)->replay();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f.vout.ptr<float>()[i], 24.0f);
  // Ops called after the capture run at once again.
  be->add(f.va, f.vb, f.vout);
  EXPECT_EQ(f.vout.ptr<float>()[0], 12.0f);
}

TEST(CpuGraph, CallsAGraphCannotHoldBreakTheCaptureByName) {
  auto be = backend();
  Buffers f = make_buffers(*be, 4);
  float host[4] = {};
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"synchronize()", [&] { be->synchronize(); }},
      {"copy_to_host()", [&] { be->copy_to_host(host, f.a.data(), sizeof(host)); }},
      {"copy_to_device()", [&] { be->copy_to_device(f.a.data(), host, sizeof(host)); }},
      {"allocate()", [&] { (void)be->allocate(64); }},
      {"fence()", [&] { (void)be->fence(); }},
      {"wait_for()", [&] { be->wait_for(1); }},
  };
  for (const auto& [name, call] : calls) {
    ASSERT_TRUE(be->begin_capture().ok());
    be->add(f.va, f.vb, f.vout);
    call();
    be->add(f.va, f.vb, f.vout);
    auto graph = be->end_capture();
    ASSERT_FALSE(graph.ok()) << name;
    EXPECT_NE(graph.status().message().find(name), std::string::npos) << graph.status();
    // The backend is out of capture mode: ops run at once, and a new capture can start.
    fill(f.va, 3.0f);
    be->add(f.va, f.vb, f.vout);
    EXPECT_EQ(f.vout.ptr<float>()[0], 3.0f);
    fill(f.va, 0.0f);
  }
  EXPECT_FALSE(be->end_capture().ok());  // no capture running
}

TEST(CpuGraph, OtherThreadsCallsRunAndDoNotBreakTheCapture) {
  auto be = backend();
  Buffers f = make_buffers(*be, 4);
  fill(f.va, 1.0f);
  fill(f.vb, 1.0f);
  ASSERT_TRUE(be->begin_capture().ok());
  be->add(f.va, f.vb, f.vout);
  std::thread other([&] {
    auto buf = be->allocate(256);  // e.g. a transport's memory
    EXPECT_TRUE(buf.ok());
    be->add(f.va, f.vb, f.va);  // runs now: a = 2
    be->synchronize();
  });
  other.join();
  EXPECT_EQ(f.va.ptr<float>()[0], 2.0f);
  auto graph = be->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  (*graph)->replay();
  EXPECT_EQ(f.vout.ptr<float>()[0], 3.0f);
}

}  // namespace
}  // namespace baton::cpu
