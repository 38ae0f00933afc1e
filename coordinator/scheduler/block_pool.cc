#include "coordinator/scheduler/block_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace tessera::sched {
namespace {

// Broken invariants are programming errors: crash loudly with the cause.
void Check(bool ok, const char* what, BlockId id) {
  if (ok) return;
  std::fprintf(stderr, "BlockPool invariant broken: %s (block %d)\n", what, id);
  std::abort();
}

}  // namespace

BlockPool::BlockPool(int num_blocks, int block_size)
    : block_size_(block_size),
      blocks_(std::max(num_blocks, 1)),
      block_tokens_(static_cast<size_t>(blocks_.size()) * block_size) {
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i].id = static_cast<BlockId>(i);
  for (size_t i = 1; i < blocks_.size(); ++i) free_queue_.PushBack(&blocks_[i]);
  // At most one entry per block: never rehash on the scheduling path.
  cached_blocks_.reserve(blocks_.size());
}

bool BlockPool::Allocate(int n, std::vector<BlockId>* out) {
  if (n > free_queue_.size()) return false;
  for (int i = 0; i < n; ++i) {
    KVCacheBlock* block = free_queue_.PopFront();
    if (block->block_hash.has_value()) Evict(*block);
    block->ref_cnt = 1;
    out->push_back(block->id);
  }
  return true;
}

void BlockPool::Touch(absl::Span<const BlockId> ids) {
  for (BlockId id : ids) {
    KVCacheBlock& block = blocks_[id];
    Check(id != kNullBlock, "touching the null block", id);
    if (block.ref_cnt == 0) free_queue_.Remove(&block);
    ++block.ref_cnt;
  }
}

void BlockPool::Free(absl::Span<const BlockId> ids) {
  for (BlockId id : ids) {
    KVCacheBlock& block = blocks_[id];
    Check(id != kNullBlock && block.ref_cnt > 0, "freeing a block nobody holds", id);
    if (--block.ref_cnt == 0) free_queue_.PushBack(&block);
  }
}

std::optional<BlockId> BlockPool::FindCached(uint64_t hash, BlockId parent,
                                             absl::Span<const int32_t> tokens) const {
  auto it = cached_blocks_.find(hash);
  if (it == cached_blocks_.end()) return std::nullopt;
  const uint64_t parent_cache_id = parent == kNullBlock ? 0 : blocks_[parent].cache_id;
  for (BlockId id : it->second) {
    const KVCacheBlock& block = blocks_[id];
    if (block.parent_cache_id != parent_cache_id) continue;
    const int32_t* stored = &block_tokens_[static_cast<size_t>(id) * block_size_];
    if (std::equal(tokens.begin(), tokens.end(), stored)) return id;
  }
  return std::nullopt;
}

void BlockPool::CacheBlock(BlockId id, uint64_t hash, BlockId parent,
                           absl::Span<const int32_t> tokens, uint64_t prefix_key) {
  KVCacheBlock& block = blocks_[id];
  Check(block.ref_cnt > 0 && !block.block_hash.has_value(), "caching a free or cached block",
        id);
  Check(static_cast<int>(tokens.size()) == block_size_, "caching a partial block", id);
  Check(parent == kNullBlock || blocks_[parent].cache_id != 0, "caching under an uncached parent",
        id);
  block.block_hash = hash;
  block.cache_id = next_cache_id_++;
  block.parent_cache_id = parent == kNullBlock ? 0 : blocks_[parent].cache_id;
  block.prefix_key = prefix_key;
  std::copy(tokens.begin(), tokens.end(), &block_tokens_[static_cast<size_t>(id) * block_size_]);
  cached_blocks_[hash].push_back(id);
  ++num_cached_blocks_;
}

double BlockPool::usage() const {
  if (num_usable_blocks() == 0) return 0.0;
  return static_cast<double>(num_used_blocks()) / num_usable_blocks();
}

void BlockPool::Evict(KVCacheBlock& block) {
  auto it = cached_blocks_.find(*block.block_hash);
  Check(it != cached_blocks_.end(), "cached block missing from the index", block.id);
  auto& ids = it->second;
  auto pos = std::find(ids.begin(), ids.end(), block.id);
  Check(pos != ids.end(), "cached block missing from its hash bucket", block.id);
  ids.erase(pos);
  if (ids.empty()) cached_blocks_.erase(it);
  if (keep_evicted_) {
    const int32_t* tokens = &block_tokens_[static_cast<size_t>(block.id) * block_size_];
    evicted_.push_back({block.id, block.prefix_key, std::vector<int32_t>(tokens, tokens + block_size_)});
  }
  block.block_hash.reset();
  block.cache_id = 0;
  block.parent_cache_id = 0;
  block.prefix_key = 0;
  --num_cached_blocks_;
}

}  // namespace tessera::sched
