#ifndef TESSERA_KERNELS_CUDA_PAGED_INDEX_H_
#define TESSERA_KERNELS_CUDA_PAGED_INDEX_H_

#include <cstdint>

// Page-table arithmetic shared by the CUDA kernels and host code (tests, the CPU side of
// the benchmark), so both sides agree on where a token's K/V lives. See
// kernels/backend.h (AttentionBatch, KvCacheShape) for the layout these encode.
#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TESSERA_HOST_DEVICE inline
#endif

namespace tessera::kernels::paged {

// Absolute position of the step's `local`-th token of a sequence that holds `context_len`
// tokens after the step, `num_new` of them computed in this step.
TESSERA_HOST_DEVICE int TokenPosition(int context_len, int num_new, int local) {
  return context_len - num_new + local;
}

// Cache slot (block_id * block_size + offset) of position `pos`, given the sequence's row
// of the block table.
TESSERA_HOST_DEVICE int64_t SlotOf(const int32_t* block_table_row, int pos, int block_size) {
  return static_cast<int64_t>(block_table_row[pos / block_size]) * block_size + pos % block_size;
}

// Element offset of (slot, kv_head, 0) in a [num_blocks, block_size, kv_heads, head_dim]
// cache: slots are contiguous because block_size is the second dimension.
TESSERA_HOST_DEVICE int64_t CacheOffset(int64_t slot, int num_kv_heads, int head_dim,
                                        int kv_head) {
  return (slot * num_kv_heads + kv_head) * head_dim;
}

// The first key position a query at `position` sees: position - window + 1 with a sliding
// window (keys k with position - window < k <= position), else 0.
TESSERA_HOST_DEVICE int FirstVisibleKey(int position, int window) {
  return window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
}

// The keys [*begin, *end) that split-K partition `part` (keys [part * size, (part + 1) *
// size)) scores for a query at `position`: that range cut to the visible keys. Empty
// (*begin >= *end) when the partition lies wholly before the window or after the query.
TESSERA_HOST_DEVICE void PartitionKeys(int part, int partition_size, int position, int window,
                                       int* begin, int* end) {
  const int first = FirstVisibleKey(position, window);
  const int lo = part * partition_size;
  const int hi = lo + partition_size;
  *begin = lo > first ? lo : first;
  *end = hi < position + 1 ? hi : position + 1;
}

// Keys per partition when a query at `position` cuts its visible keys into `num_partitions`
// even pieces (EvenPartitionKeys): the span from the first visible key, rounded down to a
// multiple of `granule`, to the query, divided by num_partitions and rounded up to a
// multiple of `granule`.
TESSERA_HOST_DEVICE int EvenPartitionSize(int num_partitions, int granule, int position,
                                          int window) {
  const int first = FirstVisibleKey(position, window);
  const int span = position + 1 - (first - first % granule);
  const int per_part = (span + num_partitions - 1) / num_partitions;
  return (per_part + granule - 1) / granule * granule;
}

// The keys [*begin, *end) that partition `part` of `num_partitions` scores for a query at
// `position` when the partition count is fixed (kernels/cuda/decode_plan.h) and each query
// spreads its own visible keys over all of them: piece `part` of EvenPartitionSize keys,
// counted from the first visible key rounded down to `granule` (so pieces stay
// block-aligned), cut to the visible keys. Every visible key lands in exactly one
// partition; trailing partitions of a short query are empty (*begin >= *end).
TESSERA_HOST_DEVICE void EvenPartitionKeys(int part, int num_partitions, int granule,
                                           int position, int window, int* begin, int* end) {
  const int first = FirstVisibleKey(position, window);
  const int size = EvenPartitionSize(num_partitions, granule, position, window);
  const int lo = first - first % granule + part * size;
  const int hi = lo + size;
  *begin = lo > first ? lo : first;
  *end = hi < position + 1 ? hi : position + 1;
}

// Where a prefill tile whose first query sits at `first_position` starts walking keys, in
// tiles of `tile` keys: the tile holding the earliest key any of its queries sees (later
// queries see later keys only).
TESSERA_HOST_DEVICE int FirstKeyTile(int first_position, int window, int tile) {
  return FirstVisibleKey(first_position, window) / tile * tile;
}

// Grouped-query attention: query head h reads KV head h / (num_q_heads / num_kv_heads).
TESSERA_HOST_DEVICE int KvHeadOf(int q_head, int num_q_heads, int num_kv_heads) {
  return q_head / (num_q_heads / num_kv_heads);
}

// The sequence owning step token `token`: the largest s with query_start[s] <= token.
// Sequences without new tokens (query_start[s] == query_start[s + 1]) are skipped
// naturally because a later sequence starts at the same index.
TESSERA_HOST_DEVICE int SeqOfToken(const int32_t* query_start, int num_seqs, int token) {
  int lo = 0;
  int hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= token) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace tessera::kernels::paged

#endif  // TESSERA_KERNELS_CUDA_PAGED_INDEX_H_
