#include "coordinator/scheduler/kv_cache_manager.h"

#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int kBlockSize = 4;

std::vector<int32_t> Range(int32_t first, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Allocates a prompt the way the scheduler does (prefix hits, then the rest in one chunk)
// and marks it computed. Returns the number of hit tokens.
int Prefill(KVCacheManager& kv, SeqId seq, const std::vector<int32_t>& prompt) {
  ComputedBlocks hits = kv.GetComputedBlocks(prompt);
  EXPECT_TRUE(kv.AllocateSlots(seq, hits.num_tokens,
                               static_cast<int>(prompt.size()) - hits.num_tokens, hits));
  kv.CacheFullBlocks(seq, prompt, static_cast<int>(prompt.size()));
  return hits.num_tokens;
}

uint64_t CollidingHash(uint64_t, absl::Span<const int32_t>) { return 7; }

TEST(KVCacheManagerTest, PrefixHitSharesBlocksByReference) {
  KVCacheManager kv(11, kBlockSize);
  const std::vector<int32_t> a = Range(0, 10);  // Blocks: [0..3] [4..7] [8 9]
  EXPECT_EQ(Prefill(kv, 1, a), 0);
  EXPECT_THAT(kv.BlockTable(1), ElementsAre(1, 2, 3));
  EXPECT_TRUE(kv.pool().block(2).block_hash.has_value());
  EXPECT_FALSE(kv.pool().block(3).block_hash.has_value());  // Not full.

  const std::vector<int32_t> b = Concat(Range(0, 8), Range(100, 3));
  EXPECT_EQ(Prefill(kv, 2, b), 8);
  EXPECT_THAT(kv.BlockTable(2), ElementsAre(1, 2, 4));
  EXPECT_EQ(kv.pool().block(1).ref_cnt, 2);
  EXPECT_EQ(kv.pool().block(2).ref_cnt, 2);
  EXPECT_EQ(kv.pool().block(3).ref_cnt, 1);
  EXPECT_EQ(kv.pool().block(4).ref_cnt, 1);
  EXPECT_EQ(kv.num_free_blocks(), 6);
}

TEST(KVCacheManagerTest, BlockWithTheLastPromptTokenIsNeverAHit) {
  KVCacheManager kv(11, kBlockSize);
  Prefill(kv, 1, Range(0, 12));  // Three full cached blocks.
  // Same 8 tokens: only the first block may hit, so token 7 is computed.
  ComputedBlocks hits = kv.GetComputedBlocks(Range(0, 8));
  EXPECT_THAT(hits.block_ids, ElementsAre(1));
  EXPECT_EQ(hits.num_tokens, 4);
  // Same 12 tokens: two blocks of 11 cacheable tokens.
  EXPECT_EQ(kv.GetComputedBlocks(Range(0, 12)).num_tokens, 8);
  EXPECT_EQ(kv.GetComputedBlocks(Range(0, 13)).num_tokens, 12);
  EXPECT_EQ(kv.GetComputedBlocks(Range(0, 1)).num_tokens, 0);
  EXPECT_EQ(kv.GetComputedBlocks(Range(1, 12)).num_tokens, 0);  // Different first block.
}

TEST(KVCacheManagerTest, FreeReturnsBlocksTailFirstAndKeepsThemCached) {
  KVCacheManager kv(11, kBlockSize);
  Prefill(kv, 1, Range(0, 10));                           // 1 2 3
  Prefill(kv, 2, Concat(Range(0, 8), Range(100, 3)));     // 1 2 4
  kv.Free(1);
  EXPECT_THAT(kv.pool().FreeBlockIds(), ElementsAre(5, 6, 7, 8, 9, 10, 3));
  kv.Free(2);
  EXPECT_THAT(kv.pool().FreeBlockIds(), ElementsAre(5, 6, 7, 8, 9, 10, 3, 4, 2, 1));
  EXPECT_THAT(kv.BlockTable(2), IsEmpty());

  // Still cached while free; a hit pulls the blocks out of the middle of the list.
  EXPECT_EQ(Prefill(kv, 3, Range(0, 10)), 8);
  EXPECT_THAT(kv.BlockTable(3), ElementsAre(1, 2, 5));
  EXPECT_THAT(kv.pool().FreeBlockIds(), ElementsAre(6, 7, 8, 9, 10, 3, 4));
}

TEST(KVCacheManagerTest, EvictedBlocksStopHitting) {
  KVCacheManager kv(6, kBlockSize);  // Usable: 1..5.
  Prefill(kv, 1, Range(0, 9));       // 1 2 3; blocks 1 and 2 cached.
  kv.Free(1);                        // Free list: 4 5 3 2 1
  EXPECT_TRUE(kv.AllocateSlots(2, 0, 16));  // Takes 4 5 3 2: block 2 is evicted.
  EXPECT_THAT(kv.BlockTable(2), ElementsAre(4, 5, 3, 2));
  ComputedBlocks hits = kv.GetComputedBlocks(Range(0, 9));
  EXPECT_THAT(hits.block_ids, ElementsAre(1));  // Block 1 is still cached.
}

TEST(KVCacheManagerTest, ShortPoolAllocatesNothing) {
  KVCacheManager kv(11, kBlockSize);
  EXPECT_FALSE(kv.AllocateSlots(1, 0, 41));  // 11 blocks > 10 usable.
  EXPECT_EQ(kv.num_free_blocks(), 10);
  EXPECT_THAT(kv.BlockTable(1), IsEmpty());
  EXPECT_EQ(kv.num_sequences(), 0);

  EXPECT_TRUE(kv.AllocateSlots(1, 0, 20));  // 5 blocks.
  EXPECT_FALSE(kv.AllocateSlots(1, 20, 24));  // 6 more blocks > 5 free.
  EXPECT_THAT(kv.BlockTable(1), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_TRUE(kv.AllocateSlots(1, 20, 1));
  EXPECT_THAT(kv.BlockTable(1), ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_TRUE(kv.AllocateSlots(1, 21, 3));  // Fits in block 6.
  EXPECT_EQ(kv.num_free_blocks(), 4);
}

TEST(KVCacheManagerTest, FreeHitsCountAgainstTheFreeBlocks) {
  KVCacheManager kv(5, kBlockSize);  // Usable: 1..4.
  Prefill(kv, 1, Range(0, 9));       // 1 2 3
  kv.Free(1);                        // Free list: 4 3 2 1, with 1 and 2 cached.
  EXPECT_TRUE(kv.AllocateSlots(2, 0, 8));  // Takes 4 and 3.
  ComputedBlocks hits = kv.GetComputedBlocks(Range(0, 9));
  EXPECT_THAT(hits.block_ids, ElementsAre(1, 2));
  // Two free hits plus one new block, but only the two hit blocks are free.
  EXPECT_FALSE(kv.CanAllocate(3, hits.num_tokens, 1, hits));
  EXPECT_FALSE(kv.AllocateSlots(3, hits.num_tokens, 1, hits));
  EXPECT_THAT(kv.pool().FreeBlockIds(), ElementsAre(2, 1));
  EXPECT_EQ(kv.pool().block(1).ref_cnt, 0);
  kv.Free(2);
  EXPECT_TRUE(kv.AllocateSlots(3, hits.num_tokens, 1, hits));
  EXPECT_THAT(kv.BlockTable(3), ElementsAre(1, 2, 3));
}

TEST(KVCacheManagerTest, SlotMappingFollowsTheBlockTable) {
  KVCacheManager kv(11, kBlockSize);
  Prefill(kv, 1, Range(0, 10));                        // 1 2 3
  Prefill(kv, 2, Concat(Range(0, 8), Range(100, 3)));  // 1 2 4
  EXPECT_THAT(kv.SlotMapping(2, 6, 4), ElementsAre(2 * 4 + 2, 2 * 4 + 3, 4 * 4 + 0, 4 * 4 + 1));
  EXPECT_THAT(kv.SlotMapping(1, 8, 2), ElementsAre(12, 13));
}

TEST(KVCacheManagerTest, DecodeCachesBlocksAsTheyFill) {
  KVCacheManager kv(11, kBlockSize);
  std::vector<int32_t> tokens = {5, 6, 7};
  ASSERT_TRUE(kv.AllocateSlots(1, 0, 3));
  kv.CacheFullBlocks(1, tokens, 3);
  EXPECT_FALSE(kv.pool().block(1).block_hash.has_value());
  tokens.push_back(8);  // Sampled last step; its KV is computed in the next one.
  kv.CacheFullBlocks(1, tokens, 3);
  EXPECT_FALSE(kv.pool().block(1).block_hash.has_value());
  ASSERT_TRUE(kv.AllocateSlots(1, 3, 1));
  kv.CacheFullBlocks(1, tokens, 4);
  EXPECT_TRUE(kv.pool().block(1).block_hash.has_value());
  tokens.push_back(9);
  EXPECT_EQ(kv.GetComputedBlocks(tokens).num_tokens, 4);
}

TEST(KVCacheManagerTest, ForcedHashCollisionsNeverReturnWrongBlocks) {
  KVCacheManager kv(11, kBlockSize, /*enable_prefix_caching=*/true, &CollidingHash);
  const std::vector<int32_t> a = Concat(Range(0, 8), {99});
  const std::vector<int32_t> b = Concat(Range(50, 8), {99});
  Prefill(kv, 1, a);  // 1 2 3
  Prefill(kv, 2, b);  // 4 5 6: every block hashes to 7, none hits a's.
  EXPECT_THAT(kv.BlockTable(2), ElementsAre(4, 5, 6));
  EXPECT_THAT(kv.GetComputedBlocks(a).block_ids, ElementsAre(1, 2));
  EXPECT_THAT(kv.GetComputedBlocks(b).block_ids, ElementsAre(4, 5));
  // a's first block then b's second: the second block's tokens match block 5, but its
  // parent does not.
  const std::vector<int32_t> mixed = Concat(Concat(Range(0, 4), Range(54, 4)), {99});
  EXPECT_THAT(kv.GetComputedBlocks(mixed).block_ids, ElementsAre(1));
  EXPECT_THAT(kv.GetComputedBlocks(Concat(Range(1, 8), {99})).block_ids, IsEmpty());
}

TEST(KVCacheManagerTest, DisabledPrefixCachingNeverHits) {
  KVCacheManager kv(11, kBlockSize, /*enable_prefix_caching=*/false);
  Prefill(kv, 1, Range(0, 10));
  EXPECT_FALSE(kv.pool().block(1).block_hash.has_value());
  EXPECT_EQ(Prefill(kv, 2, Range(0, 10)), 0);
  EXPECT_THAT(kv.BlockTable(2), ElementsAre(4, 5, 6));
}

}  // namespace
}  // namespace tessera::sched
