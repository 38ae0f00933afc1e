#ifndef TESSERA_KERNELS_CPU_ROPE_H_
#define TESSERA_KERNELS_CPU_ROPE_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

// Hugging Face rotate-half RoPE, in place, on heads [0, num_q_heads + num_kv_heads) of
// each of the n rows of `qkv` (row_stride floats apart, head_dim floats per head). Element
// i < head_dim / 2 of a head pairs with i + head_dim / 2 and turns by the float32 angle
// positions[row] * inv_freq[i] (float32 like transformers, so the CUDA kernel and the
// reference agree); cos and sin of that angle are taken in double and scaled by
// `cos_sin_scale`. Parallel over rows on `pool`.
void Rope(float* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
          int num_kv_heads, int head_dim, const float* inv_freq, float cos_sin_scale,
          ThreadPool* pool);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_ROPE_H_
