// KvCache::append_position_spans names exactly the K and V rows of the positions asked for, and a
// KvHostMirror copies exactly the spans it is given between a pool and its host memory (the rest
// of the mirror, and of the pool, stays as it was), from the provider's memory when given one.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_host_mirror.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "tests/engine/kv/small_kv_layout.h"
#include "kernels/backend.h"

namespace baton {
namespace {

// With 5 blocks a layer is 2560 bytes.
KvCacheLayout layout() { return testing::small_kv_layout(); }

std::unique_ptr<Backend> discrete_backend() {
  BackendOptions o;
  o.cpu_discrete_memory = true;
  auto b = make_cpu_backend(o);
  BATON_CHECK(b.ok(), b.status().ToString());
  return std::move(*b);
}

TEST(KvCacheSpans, PositionSpansAreTheKAndVRowsWritten) {
  auto backend = discrete_backend();
  auto cache = KvCache::create(*backend, layout(), 5);
  ASSERT_TRUE(cache.ok()) << cache.status();
  // Positions 2..8 of a sequence whose blocks are 3, 0, 4: rows 2-3 of block 3, all of block 0,
  // row 0 of block 4; position 12 would be in a fourth block, which the table does not have.
  const std::vector<std::int32_t> blocks = {3, 0, 4};
  std::vector<KvSpan> got;
  cache->append_position_spans(1, 2, 7, blocks, got);
  cache->append_position_spans(0, 12, 1, blocks, got);
  const std::vector<std::pair<std::size_t, std::size_t>> want = {
      {2560 + 3 * 512 + 128, 128}, {2560 + 3 * 512 + 256 + 128, 128},  // block 3: K rows 2-3, V rows 2-3
      {2560 + 0 * 512, 512},                                           // block 0 whole
      {2560 + 4 * 512, 64},        {2560 + 4 * 512 + 256, 64},         // block 4: K row 0, V row 0
  };
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].offset, want[i].first) << i;
    EXPECT_EQ(got[i].bytes, want[i].second) << i;
  }
}

TEST(KvHostMirror, CopiesExactlyTheSpansBothWays) {
  auto backend = discrete_backend();
  auto cache = KvCache::create(*backend, layout(), 5);
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto mirror = KvHostMirror::create(*backend, *cache, nullptr, "target");
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  const KvRegion pool = cache->region(), host = mirror->region();
  ASSERT_EQ(host.bytes, pool.bytes);
  ASSERT_NE(host.base, pool.base);
  auto* p = static_cast<unsigned char*>(pool.base);
  auto* h = static_cast<unsigned char*>(host.base);
  for (std::size_t i = 0; i < pool.bytes; ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
  std::memset(h, 0xee, host.bytes);

  // Two adjacent spans (one run) and one apart.
  const std::vector<KvSpan> spans = {{512, 256}, {768, 64}, {4000, 100}};
  backend->wait_for(mirror->download(spans));
  for (std::size_t i = 0; i < host.bytes; ++i) {
    const bool inside = (i >= 512 && i < 832) || (i >= 4000 && i < 4100);
    ASSERT_EQ(h[i], inside ? p[i] : 0xee) << "byte " << i;
  }

  // Blocks 1 and 2 of both layers go up; nothing else of the pool changes.
  std::memset(h, 0x5a, host.bytes);
  std::vector<KvSpan> up;
  mirror->append_block_spans(std::vector<std::int32_t>{1, 2}, up);
  ASSERT_EQ(up.size(), 4u);
  mirror->upload(up);
  for (std::size_t i = 0; i < pool.bytes; ++i) {
    const std::size_t in_layer = i % 2560;
    const bool inside = in_layer >= 512 && in_layer < 1536;
    ASSERT_EQ(p[i], inside ? 0x5a : static_cast<unsigned char>(i * 7 + 1)) << "byte " << i;
  }
}

class OneShotProvider final : public KvMemoryProvider {
 public:
  absl::StatusOr<ExternalMemory> allocate(std::size_t bytes, std::string_view pool_name) override {
    asked_for = std::string(pool_name);
    auto memory = std::shared_ptr<char[]>(new char[bytes]());
    return ExternalMemory{memory.get(), bytes, memory};
  }
  std::string asked_for;
};

TEST(KvHostMirror, TakesTheProvidersMemory) {
  auto backend = discrete_backend();
  auto cache = KvCache::create(*backend, layout(), 5);
  ASSERT_TRUE(cache.ok()) << cache.status();
  OneShotProvider provider;
  auto mirror = KvHostMirror::create(*backend, *cache, &provider, "draft");
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  EXPECT_EQ(provider.asked_for, "draft");
  EXPECT_EQ(mirror->region().bytes, cache->region().bytes);
}

}  // namespace
}  // namespace baton
