// A UCX receiver in a process of its own, for the tests that kill a decode node: allocates its
// pools in UCX shared memory (target_bytes, draft_bytes from argv), prints
// "DESCRIPTOR <hex>" on stdout, then serves until stdin closes or it is killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kv_transfer/ucx_transport.h"

int main(int argc, char** argv) {
  using namespace baton::kv;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TARGET_BYTES DRAFT_BYTES\n", argv[0]);
    return 2;
  }
  auto shm = UcxShmMemory::create();
  if (!shm.ok()) {
    std::fprintf(stderr, "shared memory: %s\n", std::string(shm.status().message()).c_str());
    return 1;
  }
  std::vector<OwnedRegion> owned;
  std::vector<MemoryRegion> pools;
  const char* names[] = {"target", "draft"};
  for (int i = 0; i < 2; ++i) {
    const std::size_t bytes = std::strtoull(argv[1 + i], nullptr, 10);
    if (*shm == nullptr) {  // UCX_TLS without shared memory: private memory, network path
      owned.push_back(OwnedRegion{new char[bytes](), bytes, nullptr});
      owned.back().owner = std::shared_ptr<void>(owned.back().base, [](void* p) { delete[] static_cast<char*>(p); });
    } else {
      auto region = (*shm)->allocate(bytes, names[i]);
      if (!region.ok()) {
        std::fprintf(stderr, "allocate: %s\n", std::string(region.status().message()).c_str());
        return 1;
      }
      owned.push_back(std::move(*region));
    }
    pools.push_back(MemoryRegion{names[i], owned.back().base, bytes});
  }
  auto receiver = UcxKvReceiver::create(pools, *shm);
  if (!receiver.ok()) {
    std::fprintf(stderr, "receiver: %s\n", std::string(receiver.status().message()).c_str());
    return 1;
  }
  std::string hex;
  for (unsigned char c : (*receiver)->descriptor()) {
    static const char* digits = "0123456789abcdef";
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 15]);
  }
  std::printf("DESCRIPTOR %s\n", hex.c_str());
  std::fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  return 0;
}
