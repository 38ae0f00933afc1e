#ifndef TESSERA_KERNELS_CPU_KV_CACHE_FORMAT_H_
#define TESSERA_KERNELS_CPU_KV_CACHE_FORMAT_H_

#include <cstdint>

#include "kernels/backend.h"

// How one (slot, head) row of a K or V cache is stored in each element type (see
// KvCacheShape): the writer's and the portable readers' single definition.
namespace tessera::kernels {

// Element index of (slot, head) in a cache of `shape`.
inline int64_t KvRowIndex(const KvCacheShape& shape, int64_t slot, int head) {
  return (slot * shape.num_kv_heads + head) * shape.head_dim;
}

// The float scales of an FP8 cache, [num_blocks * block_size * num_kv_heads].
inline const float* KvScales(const void* cache, const KvCacheShape& shape) {
  return reinterpret_cast<const float*>(static_cast<const char*>(cache) + shape.scales_offset());
}
inline float* KvScales(void* cache, const KvCacheShape& shape) {
  return reinterpret_cast<float*>(static_cast<char*>(cache) + shape.scales_offset());
}

// Stores head_dim floats as row (slot, head): BF16 rounds to nearest even; FP8 stores
// value / scale with scale = max|row| / 448 (1 for an all-zero row).
void StoreKvRow(const float* src, const KvCacheShape& shape, int64_t slot, int head, void* cache);

// Reads row (slot, head) back as head_dim floats.
void LoadKvRow(const void* cache, const KvCacheShape& shape, int64_t slot, int head, float* dst);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_KV_CACHE_FORMAT_H_
