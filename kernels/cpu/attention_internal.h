#ifndef TESSERA_KERNELS_CPU_ATTENTION_INTERNAL_H_
#define TESSERA_KERNELS_CPU_ATTENTION_INTERNAL_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

// Internal to the CPU attention: the per-token kernels of each instruction set.
namespace tessera::kernels::attention_internal {

// Attention of one token at `position` for query heads [head_begin, head_end): reads the
// keys visible to it (all earlier ones, or the last `window`), writes those heads of
// `out_row`. Query head h reads KV head h / group. `scores` is scratch.
using AttendHeadsFn = void (*)(const float* q_row, const int32_t* block_table, int position,
                               int window, int head_begin, int head_end, int group,
                               const void* k_cache, const void* v_cache,
                               const KvCacheShape& shape, float scale,
                               std::vector<float>& scores, float* out_row);

// The AVX-512 kernel for this head size and cache type, or nullptr where it has none
// (head sizes 32, 64, 128; F32, BF16 and F8E4M3 caches).
AttendHeadsFn Avx512AttendHeads(int head_dim, DType cache_dtype);

}  // namespace tessera::kernels::attention_internal

#endif  // TESSERA_KERNELS_CPU_ATTENTION_INTERNAL_H_
