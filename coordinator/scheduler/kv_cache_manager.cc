#include "coordinator/scheduler/kv_cache_manager.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace tessera::sched {
namespace {

void Check(bool ok, const char* what, SeqId seq) {
  if (ok) return;
  std::fprintf(stderr, "KVCacheManager invariant broken: %s (sequence %lld)\n", what,
               static_cast<long long>(seq));
  std::abort();
}

}  // namespace

KVCacheManager::KVCacheManager(int num_blocks, int block_size, bool enable_prefix_caching,
                               BlockHashFn hash_fn, int num_host_blocks)
    : block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      hash_fn_(hash_fn != nullptr ? hash_fn : &DefaultBlockHash),
      pool_(num_blocks, block_size) {
  if (enable_prefix_caching && num_host_blocks > 0) {
    host_ = std::make_unique<HostBlockPool>(num_host_blocks, block_size);
    pool_.set_keep_evicted(true);
  }
}

HostTierCopies KVCacheManager::TakeHostTierCopies() { return std::exchange(copies_, {}); }

void KVCacheManager::StepFailed(const HostTierCopies& copies) {
  if (host_ == nullptr) return;
  for (const KvCopy& c : copies.to_host) host_->Drop(c.host_slot);
}

void KVCacheManager::KeepEvicted() {
  if (host_ == nullptr) return;
  for (const BlockPool::Evicted& e : pool_.TakeEvicted()) {
    const int held = host_->Find(e.prefix_key, e.tokens);
    if (held >= 0) {
      host_->Touch(held);
      continue;
    }
    const int slot = host_->Store(e.prefix_key, e.tokens, step_);
    if (slot >= 0) copies_.to_host.push_back({e.id, slot});
  }
}

ComputedBlocks KVCacheManager::GetComputedBlocks(absl::Span<const int32_t> tokens) const {
  ComputedBlocks result;
  if (!enable_prefix_caching_ || tokens.empty()) return result;
  // (len - 1) / block_size full blocks end before the last token.
  const int max_blocks = static_cast<int>(tokens.size() - 1) / block_size_;
  uint64_t hash = kRootBlockHash;
  BlockId parent = kNullBlock;
  int i = 0;
  for (; i < max_blocks; ++i) {
    absl::Span<const int32_t> block_tokens = tokens.subspan(i * block_size_, block_size_);
    hash = hash_fn_(hash, block_tokens);
    std::optional<BlockId> hit = pool_.FindCached(hash, parent, block_tokens);
    if (!hit.has_value()) break;
    result.block_ids.push_back(*hit);
    parent = *hit;
  }
  // The host tier continues where the device pool's hits end.
  if (host_ != nullptr) {
    uint64_t key = parent == kNullBlock ? kRootBlockHash : pool_.block(parent).prefix_key;
    for (; i < max_blocks; ++i) {
      absl::Span<const int32_t> block_tokens = tokens.subspan(i * block_size_, block_size_);
      key = DefaultBlockHash(key, block_tokens);
      const int slot = host_->Find(key, block_tokens);
      if (slot < 0) break;
      result.host_slots.push_back(slot);
    }
  }
  result.num_tokens = static_cast<int>(result.block_ids.size() + result.host_slots.size()) * block_size_;
  return result;
}

int KVCacheManager::NumBlocksToAllocate(SeqId seq, int num_computed_tokens, int num_new_tokens,
                                        const ComputedBlocks& computed) const {
  auto it = tables_.find(seq);
  const int num_held = it == tables_.end() ? 0 : static_cast<int>(it->second.block_ids.size());
  Check((computed.block_ids.empty() && computed.host_slots.empty()) || num_held == 0,
        "prefix hits for a sequence with blocks", seq);
  const int num_required = NumBlocksFor(num_computed_tokens + num_new_tokens);
  const int num_new_blocks =
      std::max(0, num_required - num_held - static_cast<int>(computed.block_ids.size()));
  int num_free_hits = 0;
  for (BlockId id : computed.block_ids) num_free_hits += pool_.block(id).ref_cnt == 0;
  if (num_new_blocks + num_free_hits > pool_.num_free_blocks()) return -1;
  return num_new_blocks;
}

