#include "coordinator/scheduler/block_pool.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<BlockId> Allocate(BlockPool& pool, int n) {
  std::vector<BlockId> ids;
  EXPECT_TRUE(pool.Allocate(n, &ids));
  return ids;
}

TEST(BlockPoolTest, HandsOutBlocksInIdOrderAndNeverBlockZero) {
  BlockPool pool(/*num_blocks=*/11, /*block_size=*/4);
  EXPECT_EQ(pool.num_usable_blocks(), 10);
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  EXPECT_THAT(Allocate(pool, 3), ElementsAre(1, 2, 3));
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(4, 5, 6, 7, 8, 9, 10));
  EXPECT_EQ(pool.block(1).ref_cnt, 1);
  EXPECT_EQ(pool.block(0).ref_cnt, 0);
  EXPECT_THAT(Allocate(pool, 7), ElementsAre(4, 5, 6, 7, 8, 9, 10));
  EXPECT_EQ(pool.num_free_blocks(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
}

TEST(BlockPoolTest, ShortAllocationChangesNothing) {
  BlockPool pool(11, 4);
  Allocate(pool, 8);
  std::vector<BlockId> ids = {42};
  EXPECT_FALSE(pool.Allocate(3, &ids));
  EXPECT_THAT(ids, ElementsAre(42));
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(9, 10));
}

TEST(BlockPoolTest, FreedBlocksJoinTheTailInTheOrderGiven) {
  BlockPool pool(11, 4);
  Allocate(pool, 4);                  // 1 2 3 4
  pool.Free(std::vector<BlockId>{4, 3, 2, 1});  // A sequence's blocks, tail first.
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(5, 6, 7, 8, 9, 10, 4, 3, 2, 1));
  // The head is reused first.
  EXPECT_THAT(Allocate(pool, 7), ElementsAre(5, 6, 7, 8, 9, 10, 4));
}

TEST(BlockPoolTest, SharedBlocksReturnOnlyWithTheLastReference) {
  BlockPool pool(11, 4);
  Allocate(pool, 2);  // 1 2
  pool.Touch(std::vector<BlockId>{1});
  EXPECT_EQ(pool.block(1).ref_cnt, 2);
  pool.Free(std::vector<BlockId>{1});
  EXPECT_EQ(pool.block(1).ref_cnt, 1);
  EXPECT_EQ(pool.num_free_blocks(), 8);
  pool.Free(std::vector<BlockId>{1});
  EXPECT_EQ(pool.block(1).ref_cnt, 0);
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(3, 4, 5, 6, 7, 8, 9, 10, 1));
}

TEST(BlockPoolTest, TouchPullsAFreeBlockOutOfTheMiddle) {
  BlockPool pool(11, 4);
  pool.Touch(std::vector<BlockId>{5});
  EXPECT_EQ(pool.block(5).ref_cnt, 1);
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(1, 2, 3, 4, 6, 7, 8, 9, 10));
  pool.Free(std::vector<BlockId>{5});
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(1, 2, 3, 4, 6, 7, 8, 9, 10, 5));
}

TEST(BlockPoolTest, FreeCachedBlockStaysFindableUntilReused) {
  BlockPool pool(5, 2);  // Usable: 1 2 3 4.
  const std::vector<int32_t> tokens = {7, 8};
  Allocate(pool, 1);  // 1
  pool.CacheBlock(1, /*hash=*/99, kNullBlock, tokens);
  pool.Free(std::vector<BlockId>{1});
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(2, 3, 4, 1));
  EXPECT_EQ(pool.FindCached(99, kNullBlock, tokens), 1);  // Lazy eviction.
  EXPECT_EQ(pool.num_cached_blocks(), 1);

  EXPECT_THAT(Allocate(pool, 3), ElementsAre(2, 3, 4));
  EXPECT_EQ(pool.FindCached(99, kNullBlock, tokens), 1);
  EXPECT_THAT(Allocate(pool, 1), ElementsAre(1));  // Popped for reuse: evicted now.
  EXPECT_EQ(pool.FindCached(99, kNullBlock, tokens), std::nullopt);
  EXPECT_FALSE(pool.block(1).block_hash.has_value());
  EXPECT_EQ(pool.num_cached_blocks(), 0);
}

TEST(BlockPoolTest, LookupConfirmsTokensAndParent) {
  BlockPool pool(11, 2);
  Allocate(pool, 3);  // 1 2 3
  pool.CacheBlock(1, 5, kNullBlock, std::vector<int32_t>{1, 2});
  pool.CacheBlock(2, 5, 1, std::vector<int32_t>{3, 4});  // Same hash, different content.
  pool.CacheBlock(3, 5, kNullBlock, std::vector<int32_t>{3, 4});  // Same tokens as 2, root.
  EXPECT_EQ(pool.FindCached(5, kNullBlock, std::vector<int32_t>{1, 2}), 1);
  EXPECT_EQ(pool.FindCached(5, 1, std::vector<int32_t>{3, 4}), 2);
  EXPECT_EQ(pool.FindCached(5, kNullBlock, std::vector<int32_t>{3, 4}), 3);
  EXPECT_EQ(pool.FindCached(5, 3, std::vector<int32_t>{3, 4}), std::nullopt);
  EXPECT_EQ(pool.FindCached(5, kNullBlock, std::vector<int32_t>{1, 3}), std::nullopt);
  EXPECT_EQ(pool.FindCached(6, kNullBlock, std::vector<int32_t>{1, 2}), std::nullopt);
}

TEST(BlockPoolTest, ReusedParentOrphansItsCachedChildren) {
  BlockPool pool(4, 2);  // Usable: 1 2 3.
  Allocate(pool, 2);     // 1 2
  pool.CacheBlock(1, 5, kNullBlock, std::vector<int32_t>{1, 2});
  pool.CacheBlock(2, 5, 1, std::vector<int32_t>{3, 4});
  pool.Free(std::vector<BlockId>{1});  // The parent goes first: evicted before its child.
  pool.Free(std::vector<BlockId>{2});
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(3, 1, 2));
  EXPECT_THAT(Allocate(pool, 2), ElementsAre(3, 1));
  // Block 1 now holds the same tokens again, but it is different KV: the child of the old
  // block 1 must not be found under the new one.
  pool.CacheBlock(1, 5, kNullBlock, std::vector<int32_t>{1, 2});
  EXPECT_EQ(pool.FindCached(5, kNullBlock, std::vector<int32_t>{1, 2}), 1);
  EXPECT_EQ(pool.FindCached(5, 1, std::vector<int32_t>{3, 4}), std::nullopt);
  EXPECT_THAT(pool.FreeBlockIds(), ElementsAre(2));
}

TEST(BlockPoolTest, EmptyPoolHasNothingToGive) {
  BlockPool pool(1, 4);
  EXPECT_EQ(pool.num_usable_blocks(), 0);
  EXPECT_THAT(pool.FreeBlockIds(), IsEmpty());
  std::vector<BlockId> ids;
  EXPECT_FALSE(pool.Allocate(1, &ids));
  EXPECT_TRUE(pool.Allocate(0, &ids));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
}

}  // namespace
}  // namespace tessera::sched
