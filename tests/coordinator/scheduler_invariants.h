#ifndef TESSERA_TESTS_COORDINATOR_SCHEDULER_INVARIANTS_H_
#define TESSERA_TESTS_COORDINATOR_SCHEDULER_INVARIANTS_H_

// The invariants the randomized scheduler simulations check after every step.

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace tessera::sched::testing {

// Every block's ref count equals the tables that hold it, the free list holds exactly the
// unreferenced blocks, and only sequences that may hold blocks do. `live`: the sequences
// the scheduler still knows.
inline void CheckBlocks(const Scheduler& s, const absl::flat_hash_set<SeqId>& live) {
  const KVCacheManager& kv = s.kv_cache_manager();
  const BlockPool& pool = kv.pool();
  std::vector<int> owners(pool.num_blocks(), 0);
  int num_with_blocks = 0;
  for (SeqId id : live) {
    const Sequence* seq = s.GetSequence(id);
    ASSERT_NE(seq, nullptr) << "live sequence " << id << " unknown to the scheduler";
    absl::Span<const BlockId> table = kv.BlockTable(id);
    if (seq->status == SequenceStatus::kWaiting) {
      ASSERT_TRUE(table.empty()) << "waiting sequence " << id << " holds blocks";
      continue;
    }
    num_with_blocks += !table.empty();
    ASSERT_LE(seq->num_computed_tokens, static_cast<int>(table.size()) * kv.block_size());
    absl::flat_hash_set<BlockId> seen;
    for (BlockId b : table) {
      ASSERT_NE(b, kNullBlock) << "sequence " << id;
      ASSERT_TRUE(seen.insert(b).second) << "block " << b << " twice in sequence " << id;
      ++owners[b];
    }
  }
  ASSERT_EQ(kv.num_sequences(), num_with_blocks);
  std::vector<bool> in_free_list(pool.num_blocks(), false);
  const std::vector<BlockId> free_ids = pool.FreeBlockIds();
  for (BlockId b : free_ids) {
    ASSERT_FALSE(in_free_list[b]) << "block " << b << " twice in the free list";
    in_free_list[b] = true;
  }
  ASSERT_FALSE(in_free_list[kNullBlock]);
  ASSERT_EQ(pool.block(kNullBlock).ref_cnt, 0);
  int num_used = 0;
  for (BlockId b = 1; b < pool.num_blocks(); ++b) {
    ASSERT_EQ(pool.block(b).ref_cnt, owners[b]) << "block " << b;
    ASSERT_EQ(in_free_list[b], owners[b] == 0) << "block " << b;
    num_used += owners[b] > 0;
  }
  ASSERT_EQ(pool.num_free_blocks(), static_cast<int>(free_ids.size()));
  ASSERT_EQ(num_used + pool.num_free_blocks(), pool.num_usable_blocks());
}

inline void CheckPlan(const StepPlan& plan, const SchedulerConfig& c) {
  absl::flat_hash_set<SeqId> scheduled;
  int total = 0;
  auto visit = [&](SeqId id, int n, int lookahead, bool samples) {
    ASSERT_TRUE(scheduled.insert(id).second) << "sequence " << id << " scheduled twice";
    ASSERT_GT(n, 0);
    if (c.long_prefill_token_threshold > 0) {
      ASSERT_LE(n, c.long_prefill_token_threshold);
    }
    ASSERT_GE(lookahead, 0);
    ASSERT_LE(lookahead, c.num_speculative_tokens);
    if (lookahead > 0) {
      ASSERT_TRUE(samples && n == 1) << "lookahead outside a decode: " << id;
    }
    total += n + lookahead;
  };
  for (const auto& d : plan.new_seqs) visit(d.seq_id, d.num_scheduled_tokens, d.num_lookahead_tokens, d.samples_token);
  for (const auto& d : plan.cached_seqs) visit(d.seq_id, d.num_scheduled_tokens, d.num_lookahead_tokens, d.samples_token);
  for (SeqId id : plan.preempted_ids) ASSERT_FALSE(scheduled.contains(id)) << id;
  ASSERT_EQ(total, plan.total_num_scheduled_tokens);
  ASSERT_LE(total, c.max_num_batched_tokens);
  ASSERT_LE(plan.num_scheduled_seqs(), c.max_num_seqs);
}

}  // namespace tessera::sched::testing

#endif  // TESSERA_TESTS_COORDINATOR_SCHEDULER_INVARIANTS_H_
