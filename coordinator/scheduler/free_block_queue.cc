#include "coordinator/scheduler/free_block_queue.h"

namespace tessera::sched {

FreeBlockQueue::FreeBlockQueue() {
  head_.next_free = &tail_;
  tail_.prev_free = &head_;
}

KVCacheBlock* FreeBlockQueue::PopFront() {
  if (size_ == 0) return nullptr;
  KVCacheBlock* block = head_.next_free;
  Remove(block);
  return block;
}

void FreeBlockQueue::PushBack(KVCacheBlock* block) {
  KVCacheBlock* last = tail_.prev_free;
  last->next_free = block;
  block->prev_free = last;
  block->next_free = &tail_;
  tail_.prev_free = block;
  ++size_;
}

void FreeBlockQueue::Remove(KVCacheBlock* block) {
  block->prev_free->next_free = block->next_free;
  block->next_free->prev_free = block->prev_free;
  block->prev_free = nullptr;
  block->next_free = nullptr;
  --size_;
}

std::vector<BlockId> FreeBlockQueue::Ids() const {
  std::vector<BlockId> ids;
  ids.reserve(size_);
  for (const KVCacheBlock* b = head_.next_free; b != &tail_; b = b->next_free) {
    ids.push_back(b->id);
  }
  return ids;
}

}  // namespace tessera::sched
