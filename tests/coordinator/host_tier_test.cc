// The host-memory KV tier's bookkeeping: what the device pool evicts is saved to host
// slots, a prefix found there is loaded into fresh blocks, and a failed step's saves are
// forgotten. (scheduler_simulation_test runs it through thousands of requests.)
#include <vector>

#include "coordinator/scheduler/host_block_pool.h"
#include "coordinator/scheduler/kv_cache_manager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/scheduler_test_util.h"

namespace tessera::sched {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr int kBlockSize = 4;

using testing::Range;

// Prefills `prompt` as the scheduler does and finishes the sequence (its blocks stay
// cached in the free list). Returns the prefix hits it found.
ComputedBlocks PrefillAndFree(KVCacheManager& kv, SeqId seq, const std::vector<int32_t>& prompt) {
  ComputedBlocks hits = kv.GetComputedBlocks(prompt);
  EXPECT_TRUE(kv.AllocateSlots(seq, hits.num_tokens, static_cast<int>(prompt.size()) - hits.num_tokens, hits));
  kv.CacheFullBlocks(seq, prompt, static_cast<int>(prompt.size()));
  kv.Free(seq);
  return hits;
}

TEST(HostBlockPoolTest, FindsByKeyAndTokensAndEvictsTheLeastRecentlyUsed) {
  HostBlockPool host(2, kBlockSize);
  const std::vector<int32_t> a = Range(1, 4), b = Range(5, 4), c = Range(9, 4);
  const int sa = host.Store(11, a, /*step=*/1);
  const int sb = host.Store(22, b, 1);
  ASSERT_NE(sa, sb);
  EXPECT_EQ(host.Find(11, a), sa);
  EXPECT_EQ(host.Find(11, b), -1) << "same key, other tokens";
  EXPECT_EQ(host.Find(33, a), -1);
  host.Touch(sa);  // b is now the least recently used.
  EXPECT_EQ(host.Store(33, c, 2), sb);
  EXPECT_EQ(host.Find(22, b), -1);
  EXPECT_EQ(host.num_used_slots(), 2);
  host.Drop(sa);
  EXPECT_EQ(host.Find(11, a), -1);
  EXPECT_EQ(host.num_used_slots(), 1);
}

TEST(HostBlockPoolTest, ASlotLoadedFromInAStepIsNotReusedInThatStep) {
  HostBlockPool host(1, kBlockSize);
  const int slot = host.Store(11, Range(1, 4), 1);
  host.Use(slot, /*step=*/2);
  EXPECT_EQ(host.Store(22, Range(5, 4), 2), -1) << "the step loads from the only slot";
  EXPECT_EQ(host.Find(11, Range(1, 4)), slot);
  EXPECT_EQ(host.Store(22, Range(5, 4), 3), slot) << "a later step may reuse it";
}

TEST(HostTierTest, EvictedPrefixIsSavedThenLoadedInsteadOfRecomputed) {
  // 4 usable blocks of 4 tokens; a 13-token prompt caches 3 full blocks.
  KVCacheManager kv(5, kBlockSize, true, nullptr, /*num_host_blocks=*/8);
  const std::vector<int32_t> prompt = Range(100, 13);
  kv.BeginStep(1);
  PrefillAndFree(kv, 1, prompt);
  EXPECT_THAT(kv.TakeHostTierCopies().to_host, IsEmpty()) << "nothing evicted yet";

  // Another prompt takes every block: the first prompt's three cached blocks are evicted
  // and saved (in free-list order: tail first).
  kv.BeginStep(2);
  PrefillAndFree(kv, 2, Range(500, 16));
  HostTierCopies saved = kv.TakeHostTierCopies();
  ASSERT_THAT(saved.to_host, SizeIs(3));
  EXPECT_THAT(saved.from_host, IsEmpty());
  EXPECT_EQ(kv.host_pool()->num_used_slots(), 3);

  // The device pool has none of it now; the host tier has all three blocks.
  kv.BeginStep(3);
  ComputedBlocks hits = kv.GetComputedBlocks(prompt);
  EXPECT_THAT(hits.block_ids, IsEmpty());
  ASSERT_THAT(hits.host_slots, SizeIs(3));
  EXPECT_EQ(hits.num_tokens, 12);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(hits.host_slots[i], saved.to_host[2 - i].host_slot) << i;
  ASSERT_TRUE(kv.AllocateSlots(3, hits.num_tokens, 1, hits));
  HostTierCopies loads = kv.TakeHostTierCopies();
  ASSERT_THAT(loads.from_host, SizeIs(3));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(loads.from_host[i].block_id, kv.BlockTable(3)[i]);
    EXPECT_EQ(loads.from_host[i].host_slot, hits.host_slots[i]);
  }
  // The blocks to load into came from evicting the second prompt's four cached blocks,
  // which were saved first (the workers save before they load, so a block may be both).
  EXPECT_THAT(loads.to_host, SizeIs(4));
  EXPECT_EQ(kv.host_pool()->num_used_slots(), 7);
  // Once computed, the loaded blocks are device hits again.
  kv.CacheFullBlocks(3, prompt, 13);
  EXPECT_THAT(kv.GetComputedBlocks(prompt).block_ids, SizeIs(3));
}

