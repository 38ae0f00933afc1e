#ifndef TESSERA_COORDINATOR_SCHEDULER_KV_CACHE_MANAGER_H_
#define TESSERA_COORDINATOR_SCHEDULER_KV_CACHE_MANAGER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/block.h"
#include "coordinator/scheduler/block_hash.h"
#include "coordinator/scheduler/block_pool.h"
#include "coordinator/scheduler/host_block_pool.h"
#include "coordinator/scheduler/step_plan.h"

namespace tessera::sched {

// Prefix-cache hits for a sequence that holds no blocks yet: blocks of the device pool,
// then host-tier slots that continue the prefix (loaded into fresh blocks).
struct ComputedBlocks {
  std::vector<BlockId> block_ids;
  std::vector<int> host_slots;
  int num_tokens = 0;  // (block_ids.size() + host_slots.size()) * block_size
};

// Block tables of the sequences of one replica, on top of its BlockPool, plus the prefix
// cache. Tables are append-only until the sequence is freed.
class KVCacheManager {
 public:
  // `hash_fn` null means DefaultBlockHash. `num_host_blocks` > 0 (with prefix caching)
  // adds a host-memory tier of that many blocks: cached blocks evicted from the device
  // pool are saved there, and a prefix found there is loaded instead of recomputed.
  KVCacheManager(int num_blocks, int block_size, bool enable_prefix_caching = true,
                 BlockHashFn hash_fn = nullptr, int num_host_blocks = 0);

  // Starts planning step `step`: host slots loaded from in it are not reused in it.
  void BeginStep(int64_t step) { step_ = step; }
  // The copies the allocations since the last call need, for the step being planned.
  HostTierCopies TakeHostTierCopies();
  // The step that carried `copies` failed, so its saves may not have happened: their
  // slots are forgotten.
  void StepFailed(const HostTierCopies& copies);

  // The longest run of cached full blocks that prefixes `tokens`. The block holding the
  // last token is never a hit, so at least one token is always computed.
  ComputedBlocks GetComputedBlocks(absl::Span<const int32_t> tokens) const;

  // Whether AllocateSlots with the same arguments would succeed.
  bool CanAllocate(SeqId seq, int num_computed_tokens, int num_new_tokens,
                   const ComputedBlocks& computed = {}) const;
  // Makes room for tokens [num_computed_tokens, num_computed_tokens + num_new_tokens).
  // `computed` (only for a sequence without blocks) are its prefix hits, already counted
  // in num_computed_tokens. Returns false, changing nothing, when blocks run out.
  bool AllocateSlots(SeqId seq, int num_computed_tokens, int num_new_tokens,
                     const ComputedBlocks& computed = {});
  // Records that the KV of tokens[0, num_computed_tokens) exists: blocks that became full
  // enter the prefix cache. Called after each step, so no sequence ever hits a block whose
  // KV is still being computed.
  void CacheFullBlocks(SeqId seq, absl::Span<const int32_t> tokens, int num_computed_tokens);
  // Returns all blocks of `seq`, tail first (evicted first). No-op for an unknown sequence.
  void Free(SeqId seq);

  // The block table of `seq`; empty for an unknown sequence.
  absl::Span<const BlockId> BlockTable(SeqId seq) const;
  // KV slot (block_id * block_size + offset) of tokens [start, start + num_tokens).
  std::vector<int64_t> SlotMapping(SeqId seq, int start, int num_tokens) const;

  const BlockPool& pool() const { return pool_; }
  const HostBlockPool* host_pool() const { return host_.get(); }
  int block_size() const { return block_size_; }
  int num_free_blocks() const { return pool_.num_free_blocks(); }
  double usage() const { return pool_.usage(); }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }
  int num_sequences() const { return static_cast<int>(tables_.size()); }
  int NumBlocksFor(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

 private:
  struct SeqBlocks {
    std::vector<BlockId> block_ids;
    int num_cached_blocks = 0;  // Prefix of block_ids already in the prefix cache.
  };

  // Fresh blocks needed, counting hits that sit in the free list (touching them takes
  // them out of it); -1 when the pool cannot provide them.
  int NumBlocksToAllocate(SeqId seq, int num_computed_tokens, int num_new_tokens,
                          const ComputedBlocks& computed) const;

  // Saves what the pool evicted to the host tier (when it has no copy yet).
  void KeepEvicted();

  const int block_size_;
  const bool enable_prefix_caching_;
  const BlockHashFn hash_fn_;
  BlockPool pool_;
  std::unique_ptr<HostBlockPool> host_;  // Null: no host tier.
  int64_t step_ = 0;
  HostTierCopies copies_;
  absl::flat_hash_map<SeqId, SeqBlocks> tables_;
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_KV_CACHE_MANAGER_H_
