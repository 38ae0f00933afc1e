#ifndef TESSERA_KERNELS_CPU_ATTENTION_H_
#define TESSERA_KERNELS_CPU_ATTENTION_H_

#include "kernels/backend.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

// Causal paged attention, prefill and decode alike (see Backend::PagedAttention). Token j
// of sequence s (of n new tokens) sits at position context_lens[s] - n + j and attends to
// cache positions [0, position], or (position - batch.sliding_window, position] with a
// window. The cache is read in shape.dtype and converted to float; float32 arithmetic
// throughout, softmax with max subtraction.
// Parallel over (token, query head) on `pool` (may be null). All batch arrays are host
// memory. Uses the ActiveSimdLevel() code path.
void PagedAttention(const float* q, int q_stride, const AttentionBatch& batch,
                    const void* k_cache, const void* v_cache, const KvCacheShape& shape,
                    int num_q_heads, float scale, float* out, ThreadPool* pool);

// The same with an explicit code path (unsupported levels fall back to scalar).
void PagedAttentionAtLevel(SimdLevel level, const float* q, int q_stride,
                           const AttentionBatch& batch, const void* k_cache,
                           const void* v_cache, const KvCacheShape& shape, int num_q_heads,
                           float scale, float* out, ThreadPool* pool);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_ATTENTION_H_
