// KV transfer throughput between two processes on this host: a receiver child (UCX receiver and a
// gRPC PushKv server over one destination pool) and the sender in the parent. As on a decode node,
// the child's pool is UCX shared memory when UCX_TLS allows it, so UCX takes the shared-memory
// path ("path":"shm"); with UCX_TLS=tcp it takes the network path ("path":"network"). Cases:
//   large  TOTAL bytes as 1 MiB copies (per-layer block runs)
//   small  TOTAL bytes as 4 KiB copies (scattered rows)
// each timed from begin() to finish()'s report, median of --reps after one warm-up, and checked
// byte for byte (xxh3 of the child's pool against the expected image). One JSON object per line on
// stdout; run_kv_transfer_bench.sh adds ucx_perftest for the same sizes and the ratios.
//
//   kv_transfer_bench [--transport ucx,grpc] [--cases large,small] [--total-mib 64] [--reps 5]
//
// The child is forked before UCX or gRPC is initialised in either process.
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kv_transfer/done_waiter.h"
#include "kv_transfer/grpc_push_service.h"
#include "kv_transfer/grpc_transport.h"
#include "kv_transfer/ucx_transport.h"
#include "nlohmann/json.hpp"

namespace {

using baton::kv::Copy;
using baton::kv::MemoryRegion;
using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "kv_transfer_bench: %s\n", what.c_str());
  std::exit(1);
}

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) die("pipe write failed");
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

bool read_all(int fd, void* p, std::size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// The receiver process: serves until the parent closes the command pipe. Commands: 'H' answers the
// xxh3 of the pool, 'Z' zeroes it.
[[noreturn]] void run_receiver(int to_parent, int from_parent, std::size_t pool_bytes) {
  // The pool as a decode node allocates it: in UCX shared memory when there is any.
  auto shm = baton::kv::UcxShmMemory::create();
  if (!shm.ok()) die(std::string(shm.status().message()));
  baton::kv::OwnedRegion owned;
  if (*shm) {
    auto region = (*shm)->allocate(pool_bytes, "target");
    if (!region.ok()) die(std::string(region.status().message()));
    owned = std::move(*region);
  } else {
    owned.base = new char[pool_bytes]();
    owned.bytes = pool_bytes;
    owned.owner = std::shared_ptr<void>(owned.base, [](void* p) { delete[] static_cast<char*>(p); });
  }
  std::span<char> pool(static_cast<char*>(owned.base), pool_bytes);
  std::vector<MemoryRegion> regions{{"target", pool.data(), pool.size()}};
  auto ucx = baton::kv::UcxKvReceiver::create(regions, *shm);
  if (!ucx.ok()) die(std::string(ucx.status().message()));
  baton::kv::GrpcKvReceiver grpc_receiver(regions, nullptr);
  baton::kv::PushKvService service(&grpc_receiver);
  grpc::ServerBuilder builder;
  baton::kv::configure_kv_server(builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server) die("grpc server did not start");

  const std::string& desc = (*ucx)->descriptor();
  const auto len = static_cast<std::uint32_t>(desc.size());
  write_all(to_parent, &len, sizeof(len));
  write_all(to_parent, desc.data(), desc.size());
  write_all(to_parent, &port, sizeof(port));
  char cmd = 0;
  while (read_all(from_parent, &cmd, 1)) {
    if (cmd == 'H') {
      std::uint64_t h = XXH3_64bits(pool.data(), pool.size());
      write_all(to_parent, &h, sizeof(h));
    } else if (cmd == 'Z') {
      std::memset(pool.data(), 0, pool.size());
      write_all(to_parent, &cmd, 1);
    }
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  ucx->reset();
  std::_Exit(0);  // not exit(): the parent's atexit handlers and buffers are not ours to run
}

struct Child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
  std::string ucx_descriptor;
  int grpc_port = 0;

  std::uint64_t hash() {
    char cmd = 'H';
    write_all(to_child, &cmd, 1);
    std::uint64_t h = 0;
    if (!read_all(from_child, &h, sizeof(h))) die("receiver died");
    return h;
  }
  void zero() {
    char cmd = 'Z';
    write_all(to_child, &cmd, 1);
    if (!read_all(from_child, &cmd, 1)) die("receiver died");
  }
};

Child spawn_receiver(std::size_t pool_bytes) {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) die("pipe failed");
  pid_t pid = fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    run_receiver(up[1], down[0], pool_bytes);
  }
  close(up[1]);
  close(down[0]);
  Child c;
  c.pid = pid;
  c.to_child = down[1];
  c.from_child = up[0];
  std::uint32_t len = 0;
  if (!read_all(c.from_child, &len, sizeof(len))) die("receiver failed to start");
  c.ucx_descriptor.resize(len);
  if (!read_all(c.from_child, c.ucx_descriptor.data(), len) || !read_all(c.from_child, &c.grpc_port, sizeof(int))) {
    die("receiver failed to start");
  }
  return c;
}

