#include "coordinator/scheduler/host_block_pool.h"

#include <algorithm>

namespace tessera::sched {

HostBlockPool::HostBlockPool(int num_slots, int block_size)
    : block_size_(block_size), slots_(std::max(num_slots, 0)), tokens_(slots_.size() * block_size) {
  for (int i = 0; i < num_slots; ++i) slots_[i].lru = lru_.insert(lru_.end(), i);
  index_.reserve(slots_.size());
}

int HostBlockPool::Find(uint64_t prefix_key, absl::Span<const int32_t> tokens) const {
  auto it = index_.find(prefix_key);
  if (it == index_.end()) return -1;
  for (int slot : it->second) {
    const int32_t* stored = &tokens_[static_cast<size_t>(slot) * block_size_];
    if (std::equal(tokens.begin(), tokens.end(), stored)) return slot;
  }
  return -1;
}

void HostBlockPool::Use(int slot, int64_t step) {
  slots_[slot].pinned_step = step;
  Touch(slot);
}

void HostBlockPool::Touch(int slot) { lru_.splice(lru_.end(), lru_, slots_[slot].lru); }

int HostBlockPool::Store(uint64_t prefix_key, absl::Span<const int32_t> tokens, int64_t step) {
  auto victim = std::find_if(lru_.begin(), lru_.end(), [&](int slot) { return slots_[slot].pinned_step != step; });
  if (victim == lru_.end()) return -1;
  const int slot = *victim;
  Forget(slot);
  Slot& s = slots_[slot];
  s.used = true;
  s.prefix_key = prefix_key;
  std::copy(tokens.begin(), tokens.end(), &tokens_[static_cast<size_t>(slot) * block_size_]);
  index_[prefix_key].push_back(slot);
  ++num_used_;
  lru_.splice(lru_.end(), lru_, s.lru);
  return slot;
}

void HostBlockPool::Drop(int slot) {
  Forget(slot);
  lru_.splice(lru_.begin(), lru_, slots_[slot].lru);  // Empty: reused first.
}

void HostBlockPool::Forget(int slot) {
  Slot& s = slots_[slot];
  if (!s.used) return;
  auto it = index_.find(s.prefix_key);
  auto& bucket = it->second;
  bucket.erase(std::find(bucket.begin(), bucket.end(), slot));
  if (bucket.empty()) index_.erase(it);
  s.used = false;
  --num_used_;
}

}  // namespace tessera::sched
