#ifndef TESSERA_KERNELS_CPU_ELEMENTWISE_H_
#define TESSERA_KERNELS_CPU_ELEMENTWISE_H_

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

// The memory-bound per-element ops of the forward pass. `pool` may be null everywhere.
namespace tessera::kernels {

// out[i, j] = silu(gate_up[i, j]) * gate_up[i, inter + j]; gate_up [n, 2*inter],
// out [n, inter].
void SiluMul(const float* gate_up, int n, int inter, float* out, ThreadPool* pool);

// y[i] += x[i], i < n.
void Add(float* y, const float* x, size_t n, ThreadPool* pool);

// y[i, j] += bias[j]; y [n, dim], bias [dim].
void AddBias(float* y, const float* bias, int n, int dim, ThreadPool* pool);

// out[i, :] = table row ids[i] - vocab_begin converted to float when that row exists in
// this shard ([0, table.rows)), else zeros. out [n, table.cols].
void EmbeddingGather(const int32_t* ids, int n, const MatrixView& table, int64_t vocab_begin,
                     float* out, ThreadPool* pool);

// Stores the first kv_heads * head_dim floats of k and v row i (rows row_stride apart) at
// cache slot slots[i] of a [num_blocks, block_size, kv_heads, head_dim] cache of
// shape.dtype (see kv_cache_format.h). Negative slots (padding) and slots past the cache
// are skipped.
void WriteKvCache(const float* k, const float* v, int row_stride, const int64_t* slots, int n,
                  const KvCacheShape& shape, void* k_cache, void* v_cache);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_ELEMENTWISE_H_