// Copies of `copy_bytes` covering [0, total) of both pools, destinations in a shuffled block order.
std::vector<Copy> plan(std::size_t total, std::size_t copy_bytes, std::uint64_t seed) {
  const std::size_t n = total / copy_bytes;
  std::vector<std::size_t> dst(n);
  std::iota(dst.begin(), dst.end(), 0);
  std::shuffle(dst.begin(), dst.end(), std::mt19937_64(seed));
  std::vector<Copy> copies(n);
  for (std::size_t i = 0; i < n; ++i) copies[i] = Copy{i * copy_bytes, dst[i] * copy_bytes, copy_bytes};
  return copies;
}

// One timed transfer: begin, put in 32 slices (as a prefill posts per layer), finish, report.
// `path` gets the way the bytes went.
double time_transfer(baton::kv::KvSender& sender, const baton::kv::TransferTarget& target,
                     const std::vector<Copy>& copies, std::string* path = nullptr) {
  const auto start = Clock::now();
  auto transfer = sender.begin(target);
  if (!transfer.ok()) die(std::string(transfer.status().message()));
  if (path != nullptr) *path = std::string((*transfer)->path());
  const std::size_t slice = std::max<std::size_t>(1, copies.size() / 32);
  for (std::size_t i = 0; i < copies.size(); i += slice) {
    (*transfer)->put(0, std::span<const Copy>(copies).subspan(i, std::min(slice, copies.size() - i)));
  }
  baton::kv::DoneWaiter waiter;
  (*transfer)->finish(Clock::now() + std::chrono::seconds(120), waiter.callback());
  const std::optional<absl::Status> status = waiter.wait_until(Clock::now() + std::chrono::seconds(150));
  if (!status) die("finish() never reported");
  if (!status->ok()) die(std::string(status->message()));
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string transports = "ucx,grpc", cases = "large,small";
  std::size_t total_mib = 64;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + arg);
      return argv[++i];
    };
    if (arg == "--transport") transports = value();
    else if (arg == "--cases") cases = value();
    else if (arg == "--total-mib") total_mib = std::stoul(value());
    else if (arg == "--reps") reps = std::stoi(value());
    else die("unknown flag " + arg);
  }
  const std::size_t total = total_mib << 20;
  Child child = spawn_receiver(total);

  std::vector<char> src(total);
  std::mt19937_64 rng(42);
  for (std::size_t i = 0; i + 8 <= total; i += 8) {
    std::uint64_t v = rng();
    std::memcpy(src.data() + i, &v, 8);
  }
  std::vector<MemoryRegion> local{{"target", src.data(), src.size()}};
  const char* tls = std::getenv("UCX_TLS");

  for (const std::string& transport : split(transports)) {
    std::unique_ptr<baton::kv::KvSender> sender;
    baton::kv::TransferTarget target{"bench", "", 1, ""};
    if (transport == "ucx") {
      auto s = baton::kv::UcxKvSender::create(local);
      if (!s.ok()) die(std::string(s.status().message()));
      sender = std::move(*s);
      target.peer_address = "receiver";
      target.descriptor = child.ucx_descriptor;
    } else if (transport == "grpc") {
      sender = std::make_unique<baton::kv::GrpcKvSender>(local);
      target.peer_address = "127.0.0.1:" + std::to_string(child.grpc_port);
      target.descriptor = std::string(baton::kv::kGrpcKvDescriptor);
    } else {
      die("unknown transport " + transport);
    }
    for (const std::string& name : split(cases)) {
      if (transport == "grpc" && name != "large") continue;  // the fallback is measured for bulk only
      const std::size_t copy_bytes = name == "large" ? (1u << 20) : name == "small" ? 4096u : 0u;
      if (copy_bytes == 0) die("unknown case " + name);
      const std::vector<Copy> copies = plan(total, copy_bytes, 7);
      std::vector<char> expected(total);
      for (const Copy& c : copies) std::memcpy(expected.data() + c.dst_offset, src.data() + c.src_offset, c.bytes);
      const std::uint64_t expected_hash = XXH3_64bits(expected.data(), expected.size());

      child.zero();
      std::string path;
      time_transfer(*sender, target, copies, &path);  // warm-up (and the connection)
      const bool verified = child.hash() == expected_hash;
      std::vector<double> seconds;
      for (int r = 0; r < reps; ++r) seconds.push_back(time_transfer(*sender, target, copies));
      std::sort(seconds.begin(), seconds.end());
      const double median = seconds[seconds.size() / 2];
      nlohmann::json line = {
          {"bench", "kv_transfer"},        {"transport", transport},
          {"path", path},
          {"case", name},                  {"copy_bytes", copy_bytes},
          {"copies", copies.size()},       {"total_bytes", total},
          {"reps", reps},                  {"median_s", median},
          {"gbps", total / median / 1e9},  {"best_gbps", total / seconds.front() / 1e9},
          {"worst_gbps", total / seconds.back() / 1e9},
          {"ucx_tls", tls ? tls : "default"},
          {"verified", verified},
      };
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
      if (!verified) die("the receiver's pool does not hold the expected bytes");
    }
  }
  close(child.to_child);
  int status = 0;
  waitpid(child.pid, &status, 0);
  return 0;
}
