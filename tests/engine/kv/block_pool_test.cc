// KV block bookkeeping: allocation, reference counts, rollback, prefix sharing and eviction, and
// that every path returns every block (no leaks).
#include "engine/kv/block_pool.h"

#include <numeric>
#include <random>

#include "engine/kv/block_table.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

std::vector<std::int32_t> iota_tokens(int n, int start = 100) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(KvBlockPool, AllocatesUntilEmptyThenRefuses) {
  KvBlockPool pool(4, 16);
  EXPECT_EQ(pool.num_available(), 4);
  auto all = pool.allocate(4);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(pool.num_available(), 0);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_FALSE(pool.allocate(1).has_value());
  pool.release(*all);
  EXPECT_EQ(pool.num_available(), 4);
}

TEST(KvBlockPool, AllOrNothingAllocation) {
  KvBlockPool pool(3, 16);
  auto one = pool.allocate();
  EXPECT_FALSE(pool.allocate(3).has_value());
  EXPECT_EQ(pool.num_available(), 2);  // nothing was taken by the failed request
  pool.release(*one);
}

TEST(KvBlockPool, SharedBlockFreedOnlyAfterLastRelease) {
  KvBlockPool pool(2, 16);
  const BlockId b = *pool.allocate();
  pool.add_ref(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.num_available(), 1);
  pool.release(b);
  EXPECT_EQ(pool.num_available(), 2);
}

TEST(KvBlockPoolDeathTest, DoubleFreeIsCaught) {
  KvBlockPool pool(2, 16);
  const BlockId b = *pool.allocate();
  pool.release(b);
  EXPECT_DEATH(pool.release(b), "double free");
}

TEST(BlockTable, GrowsShrinksAndMapsSlots) {
  KvBlockPool pool(8, 4);
  BlockTable t(4);
  ASSERT_TRUE(t.grow_to(pool, 10));  // 3 blocks
  EXPECT_EQ(t.num_blocks(), 3);
  EXPECT_EQ(t.slot(9), t.blocks()[2] * 4 + 1);
  t.shrink_to(pool, 5);  // rollback: 2 blocks remain
  EXPECT_EQ(t.num_blocks(), 2);
  EXPECT_EQ(pool.num_available(), 6);
  ASSERT_TRUE(t.grow_to(pool, 8));
  EXPECT_EQ(t.num_blocks(), 2);  // still fits
  EXPECT_FALSE(t.grow_to(pool, 4 * 9));  // needs 7 more, 6 available
  EXPECT_EQ(t.num_blocks(), 2);
  t.release_all(pool);
  EXPECT_EQ(pool.num_available(), 8);
}

TEST(PrefixCache, SecondSequenceReusesFullBlocksOfTheFirst) {
  KvBlockPool pool(16, 4);
  const auto prompt = iota_tokens(10);  // 2 full blocks + 2 tokens
  BlockTable a(4);
  ASSERT_TRUE(a.grow_to(pool, 10));
  a.register_full_blocks(pool, prompt);
  // Same first 8 tokens, different tail.
  auto other = prompt;
  other[9] = 7;
  const auto hit = pool.match_prefix(other, 100);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], a.blocks()[0]);
  EXPECT_EQ(hit[1], a.blocks()[1]);
  EXPECT_EQ(pool.ref_count(hit[0]), 2);
  BlockTable b(4);
  b.adopt_prefix(hit);
  ASSERT_TRUE(b.grow_to(pool, 10));
  EXPECT_NE(b.blocks()[2], a.blocks()[2]);
  a.release_all(pool);
  b.release_all(pool);
  EXPECT_EQ(pool.num_available(), 16);
  EXPECT_EQ(pool.num_cached(), 2);  // the two registered blocks stay cached
}

TEST(PrefixCache, BlocksAreSharedOnlyUnderTheSameSalt) {
  // Two API keys (two salts) with the same prompt: neither finds the other's blocks, so a cache
  // hit tells nothing across keys; each still finds its own.
  KvBlockPool pool(16, 4);
  const auto prompt = iota_tokens(10);
  BlockTable a(4);
  a.set_salt(0xA11CE);
  ASSERT_TRUE(a.grow_to(pool, 10));
  a.register_full_blocks(pool, prompt);
  EXPECT_TRUE(pool.match_prefix(prompt, 100, 0xB0B).empty());
  EXPECT_TRUE(pool.match_prefix(prompt, 100, 0).empty());  // nor a request without a salt
  const auto own = pool.match_prefix(prompt, 100, 0xA11CE);
  ASSERT_EQ(own.size(), 2u);
  EXPECT_EQ(own[0], a.blocks()[0]);
  pool.release(own);
  // The other salt registers its own copy of the same tokens beside the first.
  BlockTable b(4);
  b.set_salt(0xB0B);
  ASSERT_TRUE(b.grow_to(pool, 10));
  b.register_full_blocks(pool, prompt);
  const auto theirs = pool.match_prefix(prompt, 100, 0xB0B);
  ASSERT_EQ(theirs.size(), 2u);
  EXPECT_EQ(theirs[0], b.blocks()[0]);
  EXPECT_NE(theirs[0], a.blocks()[0]);
  pool.release(theirs);
  a.release_all(pool);
  b.release_all(pool);
}

