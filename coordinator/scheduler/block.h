#ifndef TESSERA_COORDINATOR_SCHEDULER_BLOCK_H_
#define TESSERA_COORDINATOR_SCHEDULER_BLOCK_H_

#include <cstdint>
#include <optional>

namespace tessera::sched {

using BlockId = int32_t;
using SeqId = int64_t;

// Block 0 is never handed out, so a zero in a block table can mean "no block".
inline constexpr BlockId kNullBlock = 0;

// Metadata of one KV-cache block. The KV data itself lives only in the workers.
struct KVCacheBlock {
  BlockId id = kNullBlock;
  int ref_cnt = 0;
  // Set once the block is full and its KV computed; kept while the block sits in the free
  // list (lazy eviction), cleared when the block is reused.
  std::optional<uint64_t> block_hash;
  // Identity of this cached content and of its parent's, so a lookup confirms the whole
  // chain, not only the hash: a reused parent gets a new cache_id, orphaning its children.
  uint64_t cache_id = 0;
  uint64_t parent_cache_id = 0;
  // DefaultBlockHash chained over the whole prefix, whatever hash the pool uses: what the
  // host tier knows this content by once it has left the pool (set with block_hash).
  uint64_t prefix_key = 0;
  // Intrusive free-list links; both null when the block is not in the free list.
  KVCacheBlock* prev_free = nullptr;
  KVCacheBlock* next_free = nullptr;
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_BLOCK_H_