bool KVCacheManager::CanAllocate(SeqId seq, int num_computed_tokens, int num_new_tokens,
                                 const ComputedBlocks& computed) const {
  return NumBlocksToAllocate(seq, num_computed_tokens, num_new_tokens, computed) >= 0;
}

bool KVCacheManager::AllocateSlots(SeqId seq, int num_computed_tokens, int num_new_tokens,
                                   const ComputedBlocks& computed) {
  const int num_new_blocks =
      NumBlocksToAllocate(seq, num_computed_tokens, num_new_tokens, computed);
  if (num_new_blocks < 0) return false;
  if (num_new_blocks == 0 && computed.block_ids.empty()) return true;
  // Before anything is evicted: a save must not take a slot this step loads from.
  for (int slot : computed.host_slots) host_->Use(slot, step_);
  SeqBlocks& table = tables_[seq];
  if (!computed.block_ids.empty()) {
    pool_.Touch(computed.block_ids);
    table.block_ids = computed.block_ids;
    table.num_cached_blocks = static_cast<int>(computed.block_ids.size());
  }
  // Cannot fail: NumBlocksToAllocate counted the free blocks after the touches.
  Check(pool_.Allocate(num_new_blocks, &table.block_ids), "allocation after a passed check", seq);
  KeepEvicted();
  // The host hits go into the first fresh blocks; the workers save before they load, so
  // a block whose old content was just saved can take a hit in the same step.
  for (size_t i = 0; i < computed.host_slots.size(); ++i) {
    copies_.from_host.push_back({table.block_ids[computed.block_ids.size() + i], computed.host_slots[i]});
  }
  return true;
}

void KVCacheManager::CacheFullBlocks(SeqId seq, absl::Span<const int32_t> tokens,
                                     int num_computed_tokens) {
  if (!enable_prefix_caching_) return;
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  SeqBlocks& table = it->second;
  const int num_full = std::min(num_computed_tokens / block_size_,
                                static_cast<int>(table.block_ids.size()));
  Check(static_cast<int>(tokens.size()) >= num_full * block_size_, "too few tokens to cache",
        seq);
  for (int i = table.num_cached_blocks; i < num_full; ++i) {
    const BlockId parent = i == 0 ? kNullBlock : table.block_ids[i - 1];
    const uint64_t parent_hash =
        i == 0 ? kRootBlockHash : *pool_.block(parent).block_hash;
    absl::Span<const int32_t> block_tokens = tokens.subspan(i * block_size_, block_size_);
    const uint64_t hash = hash_fn_(parent_hash, block_tokens);
    uint64_t prefix_key = 0;
    if (host_ != nullptr) {
      const uint64_t parent_key = i == 0 ? kRootBlockHash : pool_.block(parent).prefix_key;
      prefix_key = hash_fn_ == &DefaultBlockHash ? hash : DefaultBlockHash(parent_key, block_tokens);
    }
    pool_.CacheBlock(table.block_ids[i], hash, parent, block_tokens, prefix_key);
  }
  table.num_cached_blocks = std::max(table.num_cached_blocks, num_full);
}

void KVCacheManager::Free(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  const std::vector<BlockId>& ids = it->second.block_ids;
  std::vector<BlockId> tail_first(ids.rbegin(), ids.rend());
  pool_.Free(tail_first);
  tables_.erase(it);
}

absl::Span<const BlockId> KVCacheManager::BlockTable(SeqId seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return {};
  return it->second.block_ids;
}

std::vector<int64_t> KVCacheManager::SlotMapping(SeqId seq, int start, int num_tokens) const {
  absl::Span<const BlockId> table = BlockTable(seq);
  Check(start >= 0 && NumBlocksFor(start + num_tokens) <= static_cast<int>(table.size()),
        "slot mapping past the block table", seq);
  std::vector<int64_t> slots;
  slots.reserve(num_tokens);
  for (int pos = start; pos < start + num_tokens; ++pos) {
    slots.push_back(static_cast<int64_t>(table[pos / block_size_]) * block_size_ +
                    pos % block_size_);
  }
  return slots;
}

}  // namespace tessera::sched
