#ifndef TESSERA_COORDINATOR_SCHEDULER_BLOCK_POOL_H_
#define TESSERA_COORDINATOR_SCHEDULER_BLOCK_POOL_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/block.h"
#include "coordinator/scheduler/free_block_queue.h"

namespace tessera::sched {

// The KV-cache blocks of one replica: ref counts, the LRU free list and the prefix-cache
// index. Freed blocks keep their hash and stay findable until they are reused (lazy
// eviction). Not thread-safe: the scheduler's owner thread is its only user.
class BlockPool {
 public:
  // A cached block whose content Allocate gave up, for the host tier to keep.
  struct Evicted {
    BlockId id;
    uint64_t prefix_key;
    std::vector<int32_t> tokens;
  };

  // Blocks 1..num_blocks-1 start free, in id order; block 0 is reserved.
  BlockPool(int num_blocks, int block_size);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Appends `n` blocks with ref_cnt 1 to `out`, taken from the free-list head (evicting
  // their cached hashes). Returns false, changing nothing, when fewer than `n` are free.
  bool Allocate(int n, std::vector<BlockId>* out);
  // Takes one more reference on each block (prefix-cache hits); a free one leaves the list.
  void Touch(absl::Span<const BlockId> ids);
  // Drops one reference on each; blocks reaching zero go to the free-list tail in the
  // order given, so callers pass a sequence's blocks tail first.
  void Free(absl::Span<const BlockId> ids);

  // A cached block holding `tokens` whose parent is `parent` (kNullBlock for the first
  // block), or nullopt. The hash only narrows the search; tokens and parent confirm it.
  std::optional<BlockId> FindCached(uint64_t hash, BlockId parent,
                                    absl::Span<const int32_t> tokens) const;
  // Records a full block (ref_cnt > 0, not yet cached) in the prefix-cache index;
  // `prefix_key` is its KVCacheBlock::prefix_key.
  void CacheBlock(BlockId id, uint64_t hash, BlockId parent, absl::Span<const int32_t> tokens,
                  uint64_t prefix_key = 0);

  const KVCacheBlock& block(BlockId id) const { return blocks_[id]; }
  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_usable_blocks() const { return num_blocks() - 1; }
  int num_free_blocks() const { return free_queue_.size(); }
  int num_used_blocks() const { return num_usable_blocks() - num_free_blocks(); }
  double usage() const;
  int num_cached_blocks() const { return num_cached_blocks_; }
  // Free-list ids from head (evicted next) to tail.
  std::vector<BlockId> FreeBlockIds() const { return free_queue_.Ids(); }

  // Whether Allocate keeps what it evicts for TakeEvicted (off: nobody would take it).
  void set_keep_evicted(bool keep) { keep_evicted_ = keep; }
  // The cached blocks evicted since the last call, in order.
  std::vector<Evicted> TakeEvicted() { return std::exchange(evicted_, {}); }

 private:
  void Evict(KVCacheBlock& block);

  const int block_size_;
  std::vector<KVCacheBlock> blocks_;
  FreeBlockQueue free_queue_;
  // Tokens of every cached block, block_size_ per block, to confirm hits.
  std::vector<int32_t> block_tokens_;
  // Several blocks may share a hash: duplicates computed concurrently, or collisions.
  absl::flat_hash_map<uint64_t, absl::InlinedVector<BlockId, 1>> cached_blocks_;
  int num_cached_blocks_ = 0;
  uint64_t next_cache_id_ = 1;
  bool keep_evicted_ = false;
  std::vector<Evicted> evicted_;
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_BLOCK_POOL_H_
