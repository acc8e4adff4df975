// KvCache with an external KvMemoryProvider: the pool lives in the provider's memory (asked for by
// pool name, sized as the backend's would be), is released with the cache, and the provider's
// failures and short allocations are errors that name the pool.
#include <sys/mman.h>

#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_memory.h"
#include "gtest/gtest.h"
#include "tests/engine/kv/small_kv_layout.h"

namespace baton {
namespace {

class RecordingProvider final : public KvMemoryProvider {
 public:
  absl::StatusOr<ExternalMemory> allocate(std::size_t bytes, std::string_view pool_name) override {
    requests.emplace_back(pool_name);
    if (fail) return absl::ResourceExhaustedError("no shared memory");
    const std::size_t given = bytes - short_by;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return absl::InternalError("mmap");
    ++live;
    return ExternalMemory{p, given, std::shared_ptr<void>(p, [this, bytes](void* q) {
                            munmap(q, bytes);
                            --live;
                          })};
  }
  std::vector<std::string> requests;
  int live = 0;
  bool fail = false;
  std::size_t short_by = 0;
};

KvCacheLayout layout() { return testing::small_kv_layout(); }

TEST(KvCacheMemory, PoolLivesInTheProvidersMemoryAndIsReleasedWithTheCache) {
  auto backend = make_cpu_backend(BackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.status();
  RecordingProvider provider;
  {
    auto cache = KvCache::create(**backend, layout(), 5, &provider, "draft");
    ASSERT_TRUE(cache.ok()) << cache.status();
    ASSERT_EQ(provider.requests, std::vector<std::string>{"draft"});
    EXPECT_EQ(provider.live, 1);
    const KvRegion region = cache->region();
    EXPECT_EQ(region.bytes, static_cast<std::size_t>(layout().bytes_per_block() * 5));
    EXPECT_EQ(cache->layer(0).data, region.base);
    EXPECT_EQ(static_cast<char*>(cache->layer(1).data), static_cast<char*>(region.base) + cache->layer_stride());
  }
  EXPECT_EQ(provider.live, 0);
}

TEST(KvCacheMemory, ProviderFailuresAndShortMemoryAreErrors) {
  auto backend = make_cpu_backend(BackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.status();
  RecordingProvider failing;
  failing.fail = true;
  auto refused = KvCache::create(**backend, layout(), 5, &failing, "target");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);

  RecordingProvider short_one;
  short_one.short_by = 1;
  auto too_small = KvCache::create(**backend, layout(), 5, &short_one, "target");
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(std::string(too_small.status().message()).find("pool target"), std::string::npos) << too_small.status();
  EXPECT_EQ(short_one.live, 0);
}

}  // namespace
}  // namespace baton
