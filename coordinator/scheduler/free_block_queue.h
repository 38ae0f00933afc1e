#ifndef TESSERA_COORDINATOR_SCHEDULER_FREE_BLOCK_QUEUE_H_
#define TESSERA_COORDINATOR_SCHEDULER_FREE_BLOCK_QUEUE_H_

#include <vector>

#include "coordinator/scheduler/block.h"

namespace tessera::sched {

// Doubly linked list threaded through the blocks themselves, in LRU order: the head is
// evicted first. Removal from the middle is O(1), which a prefix hit on a free cached
// block needs. Sentinel nodes keep every operation branch-free at the ends.
class FreeBlockQueue {
 public:
  FreeBlockQueue();
  FreeBlockQueue(const FreeBlockQueue&) = delete;
  FreeBlockQueue& operator=(const FreeBlockQueue&) = delete;

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  static bool Contains(const KVCacheBlock& block) { return block.prev_free != nullptr; }

  KVCacheBlock* PopFront();  // Null when empty.
  void PushBack(KVCacheBlock* block);
  void Remove(KVCacheBlock* block);

  // Ids from head (next to evict) to tail; for tests and invariant checks.
  std::vector<BlockId> Ids() const;

 private:
  KVCacheBlock head_;
  KVCacheBlock tail_;
  int size_ = 0;
};

}  // namespace tessera::sched

#endif  // TESSERA_COORDINATOR_SCHEDULER_FREE_BLOCK_QUEUE_H_
