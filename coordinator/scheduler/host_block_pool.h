#ifndef TESSERA_COORDINATOR_SCHEDULER_HOST_BLOCK_POOL_H_
#define TESSERA_COORDINATOR_SCHEDULER_HOST_BLOCK_POOL_H_

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

namespace tessera::sched {

// The host-memory KV tier of one replica: which cached block content each of the
// workers' host slots holds, and evicted least recently used first. The KV data itself
// lives in the workers (worker/host_kv_tier.h); the scheduler tells them what to copy in
// each step.
//
// A slot is found by its block's prefix key (DefaultBlockHash chained over every token
// up to the block's end, KVCacheBlock::prefix_key) and confirmed by the block's own
// tokens. Unlike the device pool, which confirms a parent by its identity, the earlier
// blocks are trusted to the 64-bit chain, as vLLM's prefix cache trusts its hashes: a
// slot outlives the blocks before it. Not thread-safe: the scheduler's owner thread is
// its only user.
class HostBlockPool {
 public:
  HostBlockPool(int num_slots, int block_size);
  HostBlockPool(const HostBlockPool&) = delete;
  HostBlockPool& operator=(const HostBlockPool&) = delete;

  // The slot holding this block, or -1.
  int Find(uint64_t prefix_key, absl::Span<const int32_t> tokens) const;
  // A hit: the slot becomes the most recently used, and no Store in step `step` takes it
  // (the step loads from it).
  void Use(int slot, int64_t step);
  // The slot becomes the most recently used (its content was evicted again).
  void Touch(int slot);
  // A slot for a block not held yet: the least recently used one that step `step` does
  // not load from, its old content forgotten; -1 when every slot is in use by this step.
  int Store(uint64_t prefix_key, absl::Span<const int32_t> tokens, int64_t step);
  // Forgets a slot's content (its copy may never have happened: a failed step).
  void Drop(int slot);

  int num_slots() const { return static_cast<int>(slots_.size()); }
  int num_used_slots() const { return num_used_; }

 private:
  struct Slot {
    bool used = false;
    uint64_t prefix_key = 0;
    int64_t pinned_step = -1;
    std::list<int>::iterator lru;
  };
  void Forget(int slot);

  const int block_size_;
  std::vector<Slot> slots_;
  std::vector<int32_t> tokens_;  // block_size_ per slot.
  std::list<int> lru_;           // Front: evicted first (empty slots are there too).
  absl::flat_hash_map<uint64_t, absl::InlinedVector<int, 1>> index_;
  int num_used_ = 0;
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_HOST_BLOCK_POOL_H_