TEST(HostTierTest, AFailedStepForgetsWhatItSaved) {
  KVCacheManager kv(5, kBlockSize, true, nullptr, 8);
  const std::vector<int32_t> prompt = Range(100, 13);
  kv.BeginStep(1);
  PrefillAndFree(kv, 1, prompt);
  kv.BeginStep(2);
  PrefillAndFree(kv, 2, Range(500, 16));
  const HostTierCopies copies = kv.TakeHostTierCopies();
  ASSERT_THAT(copies.to_host, SizeIs(3));
  kv.StepFailed(copies);  // The saves may never have happened on the workers.
  EXPECT_THAT(kv.GetComputedBlocks(prompt).host_slots, IsEmpty());
  EXPECT_EQ(kv.host_pool()->num_used_slots(), 0);
}

TEST(HostTierTest, HostHitsNeedPrefixCachingAndContinueTheDeviceHits) {
  KVCacheManager off(5, kBlockSize, /*enable_prefix_caching=*/false, nullptr, 8);
  EXPECT_EQ(off.host_pool(), nullptr);

  // 8 usable blocks. The second prompt shares the first one's first block (a device hit,
  // which keeps it) and takes the six blocks at the free list's head: three never used,
  // the first prompt's partial block and its last two full ones, which go to the host.
  KVCacheManager kv(9, kBlockSize, true, nullptr, 8);
  const std::vector<int32_t> prompt = Range(100, 17);  // 4 full blocks before the last token.
  kv.BeginStep(1);
  PrefillAndFree(kv, 1, prompt);
  std::vector<int32_t> shared = Range(100, 4);
  const std::vector<int32_t> tail = Range(900, 21);
  shared.insert(shared.end(), tail.begin(), tail.end());
  kv.BeginStep(2);
  PrefillAndFree(kv, 2, shared);
  kv.TakeHostTierCopies();
  kv.BeginStep(3);
  ComputedBlocks hits = kv.GetComputedBlocks(prompt);
  EXPECT_THAT(hits.block_ids, SizeIs(2));
  EXPECT_THAT(hits.host_slots, SizeIs(2));
  EXPECT_EQ(hits.num_tokens, 16);
}

TEST(HostTierTest, WithoutAHostTierNothingIsCopied) {
  KVCacheManager kv(5, kBlockSize);
  kv.BeginStep(1);
  PrefillAndFree(kv, 1, Range(100, 13));
  kv.BeginStep(2);
  PrefillAndFree(kv, 2, Range(500, 16));
  const HostTierCopies copies = kv.TakeHostTierCopies();
  EXPECT_THAT(copies.to_host, IsEmpty());
  EXPECT_THAT(copies.from_host, IsEmpty());
  EXPECT_THAT(kv.GetComputedBlocks(Range(100, 13)).host_slots, IsEmpty());
}

}  // namespace
}  // namespace tessera::sched