TEST(PrefixCache, DifferentEarlierBlockMeansNoMatch) {
  KvBlockPool pool(8, 4);
  const auto prompt = iota_tokens(8);
  BlockTable a(4);
  ASSERT_TRUE(a.grow_to(pool, 8));
  a.register_full_blocks(pool, prompt);
  auto other = prompt;
  other[0] = 1;  // block 1 has the same tokens, but after a different block 0
  EXPECT_TRUE(pool.match_prefix(other, 100).empty());
  a.release_all(pool);
}

TEST(PrefixCache, MatchIsCappedAndCountsStatistics) {
  KvBlockPool pool(8, 4);
  const auto prompt = iota_tokens(12);
  BlockTable a(4);
  ASSERT_TRUE(a.grow_to(pool, 12));
  a.register_full_blocks(pool, prompt);
  auto hit = pool.match_prefix(prompt, 2);
  EXPECT_EQ(hit.size(), 2u);
  EXPECT_EQ(pool.prefix_queries(), 2);
  EXPECT_EQ(pool.prefix_hits(), 2);
  pool.release(hit);
  a.release_all(pool);
}

TEST(PrefixCache, UnmatchedBlocksGoBackAndLeaveTheHitCount) {
  KvBlockPool pool(8, 4);
  const auto prompt = iota_tokens(12);
  BlockTable a(4);
  ASSERT_TRUE(a.grow_to(pool, 12));
  a.register_full_blocks(pool, prompt);
  auto hit = pool.match_prefix(prompt, 3);
  ASSERT_EQ(hit.size(), 3u);
  pool.unmatch(std::span<const BlockId>(hit).subspan(1));
  EXPECT_EQ(pool.prefix_queries(), 3);
  EXPECT_EQ(pool.prefix_hits(), 1);
  EXPECT_EQ(pool.ref_count(hit[1]), 1);  // a's own reference only
  EXPECT_EQ(pool.ref_count(hit[2]), 1);
  pool.release(hit[0]);
  a.release_all(pool);
  EXPECT_EQ(pool.num_available(), 8);
}

TEST(PrefixCache, KeyLeadKeysEachBlockByTheTokensItsPositionsConsumed) {
  // A head's KV at position p consumed token p + 1 too (key lead 1): block 0 (positions 0..3) is
  // keyed by tokens 0..4, block 1 by tokens 5..8, and a block is registered only when that many
  // tokens are final.
  KvBlockPool pool(8, 4, /*key_lead=*/1);
  EXPECT_EQ(pool.keyed_blocks(8), 1);
  EXPECT_EQ(pool.keyed_blocks(9), 2);
  EXPECT_EQ(pool.keyed_blocks(0), 0);
  const auto tokens = iota_tokens(12);
  BlockTable a(4);
  ASSERT_TRUE(a.grow_to(pool, 12));
  a.register_full_blocks(pool, std::span<const std::int32_t>(tokens).first(8));
  EXPECT_TRUE(pool.is_registered(a.blocks()[0]));
  EXPECT_FALSE(pool.is_registered(a.blocks()[1]));  // its key's last token (8) is not final yet
  a.register_full_blocks(pool, std::span<const std::int32_t>(tokens).first(9));
  EXPECT_TRUE(pool.is_registered(a.blocks()[1]));

  // Token 4 belongs to block 1's positions but to block 0's key: changing it loses both.
  auto other = tokens;
  other[4] = 7;
  EXPECT_TRUE(pool.match_prefix(other, 100).empty());
  // Token 9 is past block 1's key: both still match.
  other = tokens;
  other[9] = 7;
  auto hit = pool.match_prefix(other, 100);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], a.blocks()[0]);
  EXPECT_EQ(hit[1], a.blocks()[1]);
  pool.release(hit);
  // Without the lead's token a block cannot be matched at all.
  EXPECT_EQ(pool.match_prefix(std::span<const std::int32_t>(tokens).first(8), 100).size(), 1u);
  pool.release(a.blocks()[0]);
  a.release_all(pool);
  EXPECT_EQ(pool.num_available(), 8);
}

TEST(PrefixCache, CachedBlocksAreEvictedWhenFreeOnesRunOut) {
  KvBlockPool pool(4, 4);
  const auto prompt = iota_tokens(8);
  BlockTable a(4);
  ASSERT_TRUE(a.grow_to(pool, 8));
  a.register_full_blocks(pool, prompt);
  a.release_all(pool);
  EXPECT_EQ(pool.num_cached(), 2);
  // Take all 4 blocks: 2 free then 2 evicted.
  auto all = pool.allocate(4);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_TRUE(pool.match_prefix(prompt, 100).empty());
  pool.release(*all);
}

