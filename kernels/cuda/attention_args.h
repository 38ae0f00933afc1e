#ifndef TESSERA_KERNELS_CUDA_ATTENTION_ARGS_H_
#define TESSERA_KERNELS_CUDA_ATTENTION_ARGS_H_

#include <cstdint>

#include "common/dtype.h"
#include "kernels/backend.h"

// The arguments every paged-attention kernel takes (attention_kernels.cu,
// attention_tc_kernels.cu), built once from the backend's batch and cache shape.
namespace tessera::kernels::gpu {

// Passed to the kernels by value.
struct AttentionArgs {
  const void* q;  // Activations: float32, or BF16 when `bf16`.
  int q_stride;
  const int32_t* query_start;
  const int32_t* context_lens;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  int num_seqs;
  const void* k_cache;
  const void* v_cache;
  const float* k_scales;  // FP8 caches: one scale per (slot, kv head); else null.
  const float* v_scales;
  int block_size;
  int num_kv_heads;
  int num_q_heads;
  float scale;
  int window;  // AttentionBatch::sliding_window; 0 = none.
  void* out;  // [num_tokens, num_q_heads * head_dim], activations like q.
  bool bf16;  // The activation dtype is BF16 (else float32).
};

inline AttentionArgs MakeArgs(const void* q, int q_stride, const AttentionBatch& batch,
                              const void* k_cache, const void* v_cache,
                              const KvCacheShape& shape, int num_q_heads, float scale,
                              void* out, DType act) {
  const bool fp8 = shape.dtype == DType::kF8E4M3;
  auto scales_of = [&](const void* cache) -> const float* {
    return fp8 ? reinterpret_cast<const float*>(static_cast<const char*>(cache) +
                                                shape.scales_offset())
               : nullptr;
  };
  return AttentionArgs{q,
                       q_stride,
                       batch.query_start,
                       batch.context_lens,
                       batch.block_tables,
                       batch.max_blocks_per_seq,
                       batch.num_seqs,
                       k_cache,
                       v_cache,
                       scales_of(k_cache),
                       scales_of(v_cache),
                       shape.block_size,
                       shape.num_kv_heads,
                       num_q_heads,
                       scale,
                       batch.sliding_window,
                       out,
                       act == DType::kBF16};
}

}  // namespace tessera::kernels::gpu

#endif  // TESSERA_KERNELS_CUDA_ATTENTION_ARGS_H_