TEST(PrefixCache, EvictedParentMakesStaleChildUnreachable) {
  // The child block C stays cached while its parent P is evicted and reused for other content.
  // Even a lookup that presents C's exact hash, tokens and P's id (as a hash collision would) must
  // not chain C onto P's new content.
  KvBlockPool pool(3, 2);
  const std::vector<std::int32_t> p = {1, 2, 3, 4};
  BlockTable a(2);
  ASSERT_TRUE(a.grow_to(pool, 4));
  a.register_full_blocks(pool, p);
  const BlockId parent = a.blocks()[0], child = a.blocks()[1];
  const BlockHash child_hash = KvBlockPool::hash_block(KvBlockPool::hash_block(0, {p.data(), 2}), {p.data() + 2, 2});
  const std::span<const std::int32_t> child_tokens(p.data() + 2, 2);
  EXPECT_EQ(pool.lookup(child_hash, parent, child_tokens), child);
  a.release_all(pool);
  auto held = pool.match_prefix(p, 2);  // holds P and C
  ASSERT_EQ(held.size(), 2u);
  pool.release(parent);                  // P alone becomes cached
  const BlockId spare = *pool.allocate();  // the never-used block
  const BlockId reused = *pool.allocate();  // evicts P
  ASSERT_EQ(reused, parent);
  EXPECT_FALSE(pool.lookup(child_hash, parent, child_tokens).has_value());
  pool.release(spare);
  pool.release(reused);
  pool.release(child);
  EXPECT_EQ(pool.num_in_use(), 0);
}

TEST(PrefixCache, DuplicateContentKeepsOneCanonicalBlock) {
  KvBlockPool pool(8, 4);
  const auto prompt = iota_tokens(8);
  BlockTable a(4), b(4);
  ASSERT_TRUE(a.grow_to(pool, 8));
  ASSERT_TRUE(b.grow_to(pool, 8));
  a.register_full_blocks(pool, prompt);
  b.register_full_blocks(pool, prompt);  // computed the same prompt independently
  EXPECT_FALSE(pool.is_registered(b.blocks()[0]));
  const auto hit = pool.match_prefix(prompt, 100);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], a.blocks()[0]);
  pool.release(hit);
  a.release_all(pool);
  b.release_all(pool);
  EXPECT_EQ(pool.num_available(), 8);
}

TEST(BlockTableDeathTest, RollbackIntoFinalBlocksIsABug) {
  KvBlockPool pool(4, 4);
  BlockTable t(4);
  ASSERT_TRUE(t.grow_to(pool, 8));
  t.register_full_blocks(pool, iota_tokens(8));
  EXPECT_DEATH(t.shrink_to(pool, 6), "final blocks");
}

TEST(KvBlockPool, RandomWorkloadLeaksNothing) {
  std::mt19937 rng(5);
  KvBlockPool pool(64, 4);
  std::vector<BlockTable> tables;
  std::vector<std::vector<std::int32_t>> tokens;
  for (int step = 0; step < 5000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 || tables.empty()) {
      // New sequence, maybe sharing a prefix with a cached one.
      std::vector<std::int32_t> t(static_cast<std::size_t>(1 + rng() % 20));
      for (auto& x : t) x = static_cast<std::int32_t>(rng() % 3);
      BlockTable table(4);
      const auto hit = pool.match_prefix(t, static_cast<std::int32_t>((t.size() - 1) / 4));
      table.adopt_prefix(hit);
      if (!table.grow_to(pool, static_cast<std::int32_t>(t.size()))) {
        table.release_all(pool);
        continue;
      }
      table.register_full_blocks(pool, t);
      tables.push_back(std::move(table));
      tokens.push_back(t);
    } else if (op == 1) {
      const std::size_t i = rng() % tables.size();
      // Speculative append of up to 5 tokens, then rollback of some.
      const auto base = static_cast<std::int32_t>(tokens[i].size());
      const std::int32_t extra = 1 + static_cast<std::int32_t>(rng() % 5);
      if (tables[i].grow_to(pool, base + extra)) {
        const std::int32_t accepted = static_cast<std::int32_t>(rng() % static_cast<unsigned>(extra + 1));
        for (std::int32_t k = 0; k < accepted; ++k) tokens[i].push_back(static_cast<std::int32_t>(rng() % 3));
        tables[i].shrink_to(pool, base + accepted);
        tables[i].register_full_blocks(pool, tokens[i]);
      }
    } else {
      const std::size_t i = rng() % tables.size();
      tables[i].release_all(pool);
      tables.erase(tables.begin() + static_cast<std::ptrdiff_t>(i));
      tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(i));
    }
    std::int32_t held = 0;
    for (const auto& t : tables) held += t.num_blocks();
    ASSERT_LE(pool.num_in_use(), held);  // shared blocks are counted once in the pool
  }
  for (auto& t : tables) t.release_all(pool);
  EXPECT_EQ(pool.num_in_use(), 0);
  EXPECT_EQ(pool.num_available(), 64);
}

}  // namespace
}  // namespace baton
